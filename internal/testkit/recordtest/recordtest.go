// Package recordtest waits for run records in tests.
package recordtest

import (
	"testing"
	"time"

	"github.com/pidispatch/pidispatch/jobs"
)

// Wait waits up to timeout for a run record of jobID in dir and returns its
// latest attempt's; a folder that cannot be read fails the test at once.
func Wait(t testing.TB, dir, jobID string, timeout time.Duration) jobs.Record {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		recs, err := jobs.ReadRecords(dir, jobID)
		if err != nil {
			t.Fatalf("records of %s: %v", jobID, err)
		}
		if len(recs) > 0 {
			return recs[len(recs)-1]
		}
		if time.Now().After(deadline) {
			t.Fatalf("no record for %s in %s after %s", jobID, dir, timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
