package dispatch

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/pidispatch/pidispatch/dispatch/internal/hold"
	"github.com/pidispatch/pidispatch/dispatch/internal/waitcheck"
	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/jobs"
)

// Wait-for: a job whose waitFor lists conditions is held, before anything is
// spent, until every condition is met. Package hold has the rules and decides
// each step; the hold gate below runs the check rounds (package waitcheck) and
// keeps the state in the Holds store.

// Bounds of holding, as Tuning names them.
const (
	// DefaultWaitMaxFaults is how many faulted check rounds in a row refuse a
	// hold wait-faults.
	DefaultWaitMaxFaults = hold.DefaultMaxFaults
	// MinWaitMaxChecks is the least number of check rounds before a hold is
	// refused wait-max-checks.
	MinWaitMaxChecks = hold.MinMaxChecks
	// DefaultWaitThrottleFloor is the shortest re-deferral of a round denied a
	// check slot.
	DefaultWaitThrottleFloor = hold.DefaultThrottleFloor
)

func newWaitPolicy(cfg Config, t Tuning) hold.Policy {
	p := hold.Policy{
		Interval:      cfg.WaitInterval,
		Max:           cfg.WaitMax,
		AfterMax:      cfg.WaitAfterMax,
		ThrottleFloor: t.WaitThrottleFloor,
		CheckTimeout:  cfg.WaitCheckTimeout,
		MaxChecks:     t.WaitMaxChecks,
		MaxFaults:     t.WaitMaxFaults,
	}
	if t.WaitIntervalOverride > 0 {
		p.Interval = t.WaitIntervalOverride
	}
	if t.WaitMaxOverride > 0 {
		p.Max = t.WaitMaxOverride
	}
	if p.MaxChecks <= 0 {
		p.MaxChecks = hold.DefaultMaxChecks(p.Interval, p.Max)
	}
	return p
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
	plan := hold.NewPlan(h.spec.WaitFor)
	st, err := w.deps.Holds.Begin(ctx, h.job.ID, h.job.DedupID, hold.Bounds{
		AfterDelay: plan.AfterDelay, AfterAt: plan.AfterAt, AfterMax: w.wait.AfterMax, WaitMax: w.wait.Max,
	})
	if err != nil {
		return w.holdUnreachable(h, err)
	}
	if st.Fresh {
		log.Info("wait_hold_started", "conditions", len(h.spec.WaitFor), "profiles", len(plan.Profiles))
	}
	if st.Previous != "" {
		w.takeOver(ctx, h, st.Previous)
	}
	deadline := hold.Deadline(st, w.wait)
	v := hold.BeforeCheck(st, plan, w.wait)
	if v.Action != hold.Check {
		return w.holdVerdictOf(ctx, h, st, v)
	}

	where, release := w.takeCheckSlot(ctx, h, len(plan.Profiles))
	if where != "" {
		st, err := w.deps.Holds.Throttled(ctx, h.job.ID, h.job.DedupID)
		if err != nil {
			return w.holdUnreachable(h, err)
		}
		v := hold.AfterThrottle(st, deadline, w.wait, rand.Float64())
		log.Info("wait_check_throttled", "where", where, "throttles", st.Throttles, "delay", v.Delay.String())
		if st.Throttles >= hold.CapacityEvery && st.Throttles%hold.CapacityEvery == 0 {
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
		return deferFor(hold.Jitter(w.wait.Interval, rand.Float64()), jobs.ReasonWorkerShutdown)
	}
	st, err = w.deps.Holds.Checked(ctx, h.job.ID, h.job.DedupID, o)
	if err != nil {
		return w.holdUnreachable(h, err)
	}
	v = hold.AfterCheck(st, deadline, w.wait, rand.Float64())
	log.Info("wait_checked", "outcome", o.String(), "checks", st.Checks, "faults", st.Faults,
		"pending", plan.Pending(o.Met))
	if st.Lost {
		log.Warn("wait_state_lost")
	}
	return w.holdVerdictOf(ctx, h, st, v)
}

// holdVerdictOf turns a hold's decision into the gate's verdict; a release
// is written to the hold state first, and a release the state refuses (a
// newer holder superseded this one meanwhile) refuses the job.
func (w *Worker) holdVerdictOf(ctx context.Context, h *held, st HoldState, v hold.Verdict) verdict {
	switch v.Action {
	case hold.Defer:
		return deferFor(v.Delay, v.Why)
	case hold.Refuse:
		return refuseFor(v.Reason) // the record ends the hold
	case hold.Check:
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
	ttl := time.Duration(profiles+1) * w.wait.CheckTimeout
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
func (w *Worker) checkRound(ctx context.Context, h *held, plan hold.Plan, met uint8) (o CheckOutcome, lost bool, err error) {
	runCtx, stop := context.WithCancel(ctx)
	lostCh := make(chan struct{})
	kept := make(chan struct{})
	go func() {
		defer close(kept)
		w.keepLock(runCtx, h, stop, lostCh)
	}()
	o.Met = met
	for _, i := range plan.Profiles {
		if o.Met&(1<<i) != 0 {
			continue
		}
		c := h.spec.WaitFor[i]
		res, why, cerr := waitcheck.Run(runCtx, w.cfg.WaitProfiles[c.Profile], c.Profile, c.Args, w.wait.CheckTimeout)
		if cerr != nil {
			err = cerr
			break
		}
		if res == waitcheck.Met {
			o.Met |= 1 << i
			continue
		}
		if res == waitcheck.Fault {
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
	o.AllMet = err == nil && !o.Fault && o.Met&plan.Mask == plan.Mask
	return o, false, err
}

// endHold deletes the hold state of a job that ended. Bounded, and logged on
// failure: the state expires at the hold's deadline anyway.
func (w *Worker) endHold(ctx context.Context, jobID string, conds []jobs.WaitCondition) {
	if len(conds) == 0 || w.deps.Holds == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := w.deps.Holds.End(ctx, jobID); err != nil {
		w.log.Warn("wait_state_end_failed", "jobId", jobID, "err", err)
	}
}
