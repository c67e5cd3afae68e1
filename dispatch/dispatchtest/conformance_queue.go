package dispatchtest

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/pidispatch/pidispatch/dispatch"
)

// QueueHarness is one JobQueue under test, with what a test needs beyond the
// interface to drive it.
type QueueHarness struct {
	Queue dispatch.JobQueue
	// Add adds a waiting job that may run attempts times (0 and 1: once).
	Add func(id string, data []byte, attempts int)
	// Take hands out the next ready job, locked with token; nil when none.
	Take func(token string) *dispatch.HeldJob
	// ExpireLock drops job id's lock, as if its holder stopped renewing it.
	ExpireLock func(id string)
}

// TestJobQueue runs the behaviour the Worker relies on from a JobQueue
// against the queues newQueue makes, a fresh one per case.
func TestJobQueue(t *testing.T, newQueue func(t *testing.T) QueueHarness) {
	cases := []struct {
		name string
		run  func(t *testing.T, h QueueHarness)
	}{
		{"TakeLocksAndGetSaysActive", queueTakeActive},
		{"CompleteFinishesOnce", queueCompleteOnce},
		{"WrongTokenIsLockLost", queueWrongToken},
		{"UnknownIDIsNotFound", queueUnknownID},
		{"FailRetriesWhileAttemptsRemain", queueFailRetries},
		{"FailNoRetryFailsForGood", queueFailNoRetry},
		{"FailFreeAttemptGrantsOneMore", queueFailFreeAttempt},
		{"DeferIsNotAnAttempt", queueDefer},
		{"DeferNotedKeepsTheNote", queueDeferNoted},
		{"ExtendLockKeepsTheJob", queueExtendLock},
		{"ExpiredLockIsLostAndStalledFails", queueStalled},
		{"FinishedJobCannotBeReported", queueFinished},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { c.run(t, newQueue(t)) })
	}
}

func qctx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func mustTake(t *testing.T, h QueueHarness, token, id string) *dispatch.HeldJob {
	t.Helper()
	j := h.Take(token)
	if j == nil || j.ID != id {
		t.Fatalf("Take(%s) = %+v, want job %s", token, j, id)
	}
	return j
}

func wantState(t *testing.T, h QueueHarness, id string, state dispatch.JobState, attemptsMade int) {
	t.Helper()
	j, err := h.Queue.Get(qctx(t), id)
	if err != nil {
		t.Fatalf("Get(%s): %v", id, err)
	}
	if j.State != state || j.AttemptsMade != attemptsMade {
		t.Fatalf("Get(%s) = state %q, attemptsMade %d; want %q, %d", id, j.State, j.AttemptsMade, state, attemptsMade)
	}
}

func wantErr(t *testing.T, what string, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("%s: err = %v, want %v", what, err, target)
	}
}

func queueTakeActive(t *testing.T, h QueueHarness) {
	if h.Queue.Name() == "" {
		t.Fatal("Name() is empty")
	}
	h.Add("job-a", []byte(`{"n":1}`), 1)
	j := mustTake(t, h, "tok-1", "job-a")
	if string(j.Data) != `{"n":1}` || j.AttemptsMade != 0 {
		t.Fatalf("taken job = data %s, attemptsMade %d; want {\"n\":1}, 0", j.Data, j.AttemptsMade)
	}
	if j.ProcessedOn.IsZero() {
		t.Error("taken job has no ProcessedOn")
	}
	wantState(t, h, "job-a", dispatch.StateActive, 0)
	if next := h.Take("tok-2"); next != nil {
		t.Fatalf("a held job was handed out again: %+v", next)
	}
}

func queueCompleteOnce(t *testing.T, h QueueHarness) {
	ctx := qctx(t)
	h.Add("job-c", []byte(`{}`), 3)
	mustTake(t, h, "tok", "job-c")
	if err := h.Queue.Complete(ctx, "job-c", "tok", json.RawMessage(`{"outcome":"completed"}`)); err != nil {
		t.Fatal(err)
	}
	wantState(t, h, "job-c", dispatch.StateCompleted, 1)
	wantErr(t, "second Complete", h.Queue.Complete(ctx, "job-c", "tok", nil), dispatch.ErrLockLost)
	if h.Take("tok-2") != nil {
		t.Fatal("a completed job was handed out")
	}
}

