package queue

import (
	"fmt"
	"strings"

	"github.com/pidispatch/pidispatch/fleet"
)

// ValidateQueueName accepts fleet.SharedQueue and fleet.HostQueueName(w) for a valid
// worker name w: 1-64 characters of [A-Za-z0-9._-], starting with a letter
// or digit, not ending in .json or .log (any case). Names read from peers
// (registry rows, SCAN results) must pass it before any key is built from
// them.
func ValidateQueueName(name string) error {
	if name == fleet.SharedQueue {
		return nil
	}
	worker, ok := strings.CutPrefix(name, fleet.HostQueuePrefix)
	if !ok {
		return fmt.Errorf("%w %q: not %q or %q+worker", ErrInvalidQueueName, name, fleet.SharedQueue, fleet.HostQueuePrefix)
	}
	if fleet.ValidateName(worker) != nil {
		return fmt.Errorf("%w %q: bad worker name", ErrInvalidQueueName, name)
	}
	return nil
}
