package dispatchtest

import (
	"context"
	"testing"
	"time"

	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/jobs"
)

// RecordClaimer decides fleet-wide which host writes the record of an
// attempt; the Worker uses it when its RunMirror has it.
type RecordClaimer interface {
	Claim(ctx context.Context, queue, jobID string, attempt int, host string) (string, error)
	ReleaseClaim(ctx context.Context, queue, jobID string, attempt int, host string) error
}

// MirrorHarness is one RunMirror under test and a reading of what it holds.
type MirrorHarness struct {
	Mirror interface {
		dispatch.RunMirror
		RecordClaimer
	}
	// Read returns the mirrored records (any order).
	Read func() []jobs.Record
}

// TestRunMirror runs the RunMirror and record-claim contract against the
// mirrors newMirror makes, a fresh one per case.
func TestRunMirror(t *testing.T, newMirror func(t *testing.T) MirrorHarness) {
	cases := []struct {
		name string
		run  func(t *testing.T, h MirrorHarness)
	}{
		{"GoThenCloseMirrors", mirrorGo},
		{"GoAfterCloseDoesNothing", mirrorClosed},
		{"FirstClaimWins", mirrorClaim},
		{"ReleaseClaimOnlyByTheOwner", mirrorRelease},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { c.run(t, newMirror(t)) })
	}
}

// TestRecord is a valid run record of one attempt of jobID.
func TestRecord(jobID string, attempt int) jobs.Record {
	end := time.Now().UTC().Truncate(time.Millisecond)
	return jobs.Record{
		JobID: jobID, Kind: jobs.KindManual, Target: "-", Host: "host-a", Image: "pi-agent:test",
		StartedAt: end.Add(-time.Second), EndedAt: end, Attempt: attempt,
		Outcome: jobs.OutcomeFailed, Reason: jobs.ReasonExit1,
	}
}

func mirrorGo(t *testing.T, h MirrorHarness) {
	rec := TestRecord("job-m", 1)
	h.Mirror.Go(context.Background(), rec)
	if err := h.Mirror.Close(qctx(t)); err != nil {
		t.Fatal(err)
	}
	got := h.Read()
	if len(got) != 1 || got[0].JobID != rec.JobID || got[0].Attempt != 1 || got[0].Reason != rec.Reason || got[0].Host != rec.Host {
		t.Fatalf("mirrored = %+v, want the one record %+v", got, rec)
	}
}

func mirrorClosed(t *testing.T, h MirrorHarness) {
	if err := h.Mirror.Close(qctx(t)); err != nil {
		t.Fatal(err)
	}
	h.Mirror.Go(context.Background(), TestRecord("job-late", 1))
	if got := h.Read(); len(got) != 0 {
		t.Fatalf("a record mirrored after Close: %+v", got)
	}
}

func claim(t *testing.T, c RecordClaimer, id string, attempt int, host string) string {
	t.Helper()
	owner, err := c.Claim(qctx(t), fleet.SharedQueue, id, attempt, host)
	if err != nil {
		t.Fatalf("Claim(%s, %d, %s): %v", id, attempt, host, err)
	}
	return owner
}

func mirrorClaim(t *testing.T, h MirrorHarness) {
	if o := claim(t, h.Mirror, "job-c", 1, "host-a"); o != "host-a" {
		t.Fatalf("first claim owner = %q, want host-a", o)
	}
	if o := claim(t, h.Mirror, "job-c", 1, "host-a"); o != "host-a" {
		t.Fatalf("the owner claiming again = %q, want host-a", o)
	}
	if o := claim(t, h.Mirror, "job-c", 1, "host-b"); o != "host-a" {
		t.Fatalf("a second host's claim = %q, want host-a", o)
	}
	if o := claim(t, h.Mirror, "job-c", 2, "host-b"); o != "host-b" {
		t.Fatalf("another attempt's claim = %q, want host-b", o)
	}
}

func mirrorRelease(t *testing.T, h MirrorHarness) {
	claim(t, h.Mirror, "job-r", 1, "host-a")
	if err := h.Mirror.ReleaseClaim(qctx(t), fleet.SharedQueue, "job-r", 1, "host-b"); err != nil {
		t.Fatal(err)
	}
	if o := claim(t, h.Mirror, "job-r", 1, "host-b"); o != "host-a" {
		t.Fatalf("after another host's release the owner = %q, want host-a", o)
	}
	if err := h.Mirror.ReleaseClaim(qctx(t), fleet.SharedQueue, "job-r", 1, "host-a"); err != nil {
		t.Fatal(err)
	}
	if o := claim(t, h.Mirror, "job-r", 1, "host-b"); o != "host-b" {
		t.Fatalf("after the owner's release the owner = %q, want host-b", o)
	}
}
