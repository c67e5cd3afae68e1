package dispatch

import (
	"context"

	"github.com/pidispatch/pidispatch/jobs"
)

// TestFakes builds the fakes of package dispatchtest for this package's own
// tests, which cannot import it (it imports this package):
// stores_ext_test.go, in package dispatch_test, fills it.
var TestFakes struct {
	// Queue is an empty fake queue called name, taken from by worker.
	Queue  func(name, worker string) FakeQueue
	Budget func(dailyCap int) Budgeter
	// Mirror is an empty fake mirror and a reading of its records.
	Mirror func() (RunMirror, func() []jobs.Record)
}

// FakeQueue is a fake queue as this package's tests drive it.
type FakeQueue interface {
	JobQueue
	AddJob(id string, data []byte, attempts int) bool
	Take(token string) *HeldJob
	TakeAs(token, worker string) *HeldJob
	ExpireLock(id string)
	Unlocked(ctx context.Context) ([]string, error)
	FailedReason(id string) string
	// Source hands out this queue's jobs.
	Source() JobSource
}
