package dash

import (
	"context"
	"time"

	"github.com/pidispatch/pidispatch/jobs"
	"github.com/pidispatch/pidispatch/operator"
	"github.com/pidispatch/pidispatch/registry"
)

// Source is what the dashboard reads, one section per method. Each section
// fails on its own: the page shows the others and names the error.
type Source interface {
	// Hosts is every live registry row.
	Hosts(ctx context.Context) ([]registry.Host, error)
	// Queues is the fleet's pause state and each queue's counts (PerQueue).
	Queues(ctx context.Context) (operator.StatusReport, error)
	// Held is up to limit jobs held on their wait-for conditions.
	Held(ctx context.Context, limit int) ([]Held, error)
	// Running is up to limit jobs a worker holds, on every queue.
	Running(ctx context.Context, limit int) ([]Running, error)
	// Runs is up to limit run records, newest first, each valid
	// (jobs.Record.Validate), and a note for the page when they are not
	// the whole story: the mirror truncated or unread, runs only this host
	// holds ("" or fleetstate.MirrorOK when there is nothing to say).
	Runs(ctx context.Context, limit int) (runs []jobs.Record, note string, err error)
	// Starts is the container-start windows against their caps.
	Starts(ctx context.Context) (Starts, error)
}

// Actions are the dashboard's three changes, offered only when Options
// names them. Each returns the line shown to the operator.
type Actions interface {
	// Pause is the kill switch: every queue of the fleet and the pause flag.
	Pause(ctx context.Context) (string, error)
	// Resume undoes Pause.
	Resume(ctx context.Context) (string, error)
	// Cancel stops a running job through its worker, or removes a queued one.
	Cancel(ctx context.Context, jobID string) (string, error)
}

// DollarWindows reads the fleet's dollar spend windows. It is its own
// interface so that any dollar budget can feed the page; Options.Dollars
// nil shows the section as not configured.
type DollarWindows interface {
	DollarWindows(ctx context.Context) ([]DollarWindow, error)
}

// DollarWindow is one dollar window: what it holds (settled spend and live
// reservations) against its cap.
type DollarWindow struct {
	// Window names it (dispatch.WindowDay ... dispatch.WindowMonth).
	Window     string
	UsedMicros int64
	// CapMicros is 0 when the window has no cap.
	CapMicros int64
}

// Held is one job held on its wait-for conditions.
type Held struct {
	JobID string
	// Since is when the hold began; zero when its state does not say.
	Since time.Time
	// Checks is how many check rounds ran.
	Checks int
}

// Running is one job a worker holds.
type Running struct {
	JobID string
	Queue string
	// Host is the worker that took it, as it named itself; "" when unknown.
	Host string
	// Since is when it was taken; zero when unknown.
	Since time.Time
	// Kind and Target describe the job when its data parses.
	Kind   string
	Target string
}

// Starts are the fleet's container-start windows (the spend caps of
// PI_DAILY_CAP and PI_WEEKLY_CAP).
type Starts struct {
	Day  int `json:"day"`
	Week int `json:"week"`
	// DailyCap and WeeklyCap are the caps the page compares them with;
	// WeeklyCap 0 is no weekly cap.
	DailyCap  int `json:"dailyCap"`
	WeeklyCap int `json:"weeklyCap"`
}
