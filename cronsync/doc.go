// Package cronsync turns the cron entries of a triggers.json file into job
// schedulers on a queue, and keeps a fleet of workers from undoing each other's
// schedules.
//
// # The pieces
//
//   - [ParseTriggers] validates a whole triggers file strictly and returns its
//     cron entries ([Entry]) and, untouched, every other trigger (webhook and
//     forge rules belong to front-ends). Every problem is reported at once, each
//     naming the trigger and the field.
//   - [Authored] reads the cron set as written; [ReadOwn] records whether this
//     host has an opinion at all ([Own]); [Served] keeps the entries whose folder
//     is on this machine.
//   - [Reconcile] installs the served entries as job schedulers and removes the
//     ones the set no longer names. [JobData] is the job every run carries.
//   - [ReconcileGated] reconciles only when no live peer holds a different
//     opinion of the authored set (the original's cron agreement gate).
//   - [Watcher] reloads the set when the file changes, keeping the last good set
//     when an edit is invalid, and [LiveSet] feeds the registry's fpCron and
//     cronCount facts from the set currently believed.
//   - [AdmitRun] decides, for each run a scheduler made, whether this host
//     agreed to it ([LiveSet.Agreed]), and otherwise whether to leave it for a
//     peer or refuse it.
//
// # Abstain, opine, or cannot say
//
// A host whose PI_TRIGGERS_FILE is unset has cron disabled: it publishes an
// empty fingerprint and never disagrees with anyone (Own.Configured false). A
// host whose file declares no cron entry has an opinion, "there should be no
// schedulers", and its fingerprint blocks a host that wants one. A host whose
// file is configured but cannot be read or parsed at this instant (a rename's
// unlink window) publishes an empty fingerprint too, but it refuses to reconcile
// while any peer holds an opinion, because it cannot establish agreement with
// an opinion it does not have.
//
// # Who runs a run
//
// Installing is gated; running is too. A host runs a scheduler's run only when
// its own live set has a trigger of that id whose [JobData] is the run's data,
// so a host with cron disabled runs none, whatever schedulers Valkey holds, and
// a trigger removed from the file stops running even while a divergence
// withholds the prune. A run nobody else would take (on a host queue) is
// refused, and the caller records it; on the shared queue it is left for a
// peer that holds another opinion, which may be the host that agreed to it.
// Removing a scheduler removes its runs that have not started, deferred ones
// included (queue.Queue.RemoveScheduler).
//
// # Where schedulers live
//
// A worker with a declared name keeps its schedulers on its own queue
// (fleet.HostQueueName(name)); an undeclared one on the shared queue. The caller
// chooses the store. On host queues two hosts can no longer prune each other's
// schedulers; the gate still catches a divergent file or time zone, which would
// otherwise make the same trigger fire at different instants on different hosts.
package cronsync
