package dispatch

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/pidispatch/pidispatch/dispatch/internal/hold"
	"github.com/pidispatch/pidispatch/jobs"
	"github.com/stretchr/testify/require"
)

func TestNewWaitPolicy(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	p := newWaitPolicy(cfg, Tuning{}.withDefaults())
	require.Equal(t, hold.Policy{
		Interval: time.Minute, Max: 24 * time.Hour, AfterMax: 30 * 24 * time.Hour,
		ThrottleFloor: 11 * time.Second, CheckTimeout: 10 * time.Second,
		MaxChecks: 200, MaxFaults: 5,
	}, p)
	p = newWaitPolicy(cfg, Tuning{WaitIntervalOverride: time.Second, WaitMaxOverride: 3 * time.Second, WaitMaxChecks: 7, WaitMaxFaults: 2, WaitThrottleFloor: time.Millisecond}.withDefaults())
	require.Equal(t, hold.Policy{
		Interval: time.Second, Max: 3 * time.Second, AfterMax: 30 * 24 * time.Hour,
		ThrottleFloor: time.Millisecond, CheckTimeout: 10 * time.Second,
		MaxChecks: 7, MaxFaults: 2,
	}, p)
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
