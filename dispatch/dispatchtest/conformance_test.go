package dispatchtest_test

import (
	"testing"
	"time"

	"github.com/pidispatch/pidispatch/dispatch/dispatchtest"
)

// Every store's suite against the fake fleet driver, as stack runs it
// against the Valkey one.
func TestFakeFleet(t *testing.T) { dispatchtest.Exercise(t, dispatchtest.FakeTestFleet) }

func TestFakeRuntime(t *testing.T) { dispatchtest.TestRuntime(t, dispatchtest.FakeRuntimeHarness) }

func TestFakeSessions(t *testing.T) {
	dispatchtest.TestSessionStore(t, func(t *testing.T) dispatchtest.SessionsHarness {
		s := dispatchtest.NewSessions()
		return dispatchtest.SessionsHarness{Store: s, Wait: s.Advance,
			Write: func(thread string, value []byte) { s.Write(thread, value, time.Hour) }}
	})
}
