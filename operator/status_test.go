package operator_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/jobs"
	"github.com/pidispatch/pidispatch/operator"
	"github.com/pidispatch/pidispatch/queue"
)

func TestFinishedOutcome(t *testing.T) {
	t.Parallel()
	for result, want := range map[string]string{
		`{"outcome":"policy","reason":"scope-cap"}`:       operator.FinishedRefused,
		`{"outcome":"policy","reason":"timeout"}`:         operator.FinishedRefused,
		`{"outcome":"policy","reason":"operator-cancel"}`: operator.FinishedCancelled,
		`{"outcome":"completed"}`:                         operator.FinishedCompleted,
		`{"event":"exit","turns":3,"cost":0.05}`:          operator.FinishedCompleted,
		// A container's exit line cannot pass for a refusal.
		`{"event":"exit","outcome":"policy"}`: operator.FinishedCompleted,
		`null`:                                operator.FinishedCompleted,
		``:                                    operator.FinishedCompleted,
	} {
		if got := operator.FinishedOutcome(json.RawMessage(result)); got != want {
			t.Errorf("%s: %s, want %s", result, got, want)
		}
	}
}

// finish takes the next job of q and ends it: with result, or failed for
// good when result is "".
func finish(t *testing.T, q *queue.Queue, result string) {
	t.Helper()
	ctx := context.Background()
	tok := queue.NewToken()
	j, err := q.Fetch(ctx, tok)
	if err != nil || j == nil {
		t.Fatalf("fetch: %v %v", j, err)
	}
	if result == "" {
		if _, err := q.Fail(ctx, j.ID, tok, string(jobs.ReasonExit1), queue.FailOptions{NoRetry: true}); err != nil {
			t.Fatal(err)
		}
		return
	}
	if err := q.Complete(ctx, j.ID, tok, json.RawMessage(result)); err != nil {
		t.Fatal(err)
	}
}

// Refused and cancelled jobs are completed in the queue, but status counts
// them apart from the runs that succeeded, per queue and in total.
func TestStatusCountsByOutcome(t *testing.T) {
	t.Parallel()
	db := livetest.Valkey(t)
	ctx := context.Background()
	shared := mustQueue(t, db.Client, fleet.SharedQueue)
	host := mustQueue(t, db.Client, fleet.HostQueueName("alpha"))
	for i, q := range []*queue.Queue{shared, shared, shared, shared, shared, host, host} {
		if _, _, err := q.Add(ctx, "j", json.RawMessage(`{}`), queue.AddOptions{JobID: "j" + string(rune('a'+i))}); err != nil {
			t.Fatal(err)
		}
	}
	finish(t, shared, `{"event":"exit","turns":3}`)
	finish(t, shared, `{"outcome":"policy","reason":"scope-cap"}`)
	finish(t, shared, `{"outcome":"policy","reason":"operator-cancel"}`)
	finish(t, shared, "")
	finish(t, host, `{"outcome":"completed"}`)
	finish(t, host, `{"outcome":"policy","reason":"over-budget"}`)

	set := operator.QueueSet{Names: []string{fleet.SharedQueue, fleet.HostQueueName("alpha")}}
	rep, err := operator.StatusPerQueue(ctx, db.Client, set)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Completed != 2 || rep.Refused != 2 || rep.Cancelled != 1 || rep.Failed != 1 || rep.Waiting != 1 {
		t.Fatalf("totals %+v", rep)
	}
	want := []operator.QueueStatus{
		{Queue: fleet.SharedQueue, Waiting: 1, Completed: 1, Refused: 1, Cancelled: 1, Failed: 1},
		{Queue: fleet.HostQueueName("alpha"), Completed: 1, Refused: 1},
	}
	if len(rep.PerQueue) != 2 || rep.PerQueue[0] != want[0] || rep.PerQueue[1] != want[1] {
		t.Fatalf("per queue %+v, want %+v", rep.PerQueue, want)
	}
	if plain, err := operator.Status(ctx, db.Client, set); err != nil || plain.PerQueue != nil || plain.Refused != 2 {
		t.Fatalf("Status: %+v %v", plain, err)
	}
}
