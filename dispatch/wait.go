package dispatch

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/jobs"
)

// Wait-for: a job whose waitFor lists conditions is held, before anything is
// spent, until every condition is met. The rules:
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
//     attempt) for waitBackoff: PI_WAIT_INTERVAL_MS, doubled every three rounds up
//     to 16x, capped at 10 minutes (or the interval when longer), plus up to 10%
//     jitter so a fleet's holds drift apart.
//   - Refusals (recorded, never retried): wait-timeout once PI_WAIT_MAX_MS passed
//     since the hold began (or since its latest `after` instant when later);
//     wait-max-checks after Tuning.WaitMaxChecks rounds (by default the rounds the
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
//     over; if the older holder is still live on any queue (JobLive), its hold is
//     marked superseded and it is refused wait-superseded at its next check; if it
//     is not live, its leftover hold state is deleted. The newer delivery wins.
//   - The hold state is deleted when the job ends (recorded completed, failed or
//     refused). A job released by its conditions but deferred by a later gate
//     (scope busy, budget unreachable) keeps its released state and is not held
//     again; a retried attempt after a failure holds again, so its conditions are
//     re-checked before a second paid run.

// Cadences and bounds of holding.
const (
	// DefaultWaitMaxFaults is how many faulted check rounds in a row refuse a
	// hold wait-faults.
	DefaultWaitMaxFaults = 5
	// MinWaitMaxChecks is the least number of check rounds before a hold is
	// refused wait-max-checks.
	MinWaitMaxChecks = 200
	// DefaultWaitThrottleFloor is the shortest re-deferral of a round denied a
	// check slot (the original's THROTTLE_FLOOR_MS): an 11 s cadence tells a
	// throttled hold apart from scope-busy (5 s) by its wake time alone.
	DefaultWaitThrottleFloor = 11 * time.Second

	waitBackoffEvery    = 3                // rounds per doubling of the interval
	waitBackoffMaxShift = 4                // at most 16x the interval
	waitBackoffCap      = 10 * time.Minute // unless the interval itself is longer
	waitJitterFraction  = 0.10
	waitCapacityEvery   = 5 // denials in a row per wait_capacity_exceeded line
)

// waitPolicy holds the cadences and bounds of this worker's holds.
type waitPolicy struct {
	interval      time.Duration
	max           time.Duration
	afterMax      time.Duration
	throttleFloor time.Duration
	checkTimeout  time.Duration
	maxChecks     int
	maxFaults     int
}

func newWaitPolicy(cfg Config, t Tuning) waitPolicy {
	p := waitPolicy{
		interval:      cfg.WaitInterval,
		max:           cfg.WaitMax,
		afterMax:      cfg.WaitAfterMax,
		throttleFloor: t.WaitThrottleFloor,
		checkTimeout:  cfg.WaitCheckTimeout,
		maxChecks:     t.WaitMaxChecks,
		maxFaults:     t.WaitMaxFaults,
	}
	if t.WaitIntervalOverride > 0 {
		p.interval = t.WaitIntervalOverride
	}
	if t.WaitMaxOverride > 0 {
		p.max = t.WaitMaxOverride
	}
	if p.maxChecks <= 0 {
		p.maxChecks = maxWaitChecks(p.interval, p.max)
	}
	return p
}

// waitBackoff is the delay before the next round after `checks` rounds:
// interval * 2^min(checks/3, 4), capped at max(interval, 10 min).
func waitBackoff(interval time.Duration, checks int) time.Duration {
	interval = max(interval, time.Millisecond)
	shift := min(max(checks, 0)/waitBackoffEvery, waitBackoffMaxShift)
	return min(interval<<shift, max(interval, waitBackoffCap))
}

// withJitter adds up to 10% to d; r is a uniform draw in [0, 1).
func withJitter(d time.Duration, r float64) time.Duration {
	r = min(max(r, 0), 1)
	return d + time.Duration(float64(d)*waitJitterFraction*r)
}

// throttleDelay is the re-deferral of a round denied a check slot, before
// jitter: max(floor, backoff/4).
func throttleDelay(floor, interval time.Duration, checks int) time.Duration {
	return max(floor, waitBackoff(interval, checks)/4)
}

// scheduledChecks is how many rounds the backoff schedule (without jitter, which
// only lengthens it) makes within waitMax: the first at the hold's start, then one
// after each delay.
func scheduledChecks(interval, waitMax time.Duration) int {
	n, at := 1, time.Duration(0)
	for n < waitBackoffEvery*waitBackoffMaxShift {
		at += waitBackoff(interval, n)
		if at > waitMax {
			return n
		}
		n++
	}
	// From here every delay is the same.
	step := waitBackoff(interval, n)
	return n + int((waitMax-at)/step)
}

