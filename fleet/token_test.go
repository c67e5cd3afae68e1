package fleet_test

import (
	"encoding/hex"
	"testing"

	"github.com/pidispatch/pidispatch/fleet"
)

func TestNewToken_IsRandomHex(t *testing.T) {
	seen := map[string]bool{}
	for range 1000 {
		tok := fleet.NewToken()
		b, err := hex.DecodeString(tok)
		if err != nil || len(b) != 16 {
			t.Fatalf("token %q: want 32 hex digits (%v)", tok, err)
		}
		if seen[tok] {
			t.Fatalf("token %q repeated", tok)
		}
		seen[tok] = true
	}
}
