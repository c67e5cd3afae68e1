package dash_test

import (
	"context"
	"testing"
	"time"

	"github.com/pidispatch/pidispatch/fleetstate"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/operator/dash"
)

// The page's dollar windows are the fleet budget's: settled plus reserved.
func TestFleetDollarsReadsTheWindows(t *testing.T) {
	db := livetest.Valkey(t)
	d := fleetstate.NewDollars(db.Client, fleetstate.DollarsConfig{DailyMicros: 5_000_000, MonthlyMicros: 50_000_000})
	res, err := d.ReserveDollars(context.Background(), "j", "", nil, 1_500_000, time.Minute)
	if err != nil || !res.Granted {
		t.Fatalf("%+v %v", res, err)
	}
	ws, err := dash.FleetDollars(d).DollarWindows(context.Background())
	if err != nil || len(ws) != 2 || ws[0].Window != "day" || ws[0].UsedMicros != 1_500_000 || ws[0].CapMicros != 5_000_000 || ws[1].Window != "month" {
		t.Fatalf("%+v %v", ws, err)
	}
}
