package dispatch_test

import (
	"github.com/redis/go-redis/v9"

	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/dispatchtest"
	"github.com/pidispatch/pidispatch/fleetstate"
	"github.com/pidispatch/pidispatch/jobs"
	"github.com/pidispatch/pidispatch/queue"
	"github.com/pidispatch/pidispatch/stack"
)

func init() {
	dispatch.TestStores.Budget = func(c redis.UniversalClient, dailyCap int) dispatch.Budgeter {
		return fleetstate.NewBudget(c, fleetstate.BudgetConfig{DailyCap: dailyCap})
	}
	dispatch.TestStores.Mirror = func(c redis.UniversalClient, host string) dispatch.RunMirror {
		return fleetstate.NewMirror(c, fleetstate.MirrorConfig{Host: host})
	}
	dispatch.TestStores.RunRecordKey = fleetstate.RunRecordKey
	dispatch.TestStores.Queue = func(q *queue.Queue) dispatch.JobQueue { return stack.JobQueue(q) }
	dispatch.TestStores.Source = stack.Source
	dispatch.TestStores.Directory = func(d *queue.Directory) dispatch.Directory { return stack.Directory(d) }
	dispatch.TestStores.Registry = stack.Registry
	dispatch.TestStores.Held = func(j *queue.Job) *dispatch.HeldJob {
		return &dispatch.HeldJob{ID: j.ID, Data: j.Data, DedupID: j.DedupID, AttemptsMade: j.AttemptsMade,
			SchedulerID: j.SchedulerID, ProcessedBy: j.ProcessedBy, State: dispatch.JobState(j.State)}
	}
}

func init() {
	dispatch.TestFakes.Queue = func(name, worker string) dispatch.FakeQueue {
		q := dispatchtest.NewQueue(name)
		q.WorkerName = worker
		return fakeQueue{q}
	}
	dispatch.TestFakes.Budget = func(dailyCap int) dispatch.Budgeter { return dispatchtest.NewBudget(dailyCap, 0) }
	dispatch.TestFakes.Mirror = func() (dispatch.RunMirror, func() []jobs.Record) {
		m := dispatchtest.NewMirror()
		return m, m.Records
	}
}

// fakeQueue is a dispatchtest.Queue as the package's own tests drive it.
type fakeQueue struct{ *dispatchtest.Queue }

func (q fakeQueue) AddJob(id string, data []byte, attempts int) bool {
	return q.Add(dispatchtest.Job{ID: id, Data: data, Attempts: attempts})
}

func (q fakeQueue) FailedReason(id string) string {
	s, _ := q.Snapshot(id)
	return s.FailedReason
}

func (q fakeQueue) Source() dispatch.JobSource { return dispatchtest.NewSource(q.Queue) }
