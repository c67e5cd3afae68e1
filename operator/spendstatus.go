package operator

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pidispatch/pidispatch/config"
	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/fleetstate"
	"github.com/pidispatch/pidispatch/jobs"
)

// SpendReport is where the fleet's spend stands against the caps of cfg:
// the container-start windows, the dollar windows and the providers
// suspended by a rate limit. Each is read from the keys the worker decides
// on, through the stores it uses.
type SpendReport struct {
	Starts    []StartWindow         `json:"starts"`
	Dollars   []DollarWindowStatus  `json:"dollars,omitempty"`
	Suspended []dispatch.Suspension `json:"suspended,omitempty"`
	// Unread names a part that could not be read (only then).
	Unread []string `json:"unread,omitempty"`
}

// StartWindow is one container-start window.
type StartWindow struct {
	Window   string    `json:"window"`
	Count    int       `json:"count"`
	Cap      int       `json:"cap"`
	ResetsAt time.Time `json:"resetsAt"`
}

// DollarWindowStatus is one dollar window, in dollars.
type DollarWindowStatus struct {
	Window   string    `json:"window"`
	Spent    float64   `json:"spentUsd"`
	Reserved float64   `json:"reservedUsd"`
	Cap      float64   `json:"capUsd"`
	ResetsAt time.Time `json:"resetsAt"`
}

// Spend reads the fleet's spend windows with cfg's caps and the rate-limit
// suspensions. A part Valkey could not answer is named in Unread; the error
// is only for a context that ended.
func Spend(ctx context.Context, client redis.UniversalClient, cfg config.Config) (SpendReport, error) {
	var rep SpendReport
	budget := fleetstate.NewBudget(client, fleetstate.BudgetConfig{DailyCap: cfg.DailyCap, WeeklyCap: cfg.WeeklyCap, MonthlyCap: cfg.Spend.MonthlyCap})
	if ws, err := budget.Windows(ctx); err != nil {
		rep.Unread = append(rep.Unread, "container starts: "+err.Error())
	} else {
		for _, w := range ws {
			rep.Starts = append(rep.Starts, StartWindow{w.Name, w.Count, w.Cap, w.ResetsAt})
		}
	}
	if cfg.Spend.DollarWindows() {
		d := fleetstate.NewDollars(client, fleetstate.DollarsConfig{
			DailyMicros: cfg.Spend.DailyCostMicros, WeeklyMicros: cfg.Spend.WeeklyCostMicros, MonthlyMicros: cfg.Spend.MonthlyCostMicros,
		})
		if ws, err := d.Windows(ctx); err != nil {
			rep.Unread = append(rep.Unread, "dollar windows: "+err.Error())
		} else {
			for _, w := range ws {
				rep.Dollars = append(rep.Dollars, DollarWindowStatus{w.Name, jobs.USD(w.SpentMicros), jobs.USD(w.ReservedMicros), jobs.USD(w.CapMicros), w.ResetsAt})
			}
		}
	}
	if s, err := fleetstate.NewRateLimits(client, fleetstate.RateLimitsConfig{}).List(ctx); err != nil {
		rep.Unread = append(rep.Unread, "rate limits: "+err.Error())
	} else {
		rep.Suspended = s
	}
	return rep, ctx.Err()
}
