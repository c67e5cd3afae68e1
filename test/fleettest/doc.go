// Package fleettest is the fleet proof: a test suite that builds cmd/worker
// and cmd/pi-dispatch, starts several worker processes with different names
// and profiles against one private redis-server and the machine's Docker
// daemon, and drives them the way an operator and a front-end would (the
// pi-dispatch binary, enqueue.Producer and enqueue.Router).
//
// Each scenario asserts on what the fleet leaves behind: run records, the
// workers' JSON log lines and the state in Valkey. Scenarios cover capability
// routing, a host killed mid-job, a host stopped past the route-fresh window
// and the re-homing of its stranded jobs, a redis-server restart under load,
// a duplicate worker name, the kill switch with a host down, and cron
// agreement between two hosts. The fault scenarios crash workers where a run
// record is at stake: at a step between a record and the job's state change
// (a second build of cmd/worker with the tag faultpoint crashes itself at the
// step PIDISPATCH_TEST_CRASH_AT names, see internal/faultpoint), frozen past
// a lock, hung past its registry row with a job on its own host queue,
// killed while containers finish, and killed at random under load, and a
// Valkey primary killed under load while Sentinel promotes its replica (a
// primary, replica and sentinel of the scenario's own, reached only through
// the Sentinel URL); each prints a "fault" line with its jobs, attempts, records, duplicates and
// lost records. At the end the suite checks that every job any scenario
// enqueued ended with exactly one terminal run record of its last attempt.
//
// The package holds tests only. They run when PIDISPATCH_FLEET=1 (set by
// .ci/run) and skip otherwise; with it set, a missing service (redis-server,
// Docker, the go toolchain) fails the suite rather than skipping it.
package fleettest
