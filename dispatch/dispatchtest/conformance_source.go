package dispatchtest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/pidispatch/pidispatch/dispatch"
)

// SourceHarness is one JobSource under test with a way to add a job to the
// queue it takes from.
type SourceHarness struct {
	Source dispatch.JobSource
	Add    func(id string)
}

// TestJobSource runs the JobSource contract: Next waits for a job and hands
// it out locked with the caller's token, a cancelled ctx ends the wait, and
// after Close Next hands out nothing.
func TestJobSource(t *testing.T, newSource func(t *testing.T) SourceHarness) {
	for _, c := range []struct {
		name string
		run  func(*testing.T, SourceHarness)
	}{
		{"NextWaitsForAJobAndLocksIt", sourceNextWaits},
		{"CancelledContextEndsNext", sourceNextCancelled},
		{"NextAfterCloseReturnsNoJob", sourceNextAfterClose},
	} {
		t.Run(c.name, func(t *testing.T) { c.run(t, newSource(t)) })
	}
}

type nextResult struct {
	q   dispatch.JobQueue
	j   *dispatch.HeldJob
	err error
}

func goNext(ctx context.Context, s dispatch.JobSource, token string) <-chan nextResult {
	ch := make(chan nextResult, 1)
	go func() {
		q, j, err := s.Next(ctx, token)
		ch <- nextResult{q, j, err}
	}()
	return ch
}

func sourceNextWaits(t *testing.T, h SourceHarness) {
	ctx := qctx(t)
	got := goNext(ctx, h.Source, "tok-1")
	select {
	case r := <-got:
		t.Fatalf("Next on an empty queue returned %+v, want it to wait", r)
	case <-time.After(200 * time.Millisecond):
	}
	h.Add("job-1")
	var r nextResult
	select {
	case r = <-got:
	case <-time.After(5 * time.Second):
		t.Fatal("Next did not return the job added")
	}
	if r.err != nil || r.q == nil || r.j == nil || r.j.ID != "job-1" {
		t.Fatalf("Next = %v, %+v, %v; want job-1", r.q, r.j, r.err)
	}
	if err := r.q.Complete(ctx, "job-1", "other-token", nil); !errors.Is(err, dispatch.ErrLockLost) {
		t.Fatalf("Complete with another token: %v, want ErrLockLost", err)
	}
	if err := r.q.Complete(ctx, "job-1", "tok-1", nil); err != nil {
		t.Fatalf("Complete with Next's token: %v", err)
	}
	if err := h.Source.Close(); err != nil {
		t.Fatal(err)
	}
}

func sourceNextCancelled(t *testing.T, h SourceHarness) {
	ctx, cancel := context.WithCancel(qctx(t))
	got := goNext(ctx, h.Source, "tok-1")
	time.Sleep(100 * time.Millisecond)
	cancel()
	select {
	case r := <-got:
		if r.err == nil || r.j != nil {
			t.Fatalf("Next after cancel = %+v, want an error and no job", r)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Next did not return when its ctx was cancelled")
	}
	if err := h.Source.Close(); err != nil {
		t.Fatal(err)
	}
}

func sourceNextAfterClose(t *testing.T, h SourceHarness) {
	h.Add("job-1")
	if err := h.Source.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-goNext(qctx(t), h.Source, "tok-1"):
		if r.err == nil || r.j != nil {
			t.Fatalf("Next after Close = %+v, want an error and no job", r)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Next after Close did not return")
	}
}
