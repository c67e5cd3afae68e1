package queue_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/pidispatch/pidispatch/queue"
)

// Unlocked lists exactly the active jobs whose lock expired, and changes
// nothing: the stalled check then fails those.
func TestUnlockedListsWhatTheStalledCheckWillTake(t *testing.T) {
	_, q := setup(t, queue.Config{LockTTL: 100 * time.Millisecond})
	ctx := context.Background()
	for _, id := range []string{"held", "lapsed"} {
		if _, _, err := q.Add(ctx, "j", json.RawMessage(`{}`), queue.AddOptions{JobID: id}); err != nil {
			t.Fatal(err)
		}
	}
	if ids, err := q.Unlocked(ctx); err != nil || len(ids) != 0 {
		t.Fatalf("nothing active yet: %v %v", ids, err)
	}
	j1, err := q.Fetch(ctx, "t1")
	if err != nil || j1 == nil {
		t.Fatal(j1, err)
	}
	j2, err := q.Fetch(ctx, "t2")
	if err != nil || j2 == nil {
		t.Fatal(j2, err)
	}
	keep, lapse := j1.ID, j2.ID
	time.Sleep(60 * time.Millisecond)
	if err := q.ExtendLock(ctx, keep, "t1", time.Minute); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	ids, err := q.Unlocked(ctx)
	if err != nil || len(ids) != 1 || ids[0] != lapse {
		t.Fatalf("unlocked %v %v, want [%s]", ids, err, lapse)
	}
	if j, err := q.Get(ctx, lapse); err != nil || j.State != queue.StateActive {
		t.Fatalf("Unlocked changed %s: %+v %v", lapse, j, err)
	}
	st, err := q.CheckStalled(ctx)
	if err != nil || len(st.Failed) != 1 || st.Failed[0] != lapse {
		t.Fatalf("stalled %+v %v", st, err)
	}
}
