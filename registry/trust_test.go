package registry

import (
	"testing"

	"github.com/pidispatch/pidispatch/fleet"
)

// Without a fleet key no row can be checked: a row is trusted only when
// its host queue takes unsigned jobs by the operator's own list, so a
// Valkey writer's fake rows steer no job by default.
func TestTrustWithoutAKey(t *testing.T) {
	rows := func() []Host { return []Host{{Name: "web"}, {Name: "fake-1"}} }
	for _, tc := range []struct {
		unsigned []string
		want     []bool // Untrusted, per row
	}{
		{nil, []bool{true, true}},
		{[]string{fleet.SharedQueue}, []bool{true, true}},
		{[]string{fleet.HostQueueName("web")}, []bool{false, true}},
		{[]string{fleet.EveryQueue}, []bool{false, false}},
	} {
		got := Trust(rows(), fleet.Key{}, tc.unsigned)
		for i, h := range got {
			if h.Untrusted != tc.want[i] {
				t.Errorf("unsigned %q: %s untrusted = %v, want %v", tc.unsigned, h.Name, h.Untrusted, tc.want[i])
			}
		}
	}
}
