package operator

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pidispatch/pidispatch/fleetstate"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/jobs"
)

// mirrorAll reads every record in pages, also when many share one endedAt
// (a page that ends inside a run of equal scores goes on from there), skips
// an index member with no body, and keeps the window's lower bound.
func TestMirrorAllPagesOverEqualScores(t *testing.T) {
	db := livetest.Valkey(t)
	ctx := context.Background()
	old := mirrorPage
	mirrorPage = 7
	t.Cleanup(func() { mirrorPage = old })

	base := time.Now().UTC().Add(-48 * time.Hour).Truncate(time.Second)
	m := fleetstate.NewMirror(db.Client, fleetstate.MirrorConfig{})
	want := map[string]bool{}
	for i := range 100 {
		// Groups of 1, 2, ... 13 records end at the same millisecond.
		at := base.Add(time.Duration(groupOf(i)) * time.Minute)
		r := jobs.Record{JobID: fmt.Sprintf("j-%03d", i), Target: "acme/web", StartedAt: at.Add(-time.Minute), EndedAt: at,
			Outcome: jobs.OutcomeCompleted, Reason: jobs.ReasonCompleted, Attempt: 1, Host: "alpha", Queue: "pi-jobs"}
		if err := m.Mirror(ctx, r); err != nil {
			t.Fatal(err)
		}
		want[r.JobID] = true
	}
	// An index member whose body is gone is skipped and counted.
	if err := db.Client.ZAdd(ctx, fleetstate.RunIndexKey, redis.Z{Score: float64(base.Add(time.Hour).UnixMilli()), Member: "pi-jobs+gone.attempt-1"}).Err(); err != nil {
		t.Fatal(err)
	}

	recs, invalid, state, err := mirrorAll(ctx, db.Client, time.Time{}, fleetstate.DefaultMirrorIndexMax)
	if err != nil || state != fleetstate.MirrorOK || invalid != 1 || len(recs) != len(want) {
		t.Fatalf("read %d records, %d invalid, %q, %v; want %d, 1 invalid", len(recs), invalid, state, err, len(want))
	}
	for _, r := range recs {
		if !want[r.JobID] {
			t.Fatalf("%s read twice or never written", r.JobID)
		}
		delete(want, r.JobID)
	}

	// since is exclusive: the first group (one record at base) is out.
	recs, _, _, err = mirrorAll(ctx, db.Client, base, fleetstate.DefaultMirrorIndexMax)
	if err != nil || len(recs) != 99 {
		t.Fatalf("since: %d records, %v; want 99", len(recs), err)
	}
	// A full index whose oldest run is inside the window lost some of it.
	if _, _, state, _ := mirrorAll(ctx, db.Client, base.Add(-time.Hour), 50); state != fleetstate.MirrorTruncated {
		t.Fatalf("full index: state %q, want truncated", state)
	}
}

// groupOf puts record i in group g, where group g holds g+1 records.
func groupOf(i int) int {
	g := 0
	for n := 1; i >= n; n++ {
		i -= n
		g++
	}
	return g
}
