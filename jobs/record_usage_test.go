package jobs_test

import (
	"testing"
	"time"

	"github.com/pidispatch/pidispatch/jobs"
)

func TestRecordUsageValidates(t *testing.T) {
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	ok := goodRecord()
	ok.Trigger = "pi-comment"
	ok.Spend = &jobs.Spend{Basis: jobs.BasisMetered, Micros: 3_000_000, Dollars: 3, Calls: 2,
		Models: []jobs.ModelSpend{{Provider: "anthropic", Model: "claude-x", Calls: 2, Micros: 3_000_000}}}
	ok.Timings = &jobs.Timings{EnqueuedAt: at, QueuedMs: 5, GatesMs: map[jobs.Reason]int64{jobs.ReasonScopeBusy: 10}, AgentMs: 100}
	ok.Container = &jobs.ContainerStats{PeakMemoryBytes: 1 << 20, CPUMillis: 40, OOMKilled: true}
	ok.PullRequest = &jobs.PullRequestOutcome{State: jobs.PullRequestMerged, UpdatedAt: at}
	if err := ok.Validate(); err != nil {
		t.Fatalf("a full record: %v", err)
	}
	bad := map[string]func(*jobs.Record){
		"trigger":         func(r *jobs.Record) { r.Trigger = "a b\n" },
		"model over run":  func(r *jobs.Record) { r.Spend.Models[0].Micros = 4_000_000 },
		"model control":   func(r *jobs.Record) { r.Spend.Models[0].Model = "m\x1b[31m" },
		"too many models": func(r *jobs.Record) { r.Spend.Models = make([]jobs.ModelSpend, 17) },
		"negative queued": func(r *jobs.Record) { r.Timings.QueuedMs = -1 },
		"gate name":       func(r *jobs.Record) { r.Timings.GatesMs["x\ny"] = 1 },
		"negative memory": func(r *jobs.Record) { r.Container.PeakMemoryBytes = -1 },
		"pr state":        func(r *jobs.Record) { r.PullRequest.State = "reopened-by-bot" },
		"pr no time":      func(r *jobs.Record) { r.PullRequest.UpdatedAt = time.Time{} },
	}
	for name, spoil := range bad {
		r := ok
		s, tm, c, p := *ok.Spend, *ok.Timings, *ok.Container, *ok.PullRequest
		s.Models = append([]jobs.ModelSpend(nil), ok.Spend.Models...)
		tm.GatesMs = map[jobs.Reason]int64{jobs.ReasonScopeBusy: 10}
		r.Spend, r.Timings, r.Container, r.PullRequest = &s, &tm, &c, &p
		spoil(&r)
		if err := r.Validate(); err == nil {
			t.Errorf("%s: validated", name)
		}
	}
}
