package fleet

// SharedQueue is the queue every worker drains.
const SharedQueue = "pi-jobs"

// HostQueuePrefix starts every host queue name. "@" is outside the worker
// name charset, so a host queue name splits unambiguously.
const HostQueuePrefix = SharedQueue + "@"

// HostQueueName is the queue of the named worker: jobs only it may run and
// its cron schedulers.
func HostQueueName(worker string) string { return HostQueuePrefix + worker }

// EveryQueue, in a list of queues that take unsigned jobs
// (PI_UNSIGNED_QUEUES), names every queue.
const EveryQueue = "*"

// UnsignedAllowed reports whether queue takes jobs the fleet key did not
// sign: the operator listed it, or listed EveryQueue. A fleet without a key
// signs nothing, so this list is also its explicit opt-in to run forge and
// folder jobs that anyone able to write to Valkey can queue.
func UnsignedAllowed(queues []string, queue string) bool {
	for _, q := range queues {
		if q == EveryQueue || q == queue {
			return true
		}
	}
	return false
}