// maxWaitChecks is the default bound on rounds: the schedule's own count within
// waitMax, at least MinWaitMaxChecks.
func maxWaitChecks(interval, waitMax time.Duration) int {
	return max(MinWaitMaxChecks, scheduledChecks(interval, waitMax))
}

// waitPlan is a job's conditions, read once.
type waitPlan struct {
	afterDelay time.Duration // the longest `after` delay
	afterAt    time.Time     // the latest `after` instant
	profiles   []int         // indexes of the profile conditions, in order
	mask       uint8         // their bits
}

func planWait(conds []jobs.WaitCondition) waitPlan {
	var p waitPlan
	for i, c := range conds {
		if i >= jobs.MaxWaitConditions {
			break // ParseJob refuses more; the bits would not fit
		}
		if c.Profile != "" {
			p.profiles = append(p.profiles, i)
			p.mask |= 1 << i
			continue
		}
		d, at, rule := jobs.ParseAfter(c.After)
		if rule != "" {
			continue // ParseJob refuses it
		}
		p.afterDelay = max(p.afterDelay, d)
		if at.After(p.afterAt) {
			p.afterAt = at
		}
	}
	return p
}

// holdAction is what a hold decides for the job at hand.
type holdAction int

const (
	holdCheck   holdAction = iota // run a check round
	holdRelease                   // every condition met: go on to the next gate
	holdDefer                     // back to delayed for delay
	holdRefuse                    // refused with reason
)

type holdVerdict struct {
	action holdAction
	delay  time.Duration
	why    jobs.Reason // a deferral's reason
	reason jobs.Reason // a refusal's record reason
}

func refuseHold(reason jobs.Reason) holdVerdict {
	return holdVerdict{action: holdRefuse, reason: reason}
}

func deferHold(d time.Duration, why jobs.Reason) holdVerdict {
	// Millisecond resolution on the queue: round up so the job never wakes a
	// moment early and defers again for nothing.
	d = (max(d, time.Millisecond) + time.Millisecond - 1).Truncate(time.Millisecond)
	return holdVerdict{action: holdDefer, delay: d, why: why}
}

// holdDeadline is when the hold is refused wait-timeout: PI_WAIT_MAX_MS past its
// start, or past its `after` instant when that is later.
func holdDeadline(st HoldState, pol waitPolicy) time.Time {
	anchor := st.Since
	if st.AfterAt.After(anchor) {
		anchor = st.AfterAt
	}
	return anchor.Add(pol.max)
}

// beforeCheck decides, from the state Begin read, what to do with a job just
// picked up: determinate refusals first, then the `after` deferral, then a
// check round if one is due.
func beforeCheck(st HoldState, plan waitPlan, pol waitPolicy) holdVerdict {
	switch {
	case st.Superseded:
		return refuseHold(jobs.ReasonWaitSuperseded)
	case st.Released:
		return holdVerdict{action: holdRelease}
	case !st.AfterAt.IsZero() && st.AfterAt.Sub(st.Since) > pol.afterMax:
		return refuseHold(jobs.ReasonWaitTimeout) // it could only end past the cap
	case st.Now.Before(st.AfterAt):
		return deferHold(st.AfterAt.Sub(st.Now), jobs.ReasonWaitAfter)
	case plan.mask&^st.Met == 0:
		return holdVerdict{action: holdRelease}
	case !st.Now.Before(holdDeadline(st, pol)):
		return refuseHold(jobs.ReasonWaitTimeout)
	case st.Faults >= pol.maxFaults:
		return refuseHold(jobs.ReasonWaitFaults)
	case st.Checks >= pol.maxChecks:
		return refuseHold(jobs.ReasonWaitMaxChecks)
	}
	return holdVerdict{action: holdCheck}
}

// afterCheck decides from the state Checked recorded. r is a jitter draw.
func afterCheck(st HoldState, deadline time.Time, pol waitPolicy, r float64) holdVerdict {
	switch {
	case st.Lost:
		// Deleted meanwhile (an operator's cancel, a newer holder that judged
		// this one dead): the next pickup starts over, or finds the job gone.
		return deferHold(withJitter(pol.interval, r), jobs.ReasonWaitStateLost)
	case st.Superseded:
		return refuseHold(jobs.ReasonWaitSuperseded)
	case st.Released:
		return holdVerdict{action: holdRelease}
	case st.Faults >= pol.maxFaults:
		return refuseHold(jobs.ReasonWaitFaults)
	case st.Checks >= pol.maxChecks:
		return refuseHold(jobs.ReasonWaitMaxChecks)
	}
	left := deadline.Sub(st.Now)
	if left <= 0 {
		return refuseHold(jobs.ReasonWaitTimeout)
	}
	// Never past the deadline: the refusal then comes on time.
	return deferHold(min(withJitter(waitBackoff(pol.interval, st.Checks), r), left), jobs.ReasonWaitCheck)
}

