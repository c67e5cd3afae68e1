package dispatch

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/pidispatch/pidispatch/dispatch/container"
	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/internal/testkit/hostileid"
	"github.com/pidispatch/pidispatch/jobs"
)

// peerAdd writes a job the way another BullMQ client may, with any id it
// allows, bypassing this module's checks: the fake queue takes any id.
func peerAdd(t *testing.T, f *orphanFixture, id string, data []byte) {
	t.Helper()
	if !f.fake.AddJob(id, data, 1) {
		t.Fatalf("peer add %q: already there", id)
	}
}

// A job a peer wrote with an id this module refuses is read, refused with
// exactly one record and failed, never run; the valid ones among them run
// and are recorded under their own names.
func TestPeerWrittenIDsAreRefusedAtPickup(t *testing.T) {
	f := newFakeOrphanFixture(t)
	f.cap = 1000 // every valid one runs
	rt := &orphanRuntime{reap: container.ReapReport{Enumerated: true}}
	_, stop := f.boot(t, rt, &orphanRegistry{})
	data, _ := json.Marshal(jobs.Job{Kind: jobs.KindForge, Repo: "acme/web", Flow: "fix", Task: "t"})
	seen := map[string]bool{}
	var ids []string
	for _, id := range hostileid.IDs() {
		// "" is no custom id (BullMQ numbers it); "0:..." are BullMQ's markers.
		if id == "" || strings.HasPrefix(id, "0:") || seen[id] {
			continue
		}
		seen[id] = true
		ids = append(ids, id)
		peerAdd(t, f, id, data)
	}
	ctx := context.Background()
	deadline := time.Now().Add(90 * time.Second)
	for _, id := range ids {
		for {
			j, err := f.shared.Get(ctx, id)
			if err == nil && (j.State == StateFailed || j.State == StateCompleted) {
				valid := fleet.CheckJobID(id) == nil
				if !valid && (j.State != StateFailed || j.FailedReason != string(jobs.ReasonInvalidJob) || j.AttemptsMade != 1) {
					t.Errorf("%q: %s (%s), want failed as invalid-job", id, j.State, j.FailedReason)
				}
				if valid && j.State != StateCompleted {
					t.Errorf("%q: %s (%s), want completed", id, j.State, j.FailedReason)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%q not finished: %+v %v", id, j, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	stop()
	ran := map[string]int{}
	for _, id := range rt.ran() {
		ran[id]++
	}
	files := 0
	for _, id := range ids {
		recID, quoted := jobs.RefusedJobID(id)
		recs, err := jobs.ReadRecords(f.cfg.LogsDir, recID)
		if err != nil || len(recs) != 1 {
			t.Errorf("%q: %d records (%v), want exactly one", id, len(recs), err)
			continue
		}
		files++
		r := recs[0]
		if fleet.CheckJobID(id) == nil {
			if ran[id] != 1 || r.Outcome != jobs.OutcomeCompleted || r.JobID != id || r.JobIDQuoted != "" {
				t.Errorf("%q: ran %d times, record %+v", id, ran[id], r)
			}
			continue
		}
		if ran[id] != 0 || r.Outcome != jobs.OutcomeFailed || r.Reason != jobs.ReasonInvalidJob || r.ExitCode != nil || r.JobIDQuoted != quoted {
			t.Errorf("%q: ran %d times, record %+v", id, ran[id], r)
		}
	}
	if all := len(mustReadDir(t, f.cfg.LogsDir)); all != files {
		t.Errorf("%d record files for %d jobs", all, files)
	}
}

func mustReadDir(t *testing.T, dir string) []os.DirEntry {
	t.Helper()
	e, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	return e
}
