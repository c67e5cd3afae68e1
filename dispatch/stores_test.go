package dispatch

import (
	"github.com/redis/go-redis/v9"

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
