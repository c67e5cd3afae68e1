package fleetstate

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/jobs"
)

// predictRec is one finished run of trigger that spent micros.
func predictRec(id, trigger string, micros int64, ended time.Time) jobs.Record {
	code := 0
	return jobs.Record{JobID: id, Queue: "pi-jobs", Kind: jobs.KindCron, Target: "local:work", Flow: "fix", Trigger: trigger,
		StartedAt: ended.Add(-time.Minute), EndedAt: ended, Outcome: jobs.OutcomeCompleted, Reason: jobs.ReasonCompleted,
		ExitCode: &code, Attempt: 1, Host: "alpha", Spend: &jobs.Spend{Micros: micros, Dollars: jobs.USD(micros), Basis: jobs.BasisMetered}}
}

// The predictor reads the mirror once per refresh, not per job: runs
// mirrored in between are seen only once the clock passes the refresh.
func TestPredictorReadsTheMirrorAtMostOncePerRefresh(t *testing.T) {
	t.Parallel()
	db := livetest.Valkey(t)
	ctx := context.Background()
	m := NewMirror(db.Client, MirrorConfig{Host: "alpha"})
	now := time.Now()
	for i := range 19 {
		require.NoError(t, m.Mirror(ctx, predictRec(fmt.Sprintf("n-%d", i), "nightly", 4_000_000, now.Add(-time.Hour))))
	}
	var clock atomic.Int64
	clock.Store(now.UnixNano())
	p := NewPredictor(m, PredictorConfig{Now: func() time.Time { return time.Unix(0, clock.Load()) }})

	_, ok, err := p.Predict(ctx, "nightly", "fix", "local:work")
	require.NoError(t, err)
	require.False(t, ok, "19 runs are too few")

	require.NoError(t, m.Mirror(ctx, predictRec("n-19", "nightly", 4_000_000, now.Add(-time.Hour))))
	_, ok, _ = p.Predict(ctx, "nightly", "fix", "local:work")
	require.False(t, ok, "read again before the refresh")

	clock.Add(int64(DefaultPredictRefresh))
	pr, ok, err := p.Predict(ctx, "nightly", "fix", "local:work")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, jobs.Prediction{ExpectedMicros: 4_000_000, P90Micros: 4_000_000, Basis: "trigger+flow+repo", Runs: 20}, pr)
}

// A mirror that cannot be read is an error while no table was ever read,
// and the last table after.
func TestPredictorKeepsItsTableWhenTheMirrorFails(t *testing.T) {
	t.Parallel()
	db := livetest.Valkey(t)
	ctx := context.Background()
	m := NewMirror(db.Client, MirrorConfig{Host: "alpha"})
	now := time.Now()
	for i := range 20 {
		require.NoError(t, m.Mirror(ctx, predictRec(fmt.Sprintf("n-%d", i), "nightly", 1_000_000, now.Add(-time.Hour))))
	}
	var clock atomic.Int64
	clock.Store(now.UnixNano())
	p := NewPredictor(m, PredictorConfig{Now: func() time.Time { return time.Unix(0, clock.Load()) }})
	_, ok, err := p.Predict(ctx, "nightly", "fix", "local:work")
	require.NoError(t, err)
	require.True(t, ok)

	dead, cancel := context.WithCancel(ctx)
	cancel()
	clock.Add(int64(DefaultPredictRefresh))
	_, ok, err = p.Predict(dead, "nightly", "fix", "local:work")
	require.NoError(t, err)
	require.True(t, ok, "the last table still answers")

	fresh := NewPredictor(m, PredictorConfig{})
	_, _, err = fresh.Predict(dead, "nightly", "fix", "local:work")
	require.ErrorIs(t, err, ErrMirrorUnreachable)
}

// One refresh over a full index (5,000 attempts), measured.
func TestPredictorReadsAFullIndex(t *testing.T) {
	t.Parallel()
	db := livetest.Valkey(t)
	ctx := context.Background()
	m := NewMirror(db.Client, MirrorConfig{Host: "alpha"})
	now := time.Now()
	for i := range DefaultMirrorIndexMax {
		require.NoError(t, m.Mirror(ctx, predictRec(fmt.Sprintf("n-%d", i), "nightly", int64(i%100)*10_000, now.Add(-time.Duration(i)*time.Second))))
	}
	p := NewPredictor(m, PredictorConfig{})
	start := time.Now()
	pr, ok, err := p.Predict(ctx, "nightly", "fix", "local:work")
	took := time.Since(start)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, DefaultMirrorIndexMax, pr.Runs)
	require.Equal(t, int64(890_000), pr.P90Micros)
	t.Logf("one refresh over %d mirrored attempts took %s", pr.Runs, took)
}
