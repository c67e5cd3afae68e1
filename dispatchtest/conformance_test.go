package dispatchtest_test

import (
	"testing"

	"github.com/pidispatch/pidispatch/dispatchtest"
)

func TestFakeJobQueue(t *testing.T) { dispatchtest.TestJobQueue(t, dispatchtest.FakeQueueHarness) }

func TestFakeBudgeter(t *testing.T) { dispatchtest.TestBudgeter(t, dispatchtest.FakeBudgetHarness) }

func TestFakeLeaser(t *testing.T) { dispatchtest.TestLeaser(t, dispatchtest.FakeLeasers) }

func TestFakeRunMirror(t *testing.T) { dispatchtest.TestRunMirror(t, dispatchtest.FakeMirrorHarness) }

func TestFakeHoldStore(t *testing.T) { dispatchtest.TestHoldStore(t, dispatchtest.FakeHoldStore) }

func TestFakeFinder(t *testing.T) { dispatchtest.TestFinder(t, dispatchtest.FakeFinderHarness) }
