package dispatch

import (
	"context"

	"github.com/redis/go-redis/v9"

	"github.com/pidispatch/pidispatch/jobs"
	"github.com/pidispatch/pidispatch/queue"
	"github.com/pidispatch/pidispatch/registry"
)

// The live tests of this package run the Worker with the Valkey-backed
// stores of package fleetstate and the adapters of package stack, which
// import this one. stores_ext_test.go,
// in package dispatch_test, fills TestStores with them.

// TestStores builds the stores the live tests use.
var TestStores struct {
	Budget       func(c redis.UniversalClient, dailyCap int) Budgeter
	Mirror       func(c redis.UniversalClient, host string) RunMirror
	RunRecordKey func(jobID string, attempt int) string
	// The stack's adapters of the Valkey queue and registry.
	Queue     func(q *queue.Queue) JobQueue
	Source    func(c *queue.Consumer) JobSource
	Directory func(d *queue.Directory) Directory
	Registry  func(r *registry.Registry) Registry
	Held      func(j *queue.Job) *HeldJob
}

var testStores = &TestStores

// TestFakes builds the fakes of package dispatchtest for this package's own
// tests, which cannot import it (it imports this package):
// stores_ext_test.go fills it.
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
