package dispatchtest_test

import (
	"testing"

	"github.com/pidispatch/pidispatch/dispatch/dispatchtest"
)

// Every store's suite against the fake fleet driver, as stack runs it
// against the Valkey one.
func TestFakeFleet(t *testing.T) { dispatchtest.Exercise(t, dispatchtest.FakeTestFleet) }

func TestFakeRuntime(t *testing.T) { dispatchtest.TestRuntime(t, dispatchtest.FakeRuntimeHarness) }
