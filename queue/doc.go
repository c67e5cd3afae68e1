// Package queue is the job queue of pidispatch: jobs, delays, retries,
// deferrals, pause, counts, stalled jobs, dedup and cron schedulers, on
// Valkey in BullMQ's key layout, so that Node.js BullMQ producers, workers
// and dashboards (Bull Board) share the queues with Go workers.
//
// # Layout
//
// Keys are BullMQ's (6.7.6, and 5.80.4's), under the prefix "bull" and the
// queue name (fleet.SharedQueue "pi-jobs", or fleet.HostQueueName(worker)
// "pi-jobs@<worker>"). The majors differ in pause alone: 6 leaves a paused
// queue's ready jobs in wait, 5 moves them to the paused list. Each queue
// follows the major its meta "version" names, else Config.Layout, which
// the first call records there (layout.go):
//
//	<p>:<q>:wait, :paused, :active       LISTs of ready, paused-ready (5's layout), held job ids
//	<p>:<q>:delayed                      ZSET, score dueMs*4096+seq
//	<p>:<q>:prioritized, :pc             ZSET priority*2^32+counter, and its counter
//	<p>:<q>:completed, :failed           ZSETs scored by finishedOn
//	<p>:<q>:marker                       ZSET consumers BZPOPMIN on: "0" = ready, "1" = next due time
//	<p>:<q>:meta                         HASH: paused, concurrency, opts.maxLenEvents, version
//	<p>:<q>:events                       STREAM of BullMQ events
//	<p>:<q>:id                           job id counter
//	<p>:<q>:stalled                      SET BullMQ's stalled check uses (we only remove from it)
//	<p>:<q>:<jobId>                      job HASH: name data opts timestamp delay priority
//	                                     processedOn finishedOn atm ats stc failedReason
//	                                     returnvalue rjk deid pb (defa, set by BullMQ)
//	<p>:<q>:<jobId>:lock                 lock token, PX LockTTL
//	<p>:<q>:<jobId> stacktrace           JSON array: one reason per failed attempt (bounded)
//	<p>:<q>:de:<dedupId>                 dedup id -> job id (PX ttl)
//	<p>:<q>:dn:<dedupId>                 HASH name data opts jid: the job kept by
//	                                     keepLastIfActive, added when the holder finishes
//	<p>:<q>:repeat, :repeat:<id>         schedulers: ZSET id -> pending run millis, and HASH
//	                                     name pattern tz ic data opts limit startDate endDate
//	                                     (+ nx, ours)
//
// A Consumer names its connections (CLIENT SETNAME) "<p>:<base64 of q>:w:<worker>", as
// BullMQ names a Worker's, so BullMQ's getWorkers() and Bull Board list it.
//
// keys.go is the only file that formats these names.
//
// # Scripts
//
// Every state change is one Lua script call (lua/*.lua, each documenting its
// KEYS and ARGV): add, fetch, complete (optionally taking the next job in
// the same call), fail, defer, extend_lock, stalled, pause, layout, remove,
// scheduler_upsert, scheduler_advance, scheduler_remove; get and schedulers
// read. They are our own, written from the layout, use cjson only and no
// exotic commands. Completions made at the same time through one Queue
// share a complete call, each applied as if alone. scripts.go prepends to
// each script only the lua/lib.lua helpers it uses.
//
// # Time
//
// Scripts read the clock with TIME; no caller's clock reaches a timestamp,
// a delayed promotion, a lock or a scheduler run, so hosts with skewed
// clocks agree (BullMQ uses each client's Date.now() instead). Cron run
// times are computed in Go (cron.go) by the rules of cron-parser 5.10.4,
// BullMQ 6's, also on the days clocks change, from the server time a script
// or one TIME read reported. A Consumer measures only durations locally.
//
// # Mixed fleets
//
// We fail a stalled job rather than re-run it (MaxStalledCount 0), so a
// paid job runs at most once. A BullMQ Worker sharing these queues needs
// maxStalledCount: 0 for the same, and even then re-runs a stalled
// scheduler run (BullMQ never fails one); skipStalledCheck: true leaves
// stalls to us. docs/queue.md has the rules.
//
// # Waiting
//
// An idle Consumer sleeps in one BZPOPMIN on the markers of all its queues
// (the marker protocol BullMQ workers use), waking when a job is added or
// when the next delayed job is due; fetching promotes due delayed jobs, so
// there is no poller.
//
// # Not reproduced from BullMQ
//
//   - Rate limiting (meta max/duration, the limiter key), flows
//     (parent/child jobs), job logs and progress, metrics lists, LIFO adds,
//     debounce/replace/extend deduplication modes (keepLastIfActive is
//     reproduced), and the legacy repeatable jobs. The fetch script honours meta "paused" and global
//     "concurrency" set by Node clients.
//   - Stalled jobs: BullMQ marks them with a failure reason ("defa") and
//     fails them when next taken, and never fails a scheduler's run; we
//     fail them in the check itself with reason "stalled" (scheduler runs
//     included), so the caller learns the ids. A job that BullMQ marked is
//     reported in Job.DeferredFailure.
//   - Events: we emit added, waiting, delayed, active, completed, failed,
//     stalled, removed, paused, resumed, duplicated and deduplicated, not
//     drained, retries-exhausted or progress.
//   - A taken scheduler run creates the next run in the same script call
//     (BullMQ does it in a second call from the worker).
package queue
