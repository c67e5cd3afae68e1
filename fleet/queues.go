package fleet

// SharedQueue is the queue every worker drains.
const SharedQueue = "pi-jobs"

// HostQueuePrefix starts every host queue name. "@" is outside the worker
// name charset, so a host queue name splits unambiguously.
const HostQueuePrefix = SharedQueue + "@"

// HostQueueName is the queue of the named worker: jobs only it may run and
// its cron schedulers.
func HostQueueName(worker string) string { return HostQueuePrefix + worker }
