package fleet_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/pidispatch/pidispatch/fleet"
)

// CheckJobID is the one job id rule: 1 to MaxJobIDBytes bytes of UTF-8
// without control characters.
func TestCheckJobID(t *testing.T) {
	for _, ok := range []string{"a", strings.Repeat("x", fleet.MaxJobIDBytes), "123", "a:b", "日本語", "x@y#z/w"} {
		if err := fleet.CheckJobID(ok); err != nil {
			t.Errorf("fleet.CheckJobID(%q) = %v", ok, err)
		}
	}
	for _, bad := range []string{"", strings.Repeat("x", fleet.MaxJobIDBytes+1), "a\nb", "a\x00", "a\x7f", "a\u0085", "\xff",
		"rtl-\u202e-x", "zw\u200bj", "bom\ufeff", "sep\u2028x", "para\u2029x", "tag\U000e0041"} {
		if err := fleet.CheckJobID(bad); err == nil {
			t.Errorf("fleet.CheckJobID(%q) accepted", bad)
		}
	}
	if err := fleet.CheckJobID("a\tb"); !errors.Is(err, fleet.ErrInvalidJobID) {
		t.Errorf("CheckJobID(a\\tb) = %v, want ErrInvalidJobID", err)
	}
}
