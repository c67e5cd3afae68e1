package dispatch_test

import (
	"testing"

	"github.com/pidispatch/pidispatch/dispatchtest"
)

// A held job on a host queue is live; the same lookup on the shared queue
// alone (the original's) would have called it dead. The Valkey directory
// passes the same suite in package stack.
func TestJobLiveAcrossQueues(t *testing.T) {
	dispatchtest.TestFinder(t, dispatchtest.FakeFinderHarness)
}
