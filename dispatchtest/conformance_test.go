package dispatchtest_test

import (
	"testing"

	"github.com/pidispatch/pidispatch/dispatchtest"
)

func TestFakeJobQueue(t *testing.T) { dispatchtest.TestJobQueue(t, dispatchtest.FakeQueueHarness) }
