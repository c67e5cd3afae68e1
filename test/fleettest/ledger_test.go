package fleettest

import (
	"fmt"
	"slices"
	"sync"

	"github.com/pidispatch/pidispatch/jobs"
	"github.com/pidispatch/pidispatch/queue"
)

// ledger is the suite's account of every job a scenario enqueued: where the
// scenario's records may be (the logs dirs of its workers) and the job's final
// state in Valkey, written by the scenario once the job finished. TestMain
// checks that each job has exactly one run record across those dirs, agreeing
// with that final state.
type ledger struct {
	mu      sync.Mutex
	entries []*ledgerEntry
	dirs    map[string][]string // scenario -> logs dirs of its workers
}

type ledgerEntry struct {
	scenario string
	jobID    string
	final    queue.State // "" until the scenario saw the job finish
}

// addDir registers a logs dir of a scenario's worker.
func (l *ledger) addDir(scenario, dir string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.dirs == nil {
		l.dirs = map[string][]string{}
	}
	if !slices.Contains(l.dirs[scenario], dir) {
		l.dirs[scenario] = append(l.dirs[scenario], dir)
	}
}

// enqueued notes a job a scenario added.
func (l *ledger) enqueued(scenario, jobID string) *ledgerEntry {
	l.mu.Lock()
	defer l.mu.Unlock()
	e := &ledgerEntry{scenario: scenario, jobID: jobID}
	l.entries = append(l.entries, e)
	return e
}

// settled notes a job's final state.
func (l *ledger) settled(e *ledgerEntry, state queue.State) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e.final = state
}

// of returns the entries of one scenario.
func (l *ledger) of(scenario string) []*ledgerEntry {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []*ledgerEntry
	for _, e := range l.entries {
		if e.scenario == scenario {
			out = append(out, e)
		}
	}
	return out
}

// total counts the jobs enqueued and those accounted for: a final state of
// completed or failed, and exactly one record across the scenario's logs dirs
// whose outcome matches it (a completed job's record says completed or
// policy, a refusal; a failed job's says failed). problems names the others.
func (l *ledger) total() (enqueued, accounted int, problems []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, e := range l.entries {
		enqueued++
		// The latest attempt's records, as the final state reflects it: an
		// earlier attempt may have run (and been recorded) on another host.
		var recs []jobs.Record
		var where []string
		latest := 0
		for _, dir := range l.dirs[e.scenario] {
			all, err := jobs.ReadRecords(dir, e.jobID)
			if err != nil {
				problems = append(problems, fmt.Sprintf("%s/%s: unreadable record in %s: %v", e.scenario, e.jobID, dir, err))
				continue
			}
			for _, r := range all {
				switch {
				case r.Attempt > latest:
					latest, recs, where = r.Attempt, []jobs.Record{r}, []string{dir}
				case r.Attempt == latest:
					recs, where = append(recs, r), append(where, dir)
				}
			}
		}
		switch {
		case e.final != queue.StateCompleted && e.final != queue.StateFailed:
			problems = append(problems, fmt.Sprintf("%s/%s: never seen finished (state %q), %d record(s)", e.scenario, e.jobID, e.final, len(recs)))
		case len(recs) != 1:
			problems = append(problems, fmt.Sprintf("%s/%s: %d records (in %v) of attempt %d, want exactly one", e.scenario, e.jobID, len(recs), where, latest))
		case !outcomeMatches(e.final, recs[0].Outcome):
			problems = append(problems, fmt.Sprintf("%s/%s: job %s but its record says %s/%s", e.scenario, e.jobID, e.final, recs[0].Outcome, recs[0].Reason))
		default:
			accounted++
		}
	}
	return enqueued, accounted, problems
}

// outcomeMatches says whether a record's outcome is the one a job in the
// final state must have.
func outcomeMatches(final queue.State, outcome string) bool {
	if final == queue.StateCompleted {
		return outcome == jobs.OutcomeCompleted || outcome == jobs.OutcomePolicy
	}
	return outcome == jobs.OutcomeFailed
}
