// Package stacktest runs a built stack's worker for the length of a test.
package stacktest

import (
	"context"
	"testing"
	"time"

	"github.com/pidispatch/pidispatch/stack"
)

// stopWait bounds how long a stopped worker may take to return: past it the
// test fails rather than hangs.
const stopWait = 60 * time.Second

// Run runs s's worker until the test ends. Then it stops the worker, waits
// for Run to return (an error fails the test, and so does a worker still
// running after a minute), and closes s.
func Run(t testing.TB, s *stack.Stack) {
	t.Helper()
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Worker.Run(ctx) }()
	t.Cleanup(func() {
		stop()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("the worker stopped with %v", err)
			}
		case <-time.After(stopWait):
			t.Error("the worker did not stop")
		}
		s.Close()
	})
}
