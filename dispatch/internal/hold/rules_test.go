package hold

import (
	"strings"
	"testing"
	"time"

	"github.com/pidispatch/pidispatch/jobs"
	"github.com/stretchr/testify/require"
)

func TestBackoff(t *testing.T) {
	t.Parallel()
	const I = time.Minute
	tests := []struct {
		interval time.Duration
		checks   int
		want     time.Duration
	}{
		{I, -1, I}, {I, 0, I}, {I, 1, I}, {I, 2, I},
		{I, 3, 2 * I}, {I, 5, 2 * I},
		{I, 6, 4 * I}, {I, 9, 8 * I},
		{I, 12, 10 * time.Minute}, // 16 min, capped at 10
		{I, 1 << 30, 10 * time.Minute},
		{30 * time.Second, 12, 8 * time.Minute}, // 16x of 30 s is under the cap
		{time.Hour, 0, time.Hour},               // an interval over the cap is never cut
		{time.Hour, 12, time.Hour},
		{300 * time.Millisecond, 3, 600 * time.Millisecond},
		{0, 0, time.Millisecond}, // never zero
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, Backoff(tt.interval, tt.checks), "interval %s after %d checks", tt.interval, tt.checks)
	}
}

func TestJitter(t *testing.T) {
	t.Parallel()
	d := 10 * time.Second
	require.Equal(t, d, Jitter(d, 0))
	require.Equal(t, d+500*time.Millisecond, Jitter(d, 0.5))
	require.Equal(t, d+time.Second, Jitter(d, 1), "at most 10%")
	require.Equal(t, d, Jitter(d, -3), "a bad draw is clamped")
	require.Equal(t, d+time.Second, Jitter(d, 7))
	for i := range 1000 {
		r := float64(i) / 1000
		j := Jitter(d, r)
		require.GreaterOrEqual(t, j, d)
		require.Less(t, j, d+time.Second)
	}
}

func TestThrottleDelay(t *testing.T) {
	t.Parallel()
	floor := DefaultThrottleFloor
	require.Equal(t, 15*time.Second, ThrottleDelay(floor, time.Minute, 0), "backoff/4 over the floor")
	require.Equal(t, floor, ThrottleDelay(floor, 30*time.Second, 0), "the 11 s floor")
	require.Equal(t, 150*time.Second, ThrottleDelay(floor, time.Minute, 100), "capped backoff/4")
	require.Equal(t, 100*time.Millisecond, ThrottleDelay(100*time.Millisecond, 300*time.Millisecond, 0))
}

// simulateChecks counts rounds the slow way: one at 0, then one after each
// backoff delay, while within waitMax.
func simulateChecks(interval, waitMax time.Duration) int {
	n, at := 1, time.Duration(0)
	for {
		at += Backoff(interval, n)
		if at > waitMax {
			return n
		}
		n++
	}
}

func TestScheduledChecks(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ interval, max time.Duration }{
		{time.Minute, 24 * time.Hour},
		{30 * time.Second, 30 * time.Second},
		{30 * time.Second, 30 * 24 * time.Hour},
		{24 * time.Hour, 24 * time.Hour},
		{time.Hour, 30 * 24 * time.Hour},
		{300 * time.Millisecond, 2 * time.Second},
		{time.Minute, 45 * time.Minute},
	} {
		require.Equal(t, simulateChecks(tt.interval, tt.max), ScheduledChecks(tt.interval, tt.max), "%s within %s", tt.interval, tt.max)
	}
	// The defaults: 60 s over 24 h makes 151 rounds (twelve in the first 44
	// minutes, then one every 10 minutes), under the floor of 200.
	require.Equal(t, 151, ScheduledChecks(time.Minute, 24*time.Hour))
	require.Equal(t, MinMaxChecks, DefaultMaxChecks(time.Minute, 24*time.Hour))
	// 30 days at 60 s: the schedule's own count, so wait-timeout ends an honest
	// hold before wait-max-checks.
	require.Equal(t, ScheduledChecks(time.Minute, 30*24*time.Hour), DefaultMaxChecks(time.Minute, 30*24*time.Hour))
	require.Greater(t, DefaultMaxChecks(time.Minute, 30*24*time.Hour), 4000)
}