func queueWrongToken(t *testing.T, h QueueHarness) {
	ctx := qctx(t)
	h.Add("job-w", []byte(`{}`), 2)
	mustTake(t, h, "right", "job-w")
	wantErr(t, "Complete with a wrong token", h.Queue.Complete(ctx, "job-w", "wrong", nil), dispatch.ErrLockLost)
	_, err := h.Queue.Fail(ctx, "job-w", "wrong", "x", dispatch.FailOptions{})
	wantErr(t, "Fail with a wrong token", err, dispatch.ErrLockLost)
	wantErr(t, "Defer with a wrong token", h.Queue.Defer(ctx, "job-w", "wrong", time.Minute), dispatch.ErrLockLost)
	wantErr(t, "ExtendLock with a wrong token", h.Queue.ExtendLock(ctx, "job-w", "wrong", time.Minute), dispatch.ErrLockLost)
	wantState(t, h, "job-w", dispatch.StateActive, 0)
	if err := h.Queue.Complete(ctx, "job-w", "right", nil); err != nil {
		t.Fatalf("Complete with the right token after wrong ones: %v", err)
	}
}

func queueUnknownID(t *testing.T, h QueueHarness) {
	ctx := qctx(t)
	_, err := h.Queue.Get(ctx, "nope")
	wantErr(t, "Get", err, dispatch.ErrJobNotFound)
	wantErr(t, "Complete", h.Queue.Complete(ctx, "nope", "tok", nil), dispatch.ErrJobNotFound)
	_, err = h.Queue.Fail(ctx, "nope", "tok", "x", dispatch.FailOptions{})
	wantErr(t, "Fail", err, dispatch.ErrJobNotFound)
	wantErr(t, "Defer", h.Queue.Defer(ctx, "nope", "tok", time.Second), dispatch.ErrJobNotFound)
	// ExtendLock reads only the lock: an id nobody holds is a lost lock.
	wantErr(t, "ExtendLock", h.Queue.ExtendLock(ctx, "nope", "tok", time.Second), dispatch.ErrLockLost)
}

