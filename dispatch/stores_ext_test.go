package dispatch_test

import (
	"github.com/redis/go-redis/v9"

	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/fleetstate"
)

func init() {
	dispatch.TestStores.Budget = func(c redis.UniversalClient, dailyCap int) dispatch.Budgeter {
		return fleetstate.NewBudget(c, fleetstate.BudgetConfig{DailyCap: dailyCap})
	}
	dispatch.TestStores.Mirror = func(c redis.UniversalClient, host string) dispatch.RunMirror {
		return fleetstate.NewMirror(c, fleetstate.MirrorConfig{Host: host})
	}
	dispatch.TestStores.RunRecordKey = fleetstate.RunRecordKey
}