func TestNewPlan(t *testing.T) {
	t.Parallel()
	at := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	p := NewPlan([]jobs.WaitCondition{
		{After: "90m"}, {Profile: "jira"}, {After: at.Format(time.RFC3339)}, {Profile: "ci", Args: []string{"x"}},
	})
	require.Equal(t, 90*time.Minute, p.AfterDelay)
	require.True(t, p.AfterAt.Equal(at))
	require.Equal(t, []int{1, 3}, p.Profiles)
	require.Equal(t, uint8(0b1010), p.Mask)

	p = NewPlan([]jobs.WaitCondition{{After: "1s"}, {After: "2h"}, {After: "2029-01-01T00:00:00Z"}, {After: "2030-06-01T00:00:00+02:00"}})
	require.Equal(t, 2*time.Hour, p.AfterDelay, "the longest delay")
	require.True(t, p.AfterAt.Equal(time.Date(2030, 5, 31, 22, 0, 0, 0, time.UTC)), "the latest instant")
	require.Zero(t, p.Mask)
	require.Empty(t, p.Profiles)
}

func TestParseAfter(t *testing.T) {
	t.Parallel()
	d, at, rule := jobs.ParseAfter("90m")
	require.Equal(t, 90*time.Minute, d)
	require.True(t, at.IsZero())
	require.Empty(t, rule)
	d, at, rule = jobs.ParseAfter("2026-05-01T09:00:00.5+02:00")
	require.Zero(t, d)
	require.True(t, at.Equal(time.Date(2026, 5, 1, 7, 0, 0, 5e8, time.UTC)))
	require.Empty(t, rule)
	for give, want := range map[string]string{
		"3600":                       "needs a unit",
		"721h":                       "between 1s and",
		"500ms":                      "between 1s and",
		"2026-05-01":                 "RFC 3339",
		"2026-05-01T09:00:00":        "RFC 3339",
		"tomorrow":                   "Go duration",
		"-1h":                        "RFC 3339",
		strings.Repeat("2026-", 100): "RFC 3339",
		"2026-05-01T09:00:00Z\x00":   "RFC 3339",
		"\xff-T":                     "RFC 3339",
	} {
		_, _, rule := jobs.ParseAfter(give)
		require.Contains(t, rule, want, "%q", give)
	}
	// Through the job model.
	_, err := jobs.ParseJob([]byte(`{"kind":"forge","repo":"a/b","flow":"f","task":"t","waitFor":[{"after":"2026-05-01T09:00:00Z"}]}`))
	require.NoError(t, err)
	_, err = jobs.ParseJob([]byte(`{"kind":"forge","repo":"a/b","flow":"f","task":"t","waitFor":[{"after":"2026-05-01 09:00"}]}`))
	require.ErrorContains(t, err, "waitFor[0].after")
}