// afterThrottle decides after a round was denied a check slot.
func afterThrottle(st HoldState, deadline time.Time, pol waitPolicy, r float64) holdVerdict {
	if st.Superseded {
		return refuseHold(jobs.ReasonWaitSuperseded)
	}
	left := deadline.Sub(st.Now)
	if left <= 0 {
		return refuseHold(jobs.ReasonWaitTimeout)
	}
	d := withJitter(throttleDelay(pol.throttleFloor, pol.interval, st.Checks), r)
	return deferHold(min(d, left), jobs.ReasonWaitThrottled)
}

// gateHold holds a job until every one of its wait conditions is met. Its
// verdict goes on (no conditions, or every one met), defers the job to its
// next round, refuses it, or drops it (its lock was lost during a check).
func (w *Worker) gateHold(ctx context.Context, h *held) verdict {
	if len(h.spec.WaitFor) == 0 {
		return goOn
	}
	log := w.log.With("jobId", h.job.ID)
	if w.deps.Holds == nil {
		// Never run a job whose conditions nobody can establish.
		log.Error("wait_state_unavailable", "err", "no hold store")
		return deferFor(w.tune.UnreachableDeferral, jobs.ReasonWaitStateUnavailable)
	}
	plan := planWait(h.spec.WaitFor)
	st, err := w.deps.Holds.Begin(ctx, h.job.ID, h.job.DedupID, HoldBounds{
		AfterDelay: plan.afterDelay, AfterAt: plan.afterAt, AfterMax: w.wait.afterMax, WaitMax: w.wait.max,
	})
	if err != nil {
		return w.holdUnreachable(h, err)
	}
	if st.Fresh {
		log.Info("wait_hold_started", "conditions", len(h.spec.WaitFor), "profiles", len(plan.profiles))
	}
	if st.Previous != "" {
		w.takeOver(ctx, h, st.Previous)
	}
	deadline := holdDeadline(st, w.wait)
	v := beforeCheck(st, plan, w.wait)
	if v.action != holdCheck {
		return w.holdVerdictOf(ctx, h, st, v)
	}

	where, release := w.takeCheckSlot(ctx, h, len(plan.profiles))
	if where != "" {
		st, err := w.deps.Holds.Throttled(ctx, h.job.ID, h.job.DedupID)
		if err != nil {
			return w.holdUnreachable(h, err)
		}
		v := afterThrottle(st, deadline, w.wait, rand.Float64())
		log.Info("wait_check_throttled", "where", where, "throttles", st.Throttles, "delay", v.delay.String())
		if st.Throttles >= waitCapacityEvery && st.Throttles%waitCapacityEvery == 0 {
			log.Warn("wait_capacity_exceeded", "where", where, "throttles", st.Throttles)
		}
		return w.holdVerdictOf(ctx, h, st, v)
	}
	o, lost, err := w.checkRound(ctx, h, plan, st.Met)
	release()
	if lost {
		// The stalled check fails the job (never re-run); nothing to report.
		log.Warn("job_lock_lost", "during", jobs.ReasonWaitCheck)
		return verdict{act: actDrop}
	}
	if err != nil {
		// The worker is stopping: this round established nothing.
		return deferFor(withJitter(w.wait.interval, rand.Float64()), jobs.ReasonWorkerShutdown)
	}
	st, err = w.deps.Holds.Checked(ctx, h.job.ID, h.job.DedupID, o)
	if err != nil {
		return w.holdUnreachable(h, err)
	}
	v = afterCheck(st, deadline, w.wait, rand.Float64())
	log.Info("wait_checked", "outcome", roundOutcome(o), "checks", st.Checks, "faults", st.Faults,
		"pending", countBits(plan.mask&^o.Met))
	if st.Lost {
		log.Warn("wait_state_lost")
	}
	return w.holdVerdictOf(ctx, h, st, v)
}

func roundOutcome(o CheckOutcome) string {
	switch {
	case o.AllMet:
		return checkMet.String()
	case o.Fault:
		return checkFault.String()
	}
	return checkNotYet.String()
}

func countBits(b uint8) int {
	n := 0
	for ; b != 0; b &= b - 1 {
		n++
	}
	return n
}

// holdVerdictOf turns a hold's decision into the gate's verdict; a release
// is written to the hold state first, and a release the state refuses (a
// newer holder superseded this one meanwhile) refuses the job.
func (w *Worker) holdVerdictOf(ctx context.Context, h *held, st HoldState, v holdVerdict) verdict {
	switch v.action {
	case holdDefer:
		return deferFor(v.delay, v.why)
	case holdRefuse:
		return refuseFor(v.reason) // the record ends the hold
	case holdCheck:
		return goOn // never asked: a check round is the gate's own step
	}
	if !st.Released {
		st2, err := w.deps.Holds.Release(ctx, h.job.ID, h.job.DedupID)
		if err != nil {
			return w.holdUnreachable(h, err)
		}
		if st2.Superseded {
			return refuseFor(jobs.ReasonWaitSuperseded)
		}
	}
	w.log.Info("wait_released", "jobId", h.job.ID, "checks", st.Checks)
	return goOn
}

