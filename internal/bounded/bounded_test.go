package bounded

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

func TestCallReturnsFnResult(t *testing.T) {
	var calls Calls
	v, err := Call(context.Background(), time.Second, &calls, nil, func(context.Context) (int, error) { return 7, nil })
	if v != 7 || err != nil {
		t.Fatalf("got %d %v", v, err)
	}
	if err := calls.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// A call that ignores its context still returns at the deadline; its late
// result reaches late, and Wait waits for it.
func TestCallBoundsAHungCall(t *testing.T) {
	var calls Calls
	release := make(chan struct{})
	var lateV atomic.Int64
	start := time.Now()
	_, err := Call(context.Background(), 50*time.Millisecond, &calls, func(v int, _ error) { lateV.Store(int64(v)) },
		func(context.Context) (int, error) { <-release; return 9, nil })
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err %v", err)
	}
	if took := time.Since(start); took > time.Second {
		t.Fatalf("bound did not hold: %s", took)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	if err := calls.Wait(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait returned %v with a call still running", err)
	}
	cancel()
	close(release)
	if err := calls.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	if lateV.Load() != 9 {
		t.Fatalf("late result %d, want 9", lateV.Load())
	}
}

// The caller's own cancellation is reported as such, not as a timeout.
func TestCallReportsCallerCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := Call(ctx, time.Second, nil, nil, func(ctx context.Context) (int, error) { <-ctx.Done(); return 0, ctx.Err() })
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v", err)
	}
}
