// Package bounded runs a Valkey call under a hard deadline.
//
// The deadline reaches the call through its context, but a go-redis client
// built without ContextTimeoutEnabled waits for its own ReadTimeout on a hung
// server. Racing the call against the deadline makes the bound hold whatever
// the client's options, which is what lets the registry, the leases, the
// budget and the run mirror promise "every call bounded, failing open".
package bounded

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Call runs fn with a deadline of d and returns when fn does or when the
// deadline passes, whichever is first. A call that overruns finishes in the
// background: it is counted in calls (when not nil) so its owner's Close can
// wait for it, and its late result goes to late (when not nil), for example
// to release a lease that was won after the caller gave up.
func Call[T any](ctx context.Context, d time.Duration, calls *Calls, late func(T, error), fn func(context.Context) (T, error)) (T, error) {
	cctx, cancel := context.WithTimeout(ctx, d)
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	var state atomic.Int32 // 0 running, 1 delivered, 2 abandoned
	calls.add()
	go func() {
		defer calls.done()
		defer cancel()
		v, err := fn(cctx)
		if state.CompareAndSwap(0, 1) {
			done <- result{v, err}
		} else if late != nil {
			late(v, err)
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

// Calls counts calls in flight, including those their callers gave up on.
// Unlike a sync.WaitGroup it may be added to while someone waits (a call that
// starts during Close), and Wait takes a ctx. The zero value is ready; a nil
// *Calls counts nothing.
type Calls struct {
	mu   sync.Mutex
	n    int
	idle chan struct{} // closed when n drops to 0
}

func (c *Calls) add() {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == 0 {
		c.idle = make(chan struct{})
	}
	c.n++
}

func (c *Calls) done() {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n--
	if c.n == 0 {
		close(c.idle)
	}
}

// Add counts a call the owner tracks itself (a background job); Done ends it.
func (c *Calls) Add() { c.add() }

// Done ends a call counted with Add.
func (c *Calls) Done() { c.done() }

// Wait returns nil once nothing is in flight, or ctx's error when ctx ends
// first.
func (c *Calls) Wait(ctx context.Context) error {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	if c.n == 0 {
		c.mu.Unlock()
		return nil
	}
	idle := c.idle
	c.mu.Unlock()
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
