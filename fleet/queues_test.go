package fleet_test

import (
	"testing"

	"github.com/pidispatch/pidispatch/fleet"
)

func TestUnsignedAllowed(t *testing.T) {
	cases := []struct {
		list  []string
		queue string
		want  bool
	}{
		{nil, fleet.SharedQueue, false},
		{[]string{fleet.SharedQueue}, fleet.SharedQueue, true},
		{[]string{fleet.SharedQueue}, fleet.HostQueueName("web"), false},
		{[]string{fleet.HostQueueName("web")}, fleet.HostQueueName("web"), true},
		{[]string{fleet.HostQueueName("web")}, fleet.HostQueueName("web2"), false},
		{[]string{fleet.EveryQueue}, fleet.HostQueueName("any"), true},
		{[]string{"pi-jobs*"}, fleet.HostQueueName("web"), false},
	}
	for _, c := range cases {
		if got := fleet.UnsignedAllowed(c.list, c.queue); got != c.want {
			t.Errorf("UnsignedAllowed(%q, %q) = %v, want %v", c.list, c.queue, got, c.want)
		}
	}
}
