package registry

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// bounded runs fn with a deadline of d and returns when fn does or when the
// deadline passes, whichever is first. The deadline also reaches fn through its
// ctx, but a go-redis client built without ContextTimeoutEnabled waits for its
// own ReadTimeout on a hung server; racing fn makes the bound hold whatever the
// client's options. A call that overruns finishes in the background, counted in
// wg so the owner's Close can wait for it.
func bounded[T any](ctx context.Context, d time.Duration, wg *sync.WaitGroup, fn func(context.Context) (T, error)) (T, error) {
	cctx, cancel := context.WithTimeout(ctx, d)
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	var state atomic.Int32 // 0 running, 1 delivered, 2 abandoned
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer cancel()
		v, err := fn(cctx)
		if state.CompareAndSwap(0, 1) {
			done <- result{v, err}
		}
	}()
	select {
	case r := <-done:
		return r.v, r.err
	case <-cctx.Done():
		if state.CompareAndSwap(0, 2) {
			var zero T
			if err := ctx.Err(); err != nil {
				return zero, err
			}
			return zero, fmt.Errorf("no answer within %s: %w", d, context.DeadlineExceeded)
		}
		r := <-done
		return r.v, r.err
	}
}