// holdUnreachable defers a job whose hold state could not be read or written:
// a job whose conditions are not established never runs.
func (w *Worker) holdUnreachable(h *held, err error) verdict {
	w.log.Warn("wait_state_unreachable", "jobId", h.job.ID, "err", err)
	return deferFor(w.tune.UnreachableDeferral, jobs.ReasonWaitStateUnreachable)
}

// takeOver deals with the older holder of this job's dedup id: still live on
// any queue, it is marked superseded (refused at its next check); not live, its
// leftover hold state is deleted. A lookup that fails counts as live: marking a
// dead hold costs nothing, deleting a live one would let it start over.
func (w *Worker) takeOver(ctx context.Context, h *held, previous string) {
	live, where := true, ""
	if w.deps.Finder != nil {
		l, q, err := JobLive(ctx, w.deps.Finder, previous)
		if err != nil {
			w.log.Warn("wait_holder_lookup_failed", "jobId", h.job.ID, "previous", previous, "err", err)
		} else {
			live, where = l, q
		}
	}
	var err error
	if live {
		err = w.deps.Holds.Supersede(ctx, previous)
	} else {
		err = w.deps.Holds.End(ctx, previous)
	}
	if err != nil {
		w.log.Warn("wait_takeover_failed", "jobId", h.job.ID, "previous", previous, "err", err)
		return
	}
	w.log.Info("wait_took_over", "jobId", h.job.ID, "previous", previous, "previousLive", live, "previousQueue", where)
}

// takeCheckSlot takes the in-process check slot and, on a named host, the
// fleet lease. It returns where it was denied ("local" or "fleet"), or "" and
// a func that releases both.
func (w *Worker) takeCheckSlot(ctx context.Context, h *held, profiles int) (denied string, release func()) {
	select {
	case w.checks <- struct{}{}:
	default:
		return "local", nil
	}
	local := func() { <-w.checks }
	if !w.cfg.WorkerNameDeclared || w.deps.Leases == nil {
		return "", local
	}
	ttl := time.Duration(profiles+1) * w.wait.checkTimeout
	handle, err := w.deps.Leases.Acquire(ctx, h.job.ID, w.cfg.WaitCheckSlots, ttl, fleet.CheckSlotKey)
	if err != nil || handle == nil {
		local()
		if err != nil {
			w.log.Warn("wait_check_lease_failed", "jobId", h.job.ID, "err", err)
		}
		return "fleet", nil
	}
	return "", func() {
		if err := handle.Release(context.WithoutCancel(ctx)); err != nil {
			w.log.Warn("wait_check_lease_release_failed", "jobId", h.job.ID, "err", err)
		}
		local()
	}
}

// checkRound runs the unmet profile checks in order, stopping at the first
// that is not met, while keeping the job's lock. lost reports that the lock was
// lost meanwhile; err that ctx ended (nothing was established).
func (w *Worker) checkRound(ctx context.Context, h *held, plan waitPlan, met uint8) (o CheckOutcome, lost bool, err error) {
	runCtx, stop := context.WithCancel(ctx)
	lostCh := make(chan struct{})
	kept := make(chan struct{})
	go func() {
		defer close(kept)
		w.keepLock(runCtx, h, stop, lostCh)
	}()
	o.Met = met
	for _, i := range plan.profiles {
		if o.Met&(1<<i) != 0 {
			continue
		}
		c := h.spec.WaitFor[i]
		res, why, cerr := runWaitCheck(runCtx, w.cfg.WaitProfiles[c.Profile], c.Profile, c.Args, w.wait.checkTimeout)
		if cerr != nil {
			err = cerr
			break
		}
		if res == checkMet {
			o.Met |= 1 << i
			continue
		}
		if res == checkFault {
			o.Fault = true
			w.log.Warn("wait_check_fault", "jobId", h.job.ID, "profile", c.Profile, "reason", why)
		}
		break
	}
	stop()
	<-kept
	select {
	case <-lostCh:
		return o, true, nil
	default:
	}
	o.AllMet = err == nil && !o.Fault && o.Met&plan.mask == plan.mask
	return o, false, err
}

// endHold deletes the hold state of a job that ended. Bounded, and logged on
// failure: the state expires at the hold's deadline anyway.
func (w *Worker) endHold(jobID string, conds []jobs.WaitCondition) {
	if len(conds) == 0 || w.deps.Holds == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := w.deps.Holds.End(ctx, jobID); err != nil {
		w.log.Warn("wait_state_end_failed", "jobId", jobID, "err", err)
	}
}
