package dispatch

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pidispatch/pidispatch/jobs"
	"github.com/stretchr/testify/require"
)

func TestWaitBackoff(t *testing.T) {
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
		require.Equal(t, tt.want, waitBackoff(tt.interval, tt.checks), "interval %s after %d checks", tt.interval, tt.checks)
	}
}

func TestWithJitter(t *testing.T) {
	t.Parallel()
	d := 10 * time.Second
	require.Equal(t, d, withJitter(d, 0))
	require.Equal(t, d+500*time.Millisecond, withJitter(d, 0.5))
	require.Equal(t, d+time.Second, withJitter(d, 1), "at most 10%")
	require.Equal(t, d, withJitter(d, -3), "a bad draw is clamped")
	require.Equal(t, d+time.Second, withJitter(d, 7))
	for i := range 1000 {
		r := float64(i) / 1000
		j := withJitter(d, r)
		require.GreaterOrEqual(t, j, d)
		require.Less(t, j, d+time.Second)
	}
}

func TestThrottleDelay(t *testing.T) {
	t.Parallel()
	floor := DefaultWaitThrottleFloor
	require.Equal(t, 15*time.Second, throttleDelay(floor, time.Minute, 0), "backoff/4 over the floor")
	require.Equal(t, floor, throttleDelay(floor, 30*time.Second, 0), "the 11 s floor")
	require.Equal(t, 150*time.Second, throttleDelay(floor, time.Minute, 100), "capped backoff/4")
	require.Equal(t, 100*time.Millisecond, throttleDelay(100*time.Millisecond, 300*time.Millisecond, 0))
}

// simulateChecks counts rounds the slow way: one at 0, then one after each
// backoff delay, while within waitMax.
func simulateChecks(interval, waitMax time.Duration) int {
	n, at := 1, time.Duration(0)
	for {
		at += waitBackoff(interval, n)
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
		require.Equal(t, simulateChecks(tt.interval, tt.max), scheduledChecks(tt.interval, tt.max), "%s within %s", tt.interval, tt.max)
	}
	// The defaults: 60 s over 24 h makes 151 rounds (twelve in the first 44
	// minutes, then one every 10 minutes), under the floor of 200.
	require.Equal(t, 151, scheduledChecks(time.Minute, 24*time.Hour))
	require.Equal(t, MinWaitMaxChecks, maxWaitChecks(time.Minute, 24*time.Hour))
	// 30 days at 60 s: the schedule's own count, so wait-timeout ends an honest
	// hold before wait-max-checks.
	require.Equal(t, scheduledChecks(time.Minute, 30*24*time.Hour), maxWaitChecks(time.Minute, 30*24*time.Hour))
	require.Greater(t, maxWaitChecks(time.Minute, 30*24*time.Hour), 4000)
}

func TestNewWaitPolicy(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	p := newWaitPolicy(cfg, Tuning{}.withDefaults())
	require.Equal(t, waitPolicy{
		interval: time.Minute, max: 24 * time.Hour, afterMax: 30 * 24 * time.Hour,
		throttleFloor: 11 * time.Second, checkTimeout: 10 * time.Second,
		maxChecks: 200, maxFaults: 5,
	}, p)
	p = newWaitPolicy(cfg, Tuning{WaitIntervalOverride: time.Second, WaitMaxOverride: 3 * time.Second, WaitMaxChecks: 7, WaitMaxFaults: 2, WaitThrottleFloor: time.Millisecond}.withDefaults())
	require.Equal(t, waitPolicy{
		interval: time.Second, max: 3 * time.Second, afterMax: 30 * 24 * time.Hour,
		throttleFloor: time.Millisecond, checkTimeout: 10 * time.Second,
		maxChecks: 7, maxFaults: 2,
	}, p)
}

