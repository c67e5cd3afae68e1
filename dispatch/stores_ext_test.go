package dispatch_test

import (
	"github.com/redis/go-redis/v9"

	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/fleetstate"
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
