package dispatch

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/pidispatch/pidispatch/jobs"
)

// The dollar and count windows added to those of budget.go, narrowest first
// within each kind.
const (
	WindowScopeMonth = "scope-month"
	WindowMonth      = "month"
)

// DollarBudget holds a job's per-job dollar cap against the fleet-wide
// dollar windows (PI_DAILY_COST_USD, PI_WEEKLY_COST_USD, PI_MONTHLY_COST_USD
// and the scope's dollar rows) while it runs, and settles it to the job's
// real spend when it ends. *fleetstate.Dollars implements it on Valkey.
type DollarBudget interface {
	// ReserveDollars holds micros in every active window of the global caps
	// and of limit (nil: no scope row), atomically and on Valkey's clock, for
	// at most ttl: a reservation never settled (its worker died) lapses then.
	// A refusal names the window and reserves nothing. An error means the
	// windows could not be read (ErrBudgetUnavailable): the job must not start.
	ReserveDollars(ctx context.Context, jobID, scope string, limit *ScopeLimit, micros int64, ttl time.Duration) (DollarReservation, error)
	// SettleDollars replaces the reservation with spentMicros, in the windows
	// of the reservation's own time, at most once per reservation.
	SettleDollars(ctx context.Context, r DollarReservation, spentMicros int64) error
}

// DollarReservation is a DollarBudget's answer.
type DollarReservation struct {
	// Granted is true when micros was held in every active window.
	Granted bool
	// Window is the window that refused (WindowScopeDay ... WindowMonth), or
	// on a grant the narrowest active window.
	Window string
	// UsedMicros is that window's settled spend plus live reservations
	// (including this one on a grant); CapMicros is its cap.
	UsedMicros, CapMicros int64
	// Ticket is the budget's own handle, read by SettleDollars; nil on a refusal.
	Ticket any
}

// RateLimits is the fleet-wide record of providers that answered "rate
// limited" (429) or "overloaded" (529) with a reset time. The gateway writes
// it; the worker's rate-limit gate defers a job of a suspended provider
// until the reset, without charging an attempt. *fleetstate.RateLimits
// implements it on Valkey.
type RateLimits interface {
	// Suspend records that provider is limited until until (a later reset
	// wins; an earlier one never shortens a suspension).
	Suspend(ctx context.Context, provider string, until time.Time, why string) error
	// SuspendedUntil is the provider's reset time; the zero time when it is
	// not suspended.
	SuspendedUntil(ctx context.Context, provider string) (time.Time, error)
	// List is every suspended provider with its reset time and reason.
	List(ctx context.Context) ([]Suspension, error)
}

// Suspension is one provider's rate-limit suspension.
type Suspension struct {
	Provider string    `json:"provider"`
	Until    time.Time `json:"until"`
	Why      string    `json:"why"`
}

// ErrRateLimitsUnavailable is a RateLimits that could not be read.
var ErrRateLimitsUnavailable = errors.New("rate limits unavailable")

// ModelGateway meters and caps each job's model calls outside the agent:
// the Worker serves one GatewaySession per job on the job's model socket,
// and the session forwards the calls to the provider with the key the host
// holds. *gateway.Gateway implements it.
type ModelGateway interface {
	// Job opens the job's session. It keeps ctx's values but not its
	// cancellation: a session meters a call to its end though the job was
	// cancelled, and ends at its Close.
	Job(ctx context.Context, j GatewayJob) GatewaySession
}

// GatewayJob is what a session needs to know of its job.
type GatewayJob struct {
	JobID   string
	Attempt int
	// Keys are the provider keys of this job, by provider name: the
	// worker's own, overridden by what the job's secrets profile printed.
	Keys map[string]string
	// MaxMicros and MaxTokens are the job's caps (0: none). The session
	// refuses, with a provider-shaped error, the call that would cross one.
	MaxMicros, MaxTokens int64
}

// GatewaySession serves one job's model calls (an http.Handler on the
// job's socket) and keeps its spend.
type GatewaySession interface {
	http.Handler
	// Spend is what the job spent so far; safe to call at any time.
	Spend() jobs.Spend
	// Close ends calls in flight (a call waiting for a rate limit among
	// them); Spend stays readable.
	Close()
}