func TestPlanWait(t *testing.T) {
	t.Parallel()
	at := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	p := planWait([]jobs.WaitCondition{
		{After: "90m"}, {Profile: "jira"}, {After: at.Format(time.RFC3339)}, {Profile: "ci", Args: []string{"x"}},
	})
	require.Equal(t, 90*time.Minute, p.afterDelay)
	require.True(t, p.afterAt.Equal(at))
	require.Equal(t, []int{1, 3}, p.profiles)
	require.Equal(t, uint8(0b1010), p.mask)

	p = planWait([]jobs.WaitCondition{{After: "1s"}, {After: "2h"}, {After: "2029-01-01T00:00:00Z"}, {After: "2030-06-01T00:00:00+02:00"}})
	require.Equal(t, 2*time.Hour, p.afterDelay, "the longest delay")
	require.True(t, p.afterAt.Equal(time.Date(2030, 5, 31, 22, 0, 0, 0, time.UTC)), "the latest instant")
	require.Zero(t, p.mask)
	require.Empty(t, p.profiles)
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
func TestHoldVerdicts(t *testing.T) {
	t.Parallel()
	pol := waitPolicy{interval: time.Minute, max: time.Hour, afterMax: 24 * time.Hour, throttleFloor: 11 * time.Second, maxChecks: 10, maxFaults: 3}
	since := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	two := waitPlan{profiles: []int{0, 1}, mask: 0b11}
	st := func(now time.Duration, mod func(*HoldState)) HoldState {
		s := HoldState{Since: since, Now: since.Add(now)}
		if mod != nil {
			mod(&s)
		}
		return s
	}
	tests := []struct {
		name string
		st   HoldState
		plan waitPlan
		want holdVerdict
	}{
		{"FirstPickupChecks", st(0, nil), two, holdVerdict{action: holdCheck}},
		{"Superseded", st(0, func(s *HoldState) { s.Superseded = true; s.Released = true }), two, refuseHold(jobs.ReasonWaitSuperseded)},
		{"ReleasedGoesOn", st(2*time.Hour, func(s *HoldState) { s.Released = true }), two, holdVerdict{action: holdRelease}},
		{"AfterPending", st(time.Minute, func(s *HoldState) { s.AfterAt = since.Add(90 * time.Minute) }), two, deferHold(89*time.Minute, "wait-after")},
		{"AfterExactToTheMs", st(0, func(s *HoldState) { s.AfterAt = since.Add(1500*time.Millisecond + 1) }), waitPlan{}, holdVerdict{action: holdDefer, delay: 1501 * time.Millisecond, why: "wait-after"}},
		{"AfterPastCap", st(0, func(s *HoldState) { s.AfterAt = since.Add(25 * time.Hour) }), waitPlan{}, refuseHold(jobs.ReasonWaitTimeout)},
		{"AfterPassedNoProfiles", st(time.Hour, func(s *HoldState) { s.AfterAt = since.Add(time.Hour) }), waitPlan{}, holdVerdict{action: holdRelease}},
		{"AfterPassedProfilesDue", st(90*time.Minute, func(s *HoldState) { s.AfterAt = since.Add(time.Hour) }), two, holdVerdict{action: holdCheck}},
		{"DeadlineFromAfter", st(2*time.Hour, func(s *HoldState) { s.AfterAt = since.Add(time.Hour) }), two, refuseHold(jobs.ReasonWaitTimeout)},
		{"AllMetInEarlierRounds", st(5*time.Hour, func(s *HoldState) { s.Met = 0b11 }), two, holdVerdict{action: holdRelease}},
		{"Timeout", st(time.Hour, nil), two, refuseHold(jobs.ReasonWaitTimeout)},
		{"JustBeforeTimeout", st(time.Hour-time.Millisecond, nil), two, holdVerdict{action: holdCheck}},
		{"Faults", st(0, func(s *HoldState) { s.Faults = 3 }), two, refuseHold(jobs.ReasonWaitFaults)},
		{"MaxChecks", st(0, func(s *HoldState) { s.Checks = 10 }), two, refuseHold(jobs.ReasonWaitMaxChecks)},
		{"OneMetOneLeft", st(0, func(s *HoldState) { s.Met = 0b01; s.Checks = 9; s.Faults = 2 }), two, holdVerdict{action: holdCheck}},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, beforeCheck(tt.st, tt.plan, pol), tt.name)
	}

	deadline := since.Add(time.Hour)
	after := []struct {
		name string
		st   HoldState
		r    float64
		want holdVerdict
	}{
		{"NotYet", st(0, func(s *HoldState) { s.Checks = 1 }), 0, deferHold(time.Minute, "wait-check")},
		{"NotYetJitter", st(0, func(s *HoldState) { s.Checks = 1 }), 0.5, deferHold(63*time.Second, "wait-check")},
		{"Backoff", st(0, func(s *HoldState) { s.Checks = 6 }), 0, deferHold(4*time.Minute, "wait-check")},
		{"NeverPastDeadline", st(58*time.Minute, func(s *HoldState) { s.Checks = 6 }), 0, deferHold(2*time.Minute, "wait-check")},
		{"DeadlinePassed", st(time.Hour, func(s *HoldState) { s.Checks = 1 }), 0, refuseHold(jobs.ReasonWaitTimeout)},
		{"Released", st(0, func(s *HoldState) { s.Checks = 3; s.Released = true }), 0, holdVerdict{action: holdRelease}},
		{"Superseded", st(0, func(s *HoldState) { s.Superseded = true }), 0, refuseHold(jobs.ReasonWaitSuperseded)},
		{"FifthFaultOfThree", st(0, func(s *HoldState) { s.Checks = 3; s.Faults = 3 }), 0, refuseHold(jobs.ReasonWaitFaults)},
		{"LastCheck", st(0, func(s *HoldState) { s.Checks = 10 }), 0, refuseHold(jobs.ReasonWaitMaxChecks)},
		{"Lost", HoldState{Lost: true, Now: since}, 0, deferHold(time.Minute, "wait-state-lost")},
	}
	for _, tt := range after {
		require.Equal(t, tt.want, afterCheck(tt.st, deadline, pol, tt.r), tt.name)
	}

	throttled := []struct {
		name string
		st   HoldState
		r    float64
		want holdVerdict
	}{
		{"Floor", st(0, nil), 0, deferHold(15*time.Second, "wait-throttled")},
		{"Jitter", st(0, nil), 1, deferHold(16500*time.Millisecond, "wait-throttled")},
		{"BackoffQuarter", st(0, func(s *HoldState) { s.Checks = 12 }), 0, deferHold(150*time.Second, "wait-throttled")},
		{"NeverPastDeadline", st(time.Hour-time.Second, nil), 0, deferHold(time.Second, "wait-throttled")},
		{"DeadlinePassed", st(time.Hour, nil), 0, refuseHold(jobs.ReasonWaitTimeout)},
		{"Superseded", st(0, func(s *HoldState) { s.Superseded = true }), 0, refuseHold(jobs.ReasonWaitSuperseded)},
	}
	for _, tt := range throttled {
		require.Equal(t, tt.want, afterThrottle(tt.st, deadline, pol, tt.r), tt.name)
	}
}

