package dispatch_test

import (
	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/dispatch/dispatchtest"
	"github.com/pidispatch/pidispatch/jobs"
)

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
