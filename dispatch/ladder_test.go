package dispatch

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/jobs"
)

// countingBudget grants (or refuses, or cannot be read) and counts.
type countingBudget struct {
	refuse bool
	err    error

	mu                 sync.Mutex
	reserves, releases int
}

func (b *countingBudget) Reserve(context.Context, string, *ScopeLimit) (Reservation, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.reserves++
	if b.err != nil {
		return Reservation{}, b.err
	}
	return Reservation{Granted: !b.refuse, Window: WindowDay, Cap: 1}, nil
}

func (b *countingBudget) Release(context.Context, Reservation) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.releases++
	return nil
}

// imageRuntime is an orphanRuntime whose image may be missing.
type imageRuntime struct {
	orphanRuntime
	missing bool
}

func (r *imageRuntime) ImagePresent(context.Context, string) (bool, error) { return !r.missing, nil }

// A gate that stops a job past the scope-slot and budget gates undoes them:
// the folder's slot is free again and the reservation released, after the
// refusal is recorded. A job whose container started keeps its reservation
// (the start was spent); one the budget refused or could not count has none
// to release.
func TestLadderReleasesWhatEarlierGatesTook(t *testing.T) {
	failing := filepath.Join(t.TempDir(), "resolver")
	if err := os.WriteFile(failing, []byte("#!/bin/sh\nexit 3\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name              string
		budget            *countingBudget
		missing           bool
		secrets           bool
		state             JobState
		reason            jobs.Reason // the record's; "" for none
		ran               bool
		reserves, release int
	}{
		{"runs", &countingBudget{}, false, false, StateCompleted, jobs.ReasonCompleted, true, 1, 0},
		{"image missing", &countingBudget{}, true, false, StateCompleted, jobs.ReasonJobImageMissing, false, 1, 1},
		{"secrets fail", &countingBudget{}, false, true, StateCompleted, jobs.ReasonSecretResolveFailed, false, 1, 1},
		{"over budget", &countingBudget{refuse: true}, false, false, StateCompleted, jobs.ReasonOverBudget, false, 1, 0},
		{"budget unreachable", &countingBudget{err: errors.New("down")}, false, false, "delayed", "", false, 1, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeOrphanFixture(t)
			f.tune.UnreachableDeferral = time.Hour
			f.cfg.SecretProfiles = map[string]string{"p": failing}
			spec := jobs.Job{Kind: jobs.KindLocal, Folder: t.TempDir(), Flow: "fix", Task: "t"}
			if tt.secrets {
				spec.SecretsProfile = "p"
			}
			data, _ := json.Marshal(spec)
			ctx := context.Background()
			if _, _, err := f.shared.Add(ctx, fxJobName, data, fxAddOptions{JobID: "j1", Attempts: 1}); err != nil {
				t.Fatal(err)
			}
			rt := &imageRuntime{missing: tt.missing}
			w := f.worker(t, rt, &orphanRegistry{}, nil)
			w.deps.Budget = tt.budget
			runCtx, cancel := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { done <- w.Run(runCtx) }()
			waitState(t, f.shared, "j1", tt.state)
			cancel()
			if err := <-done; err != nil { // every job's handling has ended
				t.Fatal(err)
			}

			if got := len(rt.ran()) > 0; got != tt.ran {
				t.Errorf("ran = %v, want %v", got, tt.ran)
			}
			tt.budget.mu.Lock()
			if tt.budget.reserves != tt.reserves || tt.budget.releases != tt.release {
				t.Errorf("budget: %d reserves, %d releases; want %d, %d", tt.budget.reserves, tt.budget.releases, tt.reserves, tt.release)
			}
			tt.budget.mu.Unlock()
			w.mu.Lock()
			if len(w.inFlight) != 0 {
				t.Errorf("scope slots still held: %v", w.inFlight)
			}
			w.mu.Unlock()
			rec, ok := w.ownRecord(jobs.Record{Queue: fleet.SharedQueue, JobID: "j1", Attempt: 1})
			switch {
			case tt.reason == "" && ok:
				t.Errorf("a deferral was recorded: %+v", rec)
			case tt.reason != "" && (!ok || rec.Reason != tt.reason):
				t.Errorf("record %+v (found %v), want reason %s", rec, ok, tt.reason)
			}
		})
	}
}

func waitState(t *testing.T, q fixtureQueue, id string, want JobState) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		j, err := q.Get(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if j.State == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s state %s, want %s", id, j.State, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
