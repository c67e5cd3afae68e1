package dispatchtest_test

import (
	"testing"

	"github.com/pidispatch/pidispatch/dispatchtest"
)

func TestFakeJobSource(t *testing.T) { dispatchtest.TestJobSource(t, dispatchtest.FakeSourceHarness) }

func TestFakeRegistry(t *testing.T) { dispatchtest.TestRegistry(t, dispatchtest.FakeRegistryHarness) }

func TestFakeJobCancels(t *testing.T) {
	dispatchtest.TestJobCancels(t, dispatchtest.FakeCancelsHarness)
}

func TestFakeRuntime(t *testing.T) { dispatchtest.TestRuntime(t, dispatchtest.FakeRuntimeHarness) }

func TestFakeRateLimits(t *testing.T) {
	dispatchtest.TestRateLimits(t, dispatchtest.FakeRateLimitsHarness)
}

func TestFakeDollarBudget(t *testing.T) {
	dispatchtest.TestDollarBudget(t, dispatchtest.FakeDollarHarness)
}
