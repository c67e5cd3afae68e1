package stack_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/pidispatch/pidispatch/config"
	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/dispatch/dispatchtest"
	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/fleetstate"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/internal/testkit/stacktest"
	"github.com/pidispatch/pidispatch/jobs"
	"github.com/pidispatch/pidispatch/operator"
	"github.com/pidispatch/pidispatch/queue"
	"github.com/pidispatch/pidispatch/stack"
)

// agreeCron agrees to every scheduler's run: the test's cron jobs are added
// by hand, not by a triggers file.
type agreeCron struct{}

func (agreeCron) AdmitCron(context.Context, string, string, json.RawMessage) dispatch.CronVerdict {
	return dispatch.CronVerdict{Run: true}
}

// TestLivePredictedAdmission runs a real worker on real Valkey (its queue,
// dollar windows, run mirror and predictor) with a fake container runtime.
// History says a nightly run costs $4 at p90 and the day window has $3
// left: a nightly job waits predicted-over-budget, which explain shows with
// the figures, and starts once the window frees. A trigger with too little
// history is admitted by the plain caps.
func TestLivePredictedAdmission(t *testing.T) {
	db := livetest.Valkey(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	folder, err := os.MkdirTemp("", "predict-work-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(folder) })
	target := "local:" + filepath.Base(folder)

	// History: 20 nightly runs, 17 at $1 and 3 at $4 (p90 $4); 5 rare runs at $4.
	mirror := fleetstate.NewMirror(db.Client, fleetstate.MirrorConfig{Host: "seed"})
	seed := func(id, trigger string, micros int64) {
		code := 0
		ended := time.Now().Add(-time.Hour)
		rec := jobs.Record{JobID: id, Queue: fleet.SharedQueue, Kind: jobs.KindCron, Target: target, Flow: "fix", Trigger: trigger,
			StartedAt: ended.Add(-time.Minute), EndedAt: ended, Outcome: jobs.OutcomeCompleted, Reason: jobs.ReasonCompleted,
			ExitCode: &code, Attempt: 1, Host: "seed", Spend: &jobs.Spend{Micros: micros, Dollars: jobs.USD(micros), Basis: jobs.BasisMetered}}
		if err := mirror.Mirror(ctx, rec); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 20 {
		seed(fmt.Sprintf("hist-nightly-%d", i), "nightly", map[bool]int64{true: 4_000_000, false: 1_000_000}[i < 3])
	}
	for i := range 5 {
		seed(fmt.Sprintf("hist-rare-%d", i), "rare", 4_000_000)
	}
	// The day window ($10) holds $7 for another job: $3 left.
	dollars := fleetstate.NewDollars(db.Client, fleetstate.DollarsConfig{DailyMicros: 10_000_000})
	other, err := dollars.ReserveDollars(ctx, "other-job", "/elsewhere", nil, 7_000_000, 10*time.Minute)
	if err != nil || !other.Granted {
		t.Fatalf("seed reservation: %+v %v", other, err)
	}

	env := map[string]string{
		"VALKEY_URL": db.URL, "PI_WORKER_NAME": "predict-1", "PI_LOGS_DIR": t.TempDir(), "PI_UNSIGNED_QUEUES": "*",
		"PI_FOLDER_ROOTS": os.TempDir(), "PI_CONTAINER_USER": "root", "PI_MAX_COST_USD": "5", "PI_DAILY_COST_USD": "10", "PI_GATEWAY": "off",
	}
	cfg, err := config.Load(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	rt := dispatchtest.NewRuntime()
	s, err := stack.Build(ctx, cfg, slog.New(slog.NewJSONHandler(io.Discard, nil)),
		dispatch.Tuning{JobsDir: t.TempDir(), PredictedDeferral: 300 * time.Millisecond},
		func(d *dispatch.Deps) { d.Runtime, d.Cron = rt, agreeCron{} })
	if err != nil {
		t.Fatal(err)
	}
	stacktest.Run(t, s)

	q, err := queue.New(db.Client, fleet.SharedQueue, queue.Config{})
	if err != nil {
		t.Fatal(err)
	}
	add := func(id, trigger, capUSD string) {
		job := map[string]string{"kind": "cron", "folder": folder, "flow": "fix", "task": "t", "schedulerId": trigger}
		if capUSD != "" {
			job["maxCostUsd"] = capUSD
		}
		data, _ := json.Marshal(job)
		if _, _, err := q.Add(ctx, "job", data, queue.AddOptions{JobID: id}); err != nil {
			t.Fatal(err)
		}
	}
	record := func(id string) (jobs.Record, bool) {
		recs, _ := jobs.ReadRecords(cfg.LogsDir, id)
		if len(recs) == 0 {
			return jobs.Record{}, false
		}
		return recs[len(recs)-1], true
	}
	opts := operator.ExplainOptions{LogsDir: cfg.LogsDir, UnsignedQueues: cfg.UnsignedQueues, Sources: operator.SpendSources(db.Client, cfg)}

	// A nightly job: p90 $4, $3 left. It waits, and explain says why.
	add("nightly-1", "nightly", "")
	var found operator.Finding
	for deadline := time.Now().Add(60 * time.Second); found.Code == ""; time.Sleep(100 * time.Millisecond) {
		if rec, ok := record("nightly-1"); ok {
			t.Fatalf("nightly-1 ended %s/%s with $3 left for a $4 p90: want it to wait", rec.Outcome, rec.Reason)
		}
		ex, err := operator.Explain(ctx, db.Client, "nightly-1", opts)
		if err != nil {
			t.Fatal(err)
		}
		if ex.State == "delayed" && ex.Primary().Code == operator.FindPredictedOver {
			found = ex.Primary()
		}
		if time.Now().After(deadline) {
			t.Fatalf("explain never showed predicted-over-budget: %+v", ex)
		}
	}
	t.Logf("explain: %s", found.Words)
	if found.Data["p90Usd"] != 4.0 || found.Data["leftUsd"] != 3.0 || found.Data["basis"] != "trigger+flow+repo" || found.Data["limit"] != dispatch.WindowDay {
		t.Fatalf("explain's figures %v, want p90 $4, $3 left in the day window, basis trigger+flow+repo", found.Data)
	}
	if n := len(rt.Specs()); n != 0 {
		t.Fatalf("%d containers ran while the job waited", n)
	}

	// A rare job (5 runs of history, too few) with a $2 cap fits the $3 left:
	// admitted by the plain caps though its runs cost $4.
	add("rare-1", "rare", "2")
	waitRecord := func(id string) jobs.Record {
		for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			if rec, ok := record(id); ok {
				return rec
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s has no record after 60s", id)
			}
		}
	}
	if rec := waitRecord("rare-1"); rec.Outcome != jobs.OutcomeCompleted || rec.Predicted != nil {
		t.Fatalf("rare-1: %s/%s predicted %+v, want completed with no prediction", rec.Outcome, rec.Reason, rec.Predicted)
	}
	if _, ok := record("nightly-1"); ok {
		t.Fatal("nightly-1 ran before the window freed")
	}

	// The other job settles at $1: the window frees, and nightly-1 starts.
	if err := dollars.SettleDollars(ctx, other, 1_000_000); err != nil {
		t.Fatal(err)
	}
	rec := waitRecord("nightly-1")
	if rec.Outcome != jobs.OutcomeCompleted || rec.Predicted == nil || rec.Predicted.P90Micros != 4_000_000 || rec.Predicted.Runs != 20 {
		t.Fatalf("nightly-1: %s/%s predicted %+v, want completed with the $4 p90 over 20 runs", rec.Outcome, rec.Reason, rec.Predicted)
	}
}
