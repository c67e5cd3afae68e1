package queue

import (
	"fmt"
	"regexp"
	"strings"
)

// SharedQueue is the queue every worker drains.
const SharedQueue = "pi-jobs"

// hostQueuePrefix starts every host queue name. "@" is outside the worker
// name charset, so a host queue name splits unambiguously.
const hostQueuePrefix = SharedQueue + "@"

// workerNameRE is the worker name rule (the registry's; kept here so that
// queue imports no package of ours).
var workerNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// HostQueueName is the queue of the named worker: jobs only it may run and
// its cron schedulers.
func HostQueueName(worker string) string { return hostQueuePrefix + worker }

// ValidateQueueName accepts SharedQueue and HostQueueName(w) for a valid
// worker name w: 1-64 characters of [A-Za-z0-9._-], starting with a letter
// or digit, not ending in .json or .log (any case). Names read from peers
// (registry rows, SCAN results) must pass it before any key is built from
// them.
func ValidateQueueName(name string) error {
	if name == SharedQueue {
		return nil
	}
	worker, ok := strings.CutPrefix(name, hostQueuePrefix)
	if !ok {
		return fmt.Errorf("%w %q: not %q or %q+worker", ErrInvalidQueueName, name, SharedQueue, hostQueuePrefix)
	}
	if !validWorkerName(worker) {
		return fmt.Errorf("%w %q: bad worker name", ErrInvalidQueueName, name)
	}
	return nil
}

func validWorkerName(w string) bool {
	if !workerNameRE.MatchString(w) {
		return false
	}
	lower := strings.ToLower(w)
	return !strings.HasSuffix(lower, ".json") && !strings.HasSuffix(lower, ".log")
}