// The verdicts: what a hold does in each state, on the server's clock.
func TestVerdicts(t *testing.T) {
	t.Parallel()
	pol := Policy{Interval: time.Minute, Max: time.Hour, AfterMax: 24 * time.Hour, ThrottleFloor: 11 * time.Second, MaxChecks: 10, MaxFaults: 3}
	since := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	two := Plan{Profiles: []int{0, 1}, Mask: 0b11}
	st := func(now time.Duration, mod func(*State)) State {
		s := State{Since: since, Now: since.Add(now)}
		if mod != nil {
			mod(&s)
		}
		return s
	}
	tests := []struct {
		name string
		st   State
		plan Plan
		want Verdict
	}{
		{"FirstPickupChecks", st(0, nil), two, Verdict{Action: Check}},
		{"Superseded", st(0, func(s *State) { s.Superseded = true; s.Released = true }), two, RefuseFor(jobs.ReasonWaitSuperseded)},
		{"ReleasedGoesOn", st(2*time.Hour, func(s *State) { s.Released = true }), two, Verdict{Action: Release}},
		{"AfterPending", st(time.Minute, func(s *State) { s.AfterAt = since.Add(90 * time.Minute) }), two, DeferFor(89*time.Minute, "wait-after")},
		{"AfterExactToTheMs", st(0, func(s *State) { s.AfterAt = since.Add(1500*time.Millisecond + 1) }), Plan{}, Verdict{Action: Defer, Delay: 1501 * time.Millisecond, Why: "wait-after"}},
		{"AfterPastCap", st(0, func(s *State) { s.AfterAt = since.Add(25 * time.Hour) }), Plan{}, RefuseFor(jobs.ReasonWaitTimeout)},
		{"AfterPassedNoProfiles", st(time.Hour, func(s *State) { s.AfterAt = since.Add(time.Hour) }), Plan{}, Verdict{Action: Release}},
		{"AfterPassedProfilesDue", st(90*time.Minute, func(s *State) { s.AfterAt = since.Add(time.Hour) }), two, Verdict{Action: Check}},
		{"DeadlineFromAfter", st(2*time.Hour, func(s *State) { s.AfterAt = since.Add(time.Hour) }), two, RefuseFor(jobs.ReasonWaitTimeout)},
		{"AllMetInEarlierRounds", st(5*time.Hour, func(s *State) { s.Met = 0b11 }), two, Verdict{Action: Release}},
		{"Timeout", st(time.Hour, nil), two, RefuseFor(jobs.ReasonWaitTimeout)},
		{"JustBeforeTimeout", st(time.Hour-time.Millisecond, nil), two, Verdict{Action: Check}},
		{"Faults", st(0, func(s *State) { s.Faults = 3 }), two, RefuseFor(jobs.ReasonWaitFaults)},
		{"MaxChecks", st(0, func(s *State) { s.Checks = 10 }), two, RefuseFor(jobs.ReasonWaitMaxChecks)},
		{"OneMetOneLeft", st(0, func(s *State) { s.Met = 0b01; s.Checks = 9; s.Faults = 2 }), two, Verdict{Action: Check}},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, BeforeCheck(tt.st, tt.plan, pol), tt.name)
	}

	deadline := since.Add(time.Hour)
	after := []struct {
		name string
		st   State
		r    float64
		want Verdict
	}{
		{"NotYet", st(0, func(s *State) { s.Checks = 1 }), 0, DeferFor(time.Minute, "wait-check")},
		{"NotYetJitter", st(0, func(s *State) { s.Checks = 1 }), 0.5, DeferFor(63*time.Second, "wait-check")},
		{"Backoff", st(0, func(s *State) { s.Checks = 6 }), 0, DeferFor(4*time.Minute, "wait-check")},
		{"NeverPastDeadline", st(58*time.Minute, func(s *State) { s.Checks = 6 }), 0, DeferFor(2*time.Minute, "wait-check")},
		{"DeadlinePassed", st(time.Hour, func(s *State) { s.Checks = 1 }), 0, RefuseFor(jobs.ReasonWaitTimeout)},
		{"Released", st(0, func(s *State) { s.Checks = 3; s.Released = true }), 0, Verdict{Action: Release}},
		{"Superseded", st(0, func(s *State) { s.Superseded = true }), 0, RefuseFor(jobs.ReasonWaitSuperseded)},
		{"FifthFaultOfThree", st(0, func(s *State) { s.Checks = 3; s.Faults = 3 }), 0, RefuseFor(jobs.ReasonWaitFaults)},
		{"LastCheck", st(0, func(s *State) { s.Checks = 10 }), 0, RefuseFor(jobs.ReasonWaitMaxChecks)},
		{"Lost", State{Lost: true, Now: since}, 0, DeferFor(time.Minute, "wait-state-lost")},
	}
	for _, tt := range after {
		require.Equal(t, tt.want, AfterCheck(tt.st, deadline, pol, tt.r), tt.name)
	}

	throttled := []struct {
		name string
		st   State
		r    float64
		want Verdict
	}{
		{"Floor", st(0, nil), 0, DeferFor(15*time.Second, "wait-throttled")},
		{"Jitter", st(0, nil), 1, DeferFor(16500*time.Millisecond, "wait-throttled")},
		{"BackoffQuarter", st(0, func(s *State) { s.Checks = 12 }), 0, DeferFor(150*time.Second, "wait-throttled")},
		{"NeverPastDeadline", st(time.Hour-time.Second, nil), 0, DeferFor(time.Second, "wait-throttled")},
		{"DeadlinePassed", st(time.Hour, nil), 0, RefuseFor(jobs.ReasonWaitTimeout)},
		{"Superseded", st(0, func(s *State) { s.Superseded = true }), 0, RefuseFor(jobs.ReasonWaitSuperseded)},
	}
	for _, tt := range throttled {
		require.Equal(t, tt.want, AfterThrottle(tt.st, deadline, pol, tt.r), tt.name)
	}
}
