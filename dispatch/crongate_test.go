package dispatch

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/jobs"
)

// fixedGate answers every cron run the same way and remembers what it saw.
type fixedGate struct {
	v CronVerdict

	mu   sync.Mutex
	seen []string // queue/schedulerId
}

func (g *fixedGate) AdmitCron(_ context.Context, q, sid string, _ json.RawMessage) CronVerdict {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.seen = append(g.seen, q+"/"+sid)
	return g.v
}

// A job a scheduler made runs only when the cron gate says so: without a gate
// it is refused (cron-not-agreed) with a record and nothing runs; a gate that
// leaves it puts it back on its queue unrecorded; a gate that agrees runs it.
// A job that no scheduler made never asks the gate.
func TestCronGateDecidesSchedulerRuns(t *testing.T) {
	cronData, _ := json.Marshal(jobs.Job{Kind: jobs.KindCron, SchedulerID: "nightly", Folder: t.TempDir(), Flow: "fix", Task: "t"})
	localData, _ := json.Marshal(jobs.Job{Kind: jobs.KindLocal, Folder: t.TempDir(), Flow: "fix", Task: "t"})
	tests := []struct {
		name    string
		gate    *fixedGate
		data    []byte
		ran     bool
		state   JobState
		refused bool
	}{
		{"no gate", nil, cronData, false, StateCompleted, true},
		{"refused", &fixedGate{v: CronVerdict{Reason: "cron-disabled"}}, cronData, false, StateCompleted, true},
		{"left", &fixedGate{v: CronVerdict{Leave: true, Reason: "cron-disabled"}}, cronData, false, stateDelayed, false},
		{"agreed", &fixedGate{v: CronVerdict{Run: true}}, cronData, true, StateCompleted, false},
		{"not a cron job", &fixedGate{}, localData, true, StateCompleted, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeOrphanFixture(t)
			f.tune.BusyDeferral = time.Hour
			ctx := context.Background()
			if _, _, err := f.shared.Add(ctx, fxJobName, tt.data, fxAddOptions{JobID: "j1"}); err != nil {
				t.Fatal(err)
			}
			rt := &orphanRuntime{}
			w := f.worker(t, rt, &orphanRegistry{}, nil)
			if tt.gate != nil {
				w.deps.Cron = tt.gate
			}
			runCtx, cancel := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { done <- w.Run(runCtx) }()
			defer func() { cancel(); <-done }()

			deadline := time.Now().Add(15 * time.Second)
			for {
				j, err := f.shared.Get(ctx, "j1")
				if err != nil {
					t.Fatal(err)
				}
				if j.State == tt.state {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("job state %s, want %s", j.State, tt.state)
				}
				time.Sleep(20 * time.Millisecond)
			}
			if got := len(rt.ran()) > 0; got != tt.ran {
				t.Fatalf("ran = %v, want %v", got, tt.ran)
			}
			data, err := os.ReadFile(filepath.Join(f.cfg.LogsDir, jobs.RecordName(fleet.SharedQueue, "j1", 1)))
			switch {
			case tt.refused && err != nil:
				t.Fatalf("no record of the refusal: %v", err)
			case tt.refused:
				var r jobs.Record
				if err := json.Unmarshal(data, &r); err != nil || r.Outcome != jobs.OutcomePolicy || r.Reason != jobs.ReasonCronNotAgreed {
					t.Fatalf("refusal record %s (%v)", data, err)
				}
			case tt.state == stateDelayed && err == nil:
				t.Fatalf("a run left for a peer was recorded: %s", data)
			}
			if tt.gate != nil {
				want := []string{fleet.SharedQueue + "/nightly"}
				if string(tt.data) == string(localData) {
					want = nil
				}
				if !slices.Equal(tt.gate.seen, want) {
					t.Fatalf("gate saw %v, want %v", tt.gate.seen, want)
				}
			}
		})
	}
}
