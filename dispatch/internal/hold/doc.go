// Package hold decides what to do with a job whose waitFor lists conditions:
// it is held, before anything is spent, until every condition is met. The
// package is pure: it reads a hold's state (as a hold store saw it, on the
// store's clock) and returns a Verdict; running the checks and keeping the
// state are the Worker's and its store's. The rules:
//
//   - `after` (a delay counted from the hold's start, or an RFC 3339 instant) is
//     one exact deferral to its instant; it needs no check slot. An `after` that
//     ends more than PI_WAIT_AFTER_MAX_MS past the hold's start is refused
//     wait-timeout at once. Profile checks start once every `after` passed.
//   - A profile condition runs the host's check (PI_WAIT_PROFILES) with the job's
//     args: exit 0 met, 1 not yet, anything else or a timeout a fault. A round
//     checks the unmet profiles in order and stops at the first that is not met;
//     a met profile is never checked again.
//   - After a round that left a condition unmet the job is deferred (not an
//     attempt) for Backoff: PI_WAIT_INTERVAL_MS, doubled every three rounds up
//     to 16x, capped at 10 minutes (or the interval when longer), plus up to 10%
//     jitter so a fleet's holds drift apart.
//   - Refusals (recorded, never retried): wait-timeout once PI_WAIT_MAX_MS passed
//     since the hold began (or since its latest `after` instant when later);
//     wait-max-checks after Policy.MaxChecks rounds (by default the rounds the
//     schedule itself makes within PI_WAIT_MAX_MS, at least 200, so an honest hold
//     times out first and the bound only stops a hold re-checked faster than its
//     schedule, such as one a dashboard keeps promoting); wait-faults after five
//     faulted rounds in a row; wait-superseded (below).
//   - A round runs under the in-process bound, min(PI_WAIT_CHECK_SLOTS,
//     max(1, PI_CONCURRENCY-1)) so checks never take the last job slot, and, on a
//     host with a declared name, the fleet lease wait:check:<i>. A round denied
//     either is deferred for max(11 s, backoff/4) plus jitter (wait_check_throttled)
//     and every fifth denial in a row logs wait_capacity_exceeded.
//   - Supersede: a job whose queue dedup id is set keeps wait:key:<dedupId> = its
//     id. When a newer delivery of the dedup id starts holding, it takes the key
//     over; if the older holder is still live on any queue, its hold is
//     marked superseded and it is refused wait-superseded at its next check; if it
//     is not live, its leftover hold state is deleted. The newer delivery wins.
//   - The hold state is deleted when the job ends (recorded completed, failed or
//     refused). A job released by its conditions but deferred by a later gate
//     (scope busy, budget unreachable) keeps its released state and is not held
//     again; a retried attempt after a failure holds again, so its conditions are
//     re-checked before a second paid run.
package hold