func writeScript(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "check")
	require.NoError(t, os.WriteFile(p, []byte("#!/bin/sh\n"+body), 0o700))
	return p
}

func TestRunWaitCheck(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for code, want := range map[int]checkResult{0: checkMet, 1: checkNotYet, 2: checkFault, 3: checkFault, 127: checkFault} {
		res, why, err := runWaitCheck(ctx, writeScript(t, "exit "+strconv.Itoa(code)+"\n"), "jira", nil, 5*time.Second)
		require.NoError(t, err)
		require.Equal(t, want, res, "exit %d", code)
		if want == checkFault {
			require.Equal(t, "exited with code "+strconv.Itoa(code), why)
		}
	}

	// Args verbatim (no shell), a minimal environment, stdin closed, cwd /.
	out := filepath.Join(t.TempDir(), "seen")
	script := writeScript(t, `{ for a in "$@"; do printf '[%s]' "$a"; done; echo; env | sort; pwd; cat; } > "`+out+`"`+"\n")
	res, why, err := runWaitCheck(ctx, script, "ci.v2", []string{"$(touch /tmp/pwned)", "a b", "-x", ""}, 5*time.Second)
	require.NoError(t, err)
	require.Equal(t, checkMet, res, why)
	seen, err := os.ReadFile(out)
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(string(seen)), "\n")
	require.Equal(t, "[$(touch /tmp/pwned)][a b][-x][]", lines[0])
	var env []string
	for _, l := range lines[1 : len(lines)-1] {
		k, _, _ := strings.Cut(l, "=")
		env = append(env, k)
	}
	require.Subset(t, []string{"HOME", "PATH", "PI_WAIT_PROFILE", "PWD", "SHLVL", "_"}, env, "only PATH, HOME and the profile (and what sh adds)")
	require.Contains(t, string(seen), "PI_WAIT_PROFILE=ci.v2")
	require.NotContains(t, string(seen), "VALKEY_TEST_URL", "nothing of the worker's own environment")
	require.Equal(t, "/", lines[len(lines)-1])

	// A timeout is a fault, and the whole process group is killed.
	pidFile := filepath.Join(t.TempDir(), "pid")
	start := time.Now()
	res, why, err = runWaitCheck(ctx, writeScript(t, "sleep 30 &\necho $! > "+pidFile+"\nwait\n"), "jira", nil, 300*time.Millisecond)
	require.NoError(t, err)
	require.Equal(t, checkFault, res)
	require.Contains(t, why, "timed out after 300ms")
	require.Less(t, time.Since(start), 5*time.Second)
	pidText, err := os.ReadFile(pidFile)
	require.NoError(t, err)
	pid, err := strconv.Atoi(strings.TrimSpace(string(pidText)))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return syscall.Kill(pid, 0) == syscall.ESRCH || isZombie(pid) }, 5*time.Second, 20*time.Millisecond, "the check's child outlived it")

	// Bad setups are faults, never panics.
	for _, tt := range []struct{ path, profile, why string }{
		{"relative/check", "jira", "check path"},
		{"/nonexistent/check", "jira", "cannot start"},
		{script, "bad name", "invalid profile"},
	} {
		res, why, err := runWaitCheck(ctx, tt.path, tt.profile, nil, time.Second)
		require.NoError(t, err)
		require.Equal(t, checkFault, res)
		require.Contains(t, why, tt.why)
	}
	_, _, err = runWaitCheck(ctx, script, "jira", []string{"a\x00b"}, time.Second)
	require.NoError(t, err, "a NUL in an arg cannot start: a fault, not an error")

	// The caller's ctx ending is an error: nothing was learned.
	cctx, cancel := context.WithCancel(ctx)
	go func() { time.Sleep(100 * time.Millisecond); cancel() }()
	_, _, err = runWaitCheck(cctx, writeScript(t, "sleep 30\n"), "jira", nil, 10*time.Second)
	require.ErrorIs(t, err, context.Canceled)
}

// isZombie reports whether pid is a zombie (killed, not yet reaped by init).
func isZombie(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	f := strings.Fields(string(b))
	return len(f) > 2 && f[2] == "Z"
}

// The hold gate answers with a verdict and reports nothing itself: here,
// with no hold store, a deferral for handle to carry out. The job's queue is
// nil, so any report from the gate would panic.
func TestGateHoldReturnsAVerdict(t *testing.T) {
	t.Parallel()
	w := &Worker{log: slog.New(slog.DiscardHandler), tune: Tuning{UnreachableDeferral: 30 * time.Second}}
	h := &held{job: &HeldJob{ID: "w-1"}, spec: jobs.Job{WaitFor: []jobs.WaitCondition{{After: "1m"}}}}
	v := w.gateHold(context.Background(), h)
	require.Equal(t, verdict{act: actDefer, reason: jobs.ReasonWaitStateUnavailable, delay: 30 * time.Second}, v)

	h.spec.WaitFor = nil
	require.Equal(t, actGoOn, w.gateHold(context.Background(), h).act, "a job without conditions goes on")

	w.answer(context.Background(), h, verdict{act: actDrop}) // a dropped job: nothing reported
}
