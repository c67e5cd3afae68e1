package hold

import (
	"math/bits"
	"time"

	"github.com/pidispatch/pidispatch/jobs"
)

// Cadences and bounds of holding.
const (
	// DefaultMaxFaults is how many faulted check rounds in a row refuse a
	// hold wait-faults.
	DefaultMaxFaults = 5
	// MinMaxChecks is the least number of check rounds before a hold is
	// refused wait-max-checks.
	MinMaxChecks = 200
	// DefaultThrottleFloor is the shortest re-deferral of a round denied a
	// check slot (the original's THROTTLE_FLOOR_MS): an 11 s cadence tells a
	// throttled hold apart from scope-busy (5 s) by its wake time alone.
	DefaultThrottleFloor = 11 * time.Second
	// CapacityEvery is how many denials of a check slot in a row make one
	// wait_capacity_exceeded line.
	CapacityEvery = 5

	backoffEvery    = 3                // rounds per doubling of the interval
	backoffMaxShift = 4                // at most 16x the interval
	backoffCap      = 10 * time.Minute // unless the interval itself is longer
	jitterFraction  = 0.10
)

// Policy holds the cadences and bounds of one host's holds.
type Policy struct {
	Interval      time.Duration // PI_WAIT_INTERVAL_MS
	Max           time.Duration // PI_WAIT_MAX_MS
	AfterMax      time.Duration // PI_WAIT_AFTER_MAX_MS
	ThrottleFloor time.Duration
	CheckTimeout  time.Duration // PI_WAIT_CHECK_TIMEOUT_MS
	MaxChecks     int
	MaxFaults     int
}

// Backoff is the delay before the next round after `checks` rounds:
// interval * 2^min(checks/3, 4), capped at max(interval, 10 min).
func Backoff(interval time.Duration, checks int) time.Duration {
	interval = max(interval, time.Millisecond)
	shift := min(max(checks, 0)/backoffEvery, backoffMaxShift)
	return min(interval<<shift, max(interval, backoffCap))
}

// Jitter adds up to 10% to d; r is a uniform draw in [0, 1).
func Jitter(d time.Duration, r float64) time.Duration {
	r = min(max(r, 0), 1)
	return d + time.Duration(float64(d)*jitterFraction*r)
}

// ThrottleDelay is the re-deferral of a round denied a check slot, before
// jitter: max(floor, backoff/4).
func ThrottleDelay(floor, interval time.Duration, checks int) time.Duration {
	return max(floor, Backoff(interval, checks)/4)
}

// ScheduledChecks is how many rounds the backoff schedule (without jitter, which
// only lengthens it) makes within waitMax: the first at the hold's start, then one
// after each delay.
func ScheduledChecks(interval, waitMax time.Duration) int {
	n, at := 1, time.Duration(0)
	for n < backoffEvery*backoffMaxShift {
		at += Backoff(interval, n)
		if at > waitMax {
			return n
		}
		n++
	}
	// From here every delay is the same.
	step := Backoff(interval, n)
	return n + int((waitMax-at)/step)
}

// DefaultMaxChecks is the default bound on rounds: the schedule's own count
// within waitMax, at least MinMaxChecks.
func DefaultMaxChecks(interval, waitMax time.Duration) int {
	return max(MinMaxChecks, ScheduledChecks(interval, waitMax))
}

// Plan is a job's conditions, read once.
type Plan struct {
	AfterDelay time.Duration // the longest `after` delay
	AfterAt    time.Time     // the latest `after` instant
	Profiles   []int         // indexes of the profile conditions, in order
	Mask       uint8         // their bits
}

// NewPlan reads a job's conditions.
func NewPlan(conds []jobs.WaitCondition) Plan {
	var p Plan
	for i, c := range conds {
		if i >= jobs.MaxWaitConditions {
			break // ParseJob refuses more; the bits would not fit
		}
		if c.Profile != "" {
			p.Profiles = append(p.Profiles, i)
			p.Mask |= 1 << i
			continue
		}
		d, at, rule := jobs.ParseAfter(c.After)
		if rule != "" {
			continue // ParseJob refuses it
		}
		p.AfterDelay = max(p.AfterDelay, d)
		if at.After(p.AfterAt) {
			p.AfterAt = at
		}
	}
	return p
}

// Pending counts the profile conditions that met leaves unmet.
func (p Plan) Pending(met uint8) int { return bits.OnesCount8(p.Mask &^ met) }