func queueFailRetries(t *testing.T, h QueueHarness) {
	ctx := qctx(t)
	h.Add("job-r", []byte(`{}`), 3)
	for i := 1; i <= 3; i++ {
		j := mustTake(t, h, "tok", "job-r")
		if j.AttemptsMade != i-1 {
			t.Fatalf("take %d: attemptsMade %d, want %d", i, j.AttemptsMade, i-1)
		}
		retried, err := h.Queue.Fail(ctx, "job-r", "tok", "exit-1", dispatch.FailOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if want := i < 3; retried != want {
			t.Fatalf("Fail %d: retried = %v, want %v", i, retried, want)
		}
	}
	wantState(t, h, "job-r", dispatch.StateFailed, 3)
	if h.Take("tok") != nil {
		t.Fatal("a job failed for good was handed out")
	}
}

func queueFailNoRetry(t *testing.T, h QueueHarness) {
	ctx := qctx(t)
	h.Add("job-n", []byte(`{}`), 5)
	mustTake(t, h, "tok", "job-n")
	retried, err := h.Queue.Fail(ctx, "job-n", "tok", "invalid-job", dispatch.FailOptions{NoRetry: true})
	if err != nil || retried {
		t.Fatalf("Fail NoRetry = %v, %v; want false, nil", retried, err)
	}
	wantState(t, h, "job-n", dispatch.StateFailed, 1)
}

// A free attempt retries a job on its last attempt and grants exactly one
// more: the run after it is the last again.
func queueFailFreeAttempt(t *testing.T, h QueueHarness) {
	ctx := qctx(t)
	h.Add("job-s", []byte(`{}`), 1)
	mustTake(t, h, "tok", "job-s")
	retried, err := h.Queue.Fail(ctx, "job-s", "tok", "worker-shutdown", dispatch.FailOptions{FreeAttempt: true})
	if err != nil || !retried {
		t.Fatalf("Fail FreeAttempt = %v, %v; want true, nil", retried, err)
	}
	j := mustTake(t, h, "tok-2", "job-s")
	if j.AttemptsMade != 1 {
		t.Fatalf("retaken with attemptsMade %d, want 1 (the cut attempt is counted)", j.AttemptsMade)
	}
	retried, err = h.Queue.Fail(ctx, "job-s", "tok-2", "exit-1", dispatch.FailOptions{})
	if err != nil || retried {
		t.Fatalf("Fail after the free attempt = %v, %v; want false, nil (one attempt granted, not more)", retried, err)
	}
	wantState(t, h, "job-s", dispatch.StateFailed, 2)
}

func queueDefer(t *testing.T, h QueueHarness) {
	ctx := qctx(t)
	h.Add("job-d", []byte(`{}`), 1)
	mustTake(t, h, "tok", "job-d")
	if err := h.Queue.Defer(ctx, "job-d", "tok", time.Hour); err != nil {
		t.Fatal(err)
	}
	j, err := h.Queue.Get(ctx, "job-d")
	if err != nil {
		t.Fatal(err)
	}
	if j.AttemptsMade != 0 || j.State == dispatch.StateActive || j.State == dispatch.StateFailed || j.State == dispatch.StateCompleted {
		t.Fatalf("deferred job: state %q, attemptsMade %d; want not finished, not active, 0", j.State, j.AttemptsMade)
	}
	if h.Take("tok-2") != nil {
		t.Fatal("a job deferred for an hour was handed out")
	}
	wantErr(t, "Complete after Defer", h.Queue.Complete(ctx, "job-d", "tok", nil), dispatch.ErrLockLost)
	h.Add("job-d0", []byte(`{}`), 1)
	mustTake(t, h, "tok-3", "job-d0")
	if err := h.Queue.Defer(ctx, "job-d0", "tok-3", 0); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for h.Take("tok-4") == nil {
		if time.Now().After(deadline) {
			t.Fatal("a job deferred for 0 was not handed out again")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// queueDeferNoted: a queue that keeps deferral notes hands the last one back
// at the next take; a deferral without a note keeps it.
func queueDeferNoted(t *testing.T, h QueueHarness) {
	nd, ok := h.Queue.(dispatch.NotedDeferrer)
	if !ok {
		t.Skip("the queue keeps no notes")
	}
	ctx := qctx(t)
	h.Add("job-n", []byte(`{}`), 1)
	mustTake(t, h, "tok", "job-n")
	if err := nd.DeferNoted(ctx, "job-n", "tok", 0, `{"a":1}`); err != nil {
		t.Fatal(err)
	}
	j := takeAgain(t, h, "tok-2")
	if err := h.Queue.Defer(ctx, "job-n", "tok-2", 0); err != nil {
		t.Fatal(err)
	}
	k := takeAgain(t, h, "tok-3")
	if j.GateWaits != `{"a":1}` || k.GateWaits != `{"a":1}` {
		t.Fatalf("notes %q then %q, want the deferral's both times", j.GateWaits, k.GateWaits)
	}
}

// takeAgain takes the job a deferral for 0 puts back.
func takeAgain(t *testing.T, h QueueHarness, token string) *dispatch.HeldJob {
	deadline := time.Now().Add(5 * time.Second)
	for {
		if j := h.Take(token); j != nil {
			return j
		}
		if time.Now().After(deadline) {
			t.Fatal("a job deferred for 0 was not handed out again")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func queueExtendLock(t *testing.T, h QueueHarness) {
	ctx := qctx(t)
	h.Add("job-e", []byte(`{}`), 1)
	mustTake(t, h, "tok", "job-e")
	if err := h.Queue.ExtendLock(ctx, "job-e", "tok", time.Minute); err != nil {
		t.Fatal(err)
	}
	st, err := h.Queue.CheckStalled(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(st.Failed, "job-e") || slices.Contains(st.Requeued, "job-e") {
		t.Fatalf("a locked job was stalled: %+v", st)
	}
	if err := h.Queue.Complete(ctx, "job-e", "tok", nil); err != nil {
		t.Fatal(err)
	}
}

func queueStalled(t *testing.T, h QueueHarness) {
	ctx := qctx(t)
	h.Add("job-s", []byte(`{}`), 3)
	mustTake(t, h, "tok", "job-s")
	h.ExpireLock("job-s")
	wantErr(t, "ExtendLock after expiry", h.Queue.ExtendLock(ctx, "job-s", "tok", time.Minute), dispatch.ErrLockLost)
	st, err := h.Queue.CheckStalled(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(st.Failed, "job-s") {
		t.Fatalf("CheckStalled = %+v, want job-s failed (a stalled paid job never runs twice)", st)
	}
	j, err := h.Queue.Get(ctx, "job-s")
	if err != nil || j.State != dispatch.StateFailed {
		t.Fatalf("stalled job: %+v, %v; want failed", j, err)
	}
	wantErr(t, "Complete after the stall", h.Queue.Complete(ctx, "job-s", "tok", nil), dispatch.ErrLockLost)
}

func queueFinished(t *testing.T, h QueueHarness) {
	ctx := qctx(t)
	h.Add("job-f", []byte(`{}`), 1)
	mustTake(t, h, "tok", "job-f")
	if _, err := h.Queue.Fail(ctx, "job-f", "tok", "exit-1", dispatch.FailOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err := h.Queue.Fail(ctx, "job-f", "tok", "again", dispatch.FailOptions{})
	wantErr(t, "Fail of a failed job", err, dispatch.ErrLockLost)
	wantErr(t, "Defer of a failed job", h.Queue.Defer(ctx, "job-f", "tok", time.Second), dispatch.ErrLockLost)
	wantState(t, h, "job-f", dispatch.StateFailed, 1)
}
