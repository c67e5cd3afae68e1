// Package faultpoint marks the steps of the worker where a crash matters most
// to its run records: between writing a record and changing the job's state.
// A normal build compiles Hit to nothing. A build with the tag faultpoint
// (the fleet suite's fault-injection worker, see fleettest) reads
// PIDISPATCH_TEST_CRASH_AT and kills its own process with SIGKILL the first
// time the named point is reached, so a test can crash a real worker at a
// step no signal sent from outside could hit reliably.
package faultpoint

// The points a test build can crash at.
const (
	// OrphanRecorded: at boot, a crashed predecessor's orphan is recorded
	// and its job is not yet failed (or completed) in the queue.
	OrphanRecorded = "orphan-recorded"
	// StalledRecorded: the stalled check wrote the records of the jobs it is
	// about to fail and has not failed them yet.
	StalledRecorded = "stalled-recorded"
	// RunRecorded: a run's record is written and its outcome not yet
	// reported to the queue.
	RunRecorded = "run-recorded"
)