// String names a round's outcome on a log line: met, fault or not-yet.
func (o Outcome) String() string {
	switch {
	case o.AllMet:
		return "met"
	case o.Fault:
		return "fault"
	}
	return "not-yet"
}

// Action is what a hold decides for the job at hand.
type Action int

const (
	Check   Action = iota // run a check round
	Release               // every condition met: go on to the next gate
	Defer                 // back to delayed for Delay
	Refuse                // refused with Reason
)

// Verdict is a hold's decision.
type Verdict struct {
	Action Action
	Delay  time.Duration
	Why    jobs.Reason // a deferral's reason
	Reason jobs.Reason // a refusal's record reason
}

// RefuseFor is the verdict refusing a hold with reason.
func RefuseFor(reason jobs.Reason) Verdict {
	return Verdict{Action: Refuse, Reason: reason}
}

// DeferFor is the verdict deferring a hold for d, rounded up to the
// millisecond.
func DeferFor(d time.Duration, why jobs.Reason) Verdict {
	// Millisecond resolution on the queue: round up so the job never wakes a
	// moment early and defers again for nothing.
	d = (max(d, time.Millisecond) + time.Millisecond - 1).Truncate(time.Millisecond)
	return Verdict{Action: Defer, Delay: d, Why: why}
}

// Deadline is when the hold is refused wait-timeout: PI_WAIT_MAX_MS past its
// start, or past its `after` instant when that is later.
func Deadline(st State, pol Policy) time.Time {
	anchor := st.Since
	if st.AfterAt.After(anchor) {
		anchor = st.AfterAt
	}
	return anchor.Add(pol.Max)
}

// BeforeCheck decides, from the state Begin read, what to do with a job just
// picked up: determinate refusals first, then the `after` deferral, then a
// check round if one is due.
func BeforeCheck(st State, plan Plan, pol Policy) Verdict {
	switch {
	case st.Superseded:
		return RefuseFor(jobs.ReasonWaitSuperseded)
	case st.Released:
		return Verdict{Action: Release}
	case !st.AfterAt.IsZero() && st.AfterAt.Sub(st.Since) > pol.AfterMax:
		return RefuseFor(jobs.ReasonWaitTimeout) // it could only end past the cap
	case st.Now.Before(st.AfterAt):
		return DeferFor(st.AfterAt.Sub(st.Now), jobs.ReasonWaitAfter)
	case plan.Mask&^st.Met == 0:
		return Verdict{Action: Release}
	case !st.Now.Before(Deadline(st, pol)):
		return RefuseFor(jobs.ReasonWaitTimeout)
	case st.Faults >= pol.MaxFaults:
		return RefuseFor(jobs.ReasonWaitFaults)
	case st.Checks >= pol.MaxChecks:
		return RefuseFor(jobs.ReasonWaitMaxChecks)
	}
	return Verdict{Action: Check}
}

// AfterCheck decides from the state Checked recorded. r is a jitter draw.
func AfterCheck(st State, deadline time.Time, pol Policy, r float64) Verdict {
	switch {
	case st.Lost:
		// Deleted meanwhile (an operator's cancel, a newer holder that judged
		// this one dead): the next pickup starts over, or finds the job gone.
		return DeferFor(Jitter(pol.Interval, r), jobs.ReasonWaitStateLost)
	case st.Superseded:
		return RefuseFor(jobs.ReasonWaitSuperseded)
	case st.Released:
		return Verdict{Action: Release}
	case st.Faults >= pol.MaxFaults:
		return RefuseFor(jobs.ReasonWaitFaults)
	case st.Checks >= pol.MaxChecks:
		return RefuseFor(jobs.ReasonWaitMaxChecks)
	}
	left := deadline.Sub(st.Now)
	if left <= 0 {
		return RefuseFor(jobs.ReasonWaitTimeout)
	}
	// Never past the deadline: the refusal then comes on time.
	return DeferFor(min(Jitter(Backoff(pol.Interval, st.Checks), r), left), jobs.ReasonWaitCheck)
}

// AfterThrottle decides after a round was denied a check slot.
func AfterThrottle(st State, deadline time.Time, pol Policy, r float64) Verdict {
	if st.Superseded {
		return RefuseFor(jobs.ReasonWaitSuperseded)
	}
	left := deadline.Sub(st.Now)
	if left <= 0 {
		return RefuseFor(jobs.ReasonWaitTimeout)
	}
	d := Jitter(ThrottleDelay(pol.ThrottleFloor, pol.Interval, st.Checks), r)
	return DeferFor(min(d, left), jobs.ReasonWaitThrottled)
}
