package dispatch

import "github.com/redis/go-redis/v9"

// The live tests of this package run the Worker with the Valkey-backed
// stores of package fleetstate, which imports this one. stores_ext_test.go,
// in package dispatch_test, fills TestStores with them.

// TestStores builds the stores the live tests use.
var TestStores struct {
	Budget       func(c redis.UniversalClient, dailyCap int) Budgeter
	Mirror       func(c redis.UniversalClient, host string) RunMirror
	RunRecordKey func(jobID string, attempt int) string
}

var testStores = &TestStores
