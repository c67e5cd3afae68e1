package dispatch_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/dispatch/dispatchtest"
	"github.com/pidispatch/pidispatch/jobs"
)

// stubPredictor predicts by trigger; a trigger it does not know has too
// little history.
type stubPredictor struct {
	by  map[string]jobs.Prediction
	err error
}

func (p stubPredictor) Predict(_ context.Context, trigger, _, _ string) (jobs.Prediction, bool, error) {
	if p.err != nil {
		return jobs.Prediction{}, false, p.err
	}
	pr, ok := p.by[trigger]
	return pr, ok, nil
}

// gateEvents notes every gate stop's reason by job.
type gateEvents struct {
	mu  sync.Mutex
	got map[string][]jobs.Reason
}

func (g *gateEvents) Observe(ev dispatch.Event) {
	if ev.Kind != dispatch.EventGate {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.got == nil {
		g.got = map[string][]jobs.Reason{}
	}
	g.got[ev.JobID] = append(g.got[ev.JobID], ev.Reason)
}

func (g *gateEvents) of(id string) []jobs.Reason {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]jobs.Reason(nil), g.got[id]...)
}

// agreeCron agrees to every scheduler's run.
type agreeCron struct{}

func (agreeCron) AdmitCron(context.Context, string, string, json.RawMessage) dispatch.CronVerdict {
	return dispatch.CronVerdict{Run: true}
}

// cronJob is a run of the cron entry trigger in a fresh folder, its cap
// lowered to capUSD when set.
func cronJob(t *testing.T, trigger, capUSD string) string {
	b, _ := json.Marshal(map[string]string{"kind": "cron", "folder": t.TempDir(), "flow": "fix", "task": "t", "schedulerId": trigger, "maxCostUsd": capUSD})
	return strings.Replace(string(b), `,"maxCostUsd":""`, "", 1)
}

// predictedHost is a fake host with a $5 job cap, a $10 day window of which
// $7 is held, and history saying a nightly run's p90 is $4.
func predictedHost(t *testing.T) (*fakeHost, *stubDollars, *gateEvents) {
	h := newFakeHost(t)
	h.cfg.Spend.MaxCostMicros = 5_000_000
	h.cfg.Spend.DailyCostMicros = 10_000_000
	h.cfg.Concurrency = 1
	h.tune.PredictedDeferral = 20e6 // 20ms
	dollars := &stubDollars{capM: 10_000_000, used: 7_000_000}
	h.deps.Dollars = dollars
	h.deps.Cron = agreeCron{}
	h.deps.Predictor = stubPredictor{by: map[string]jobs.Prediction{
		"nightly": {ExpectedMicros: 1_500_000, P90Micros: 4_000_000, Basis: "trigger", Runs: 20},
	}}
	ev := &gateEvents{}
	h.deps.Observers = append(h.deps.Observers, ev)
	return h, dollars, ev
}

// A job whose predicted p90 ($4) does not fit what the window has left ($3)
// waits predicted-over-budget, not refused dollar-cap, and runs once the
// window frees; its record carries the prediction.
func TestPredictedOverBudgetWaitsForTheWindow(t *testing.T) {
	h, dollars, ev := predictedHost(t)
	h.start(t)
	h.add(t, "nightly-1", cronJob(t, "nightly", ""), 1)
	s := h.wait(t, "nightly-1", func(s dispatchtest.Snapshot) bool { return s.Deferrals >= 2 || s.Finished() })
	if s.Finished() {
		t.Fatalf("nightly-1 finished (%s) with $3 left for a $4 p90: want it to wait", s.Result)
	}
	if got := ev.of("nightly-1"); len(got) == 0 || got[0] != jobs.ReasonPredictedOverBudget {
		t.Fatalf("gate stops %v, want predicted-over-budget", got)
	}
	if n := len(h.rt.Specs()); n != 0 {
		t.Fatalf("%d containers ran while it waited", n)
	}
	dollars.mu.Lock()
	dollars.used = 0 // the window frees
	dollars.mu.Unlock()
	h.wait(t, "nightly-1", finished)
	rec := h.oneRecord(t, "nightly-1", jobs.OutcomeCompleted, jobs.ReasonCompleted)
	if rec.Predicted == nil || rec.Predicted.P90Micros != 4_000_000 || rec.Predicted.Basis != "trigger" || rec.Predicted.Runs != 20 {
		t.Fatalf("record's prediction %+v, want p90 $4 over 20 runs of the trigger", rec.Predicted)
	}
}

// A trigger with too little history is admitted by the plain caps: refused
// dollar-cap when its cap does not fit, as without predictions, and run when
// it does.
func TestTooLittleHistoryIsAdmittedByThePlainCaps(t *testing.T) {
	h, _, _ := predictedHost(t)
	h.start(t)
	h.add(t, "rare-1", cronJob(t, "rare", ""), 1)
	s := h.wait(t, "rare-1", finished)
	if resultReason(t, s) != jobs.ReasonDollarCap || s.Deferrals != 0 {
		t.Fatalf("rare-1: %+v, want refused dollar-cap at once", s)
	}
	if rec := h.oneRecord(t, "rare-1", jobs.OutcomePolicy, jobs.ReasonDollarCap); rec.Predicted != nil {
		t.Fatalf("a trigger without history carries a prediction: %+v", rec.Predicted)
	}
	h.add(t, "rare-2", cronJob(t, "rare", "2"), 1)
	h.wait(t, "rare-2", finished)
	h.oneRecord(t, "rare-2", jobs.OutcomeCompleted, jobs.ReasonCompleted)
}

// A p90 past the job's own cap waits too: the run would likely be cut off
// at its cap with its money spent.
func TestPredictedOverTheJobCapWaits(t *testing.T) {
	h, dollars, ev := predictedHost(t)
	dollars.used = 0
	h.start(t)
	h.add(t, "nightly-cheap", cronJob(t, "nightly", "1"), 1)
	s := h.wait(t, "nightly-cheap", func(s dispatchtest.Snapshot) bool { return s.Deferrals >= 1 || s.Finished() })
	if s.Finished() || len(h.rt.Specs()) != 0 {
		t.Fatalf("a $1 job of a $4-p90 trigger ran: %+v", s)
	}
	if got := ev.of("nightly-cheap"); len(got) == 0 || got[0] != jobs.ReasonPredictedOverBudget {
		t.Fatalf("gate stops %v, want predicted-over-budget", got)
	}
	dollars.mu.Lock()
	defer dollars.mu.Unlock()
	if len(dollars.reserved) != 0 {
		t.Fatalf("reserved %v for a job that waits", dollars.reserved)
	}
}

// PI_PREDICT_ADMISSION=off, or a history that cannot be read, admits by the
// plain caps.
func TestPredictionOffOrUnreadableAdmitsByThePlainCaps(t *testing.T) {
	for name, set := range map[string]func(*fakeHost){
		"off":        func(h *fakeHost) { h.cfg.Spend.PredictOff = true },
		"unreadable": func(h *fakeHost) { h.deps.Predictor = stubPredictor{err: errors.New("mirror down")} },
	} {
		t.Run(name, func(t *testing.T) {
			h, _, _ := predictedHost(t)
			set(h)
			h.start(t)
			h.add(t, "nightly-1", cronJob(t, "nightly", ""), 1)
			s := h.wait(t, "nightly-1", finished)
			if resultReason(t, s) != jobs.ReasonDollarCap || s.Deferrals != 0 {
				t.Fatalf("%+v, want refused dollar-cap at once", s)
			}
		})
	}
}
