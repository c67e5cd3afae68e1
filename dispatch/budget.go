package dispatch

import (
	"errors"

	"github.com/pidispatch/pidispatch/jobs"
)

// The windows of a reservation, narrowest first: the order in which they are
// checked and the order in which a refusal names them.
const (
	WindowScopeDay  = "scope-day"
	WindowScopeWeek = "scope-week"
	WindowDay       = "day"
	WindowWeek      = "week"
)

// ErrBudgetUnavailable is a budget that could not be read or written: Valkey
// unreachable, too slow, or a counter holding something that is not a count. It
// wraps the cause. The budget fails closed for money: a job whose reservation
// returns it must not start; the worker defers it rather than spend blind.
var ErrBudgetUnavailable = errors.New("budget unavailable")

// ErrBudgetCorrupt is a budget counter or dollar window that holds what no
// fleet wrote: a negative count (which would lift the cap), text, a number
// too large to be a count, a key of another type. Errors that wrap it wrap
// ErrBudgetUnavailable too. Money fails closed: the worker refuses the job
// (budget-corrupt) and logs budget_corrupt until an operator repairs the key.
var ErrBudgetCorrupt = errors.New("budget counter corrupt")

// Reservation is a Budgeter's answer to Reserve.
type Reservation struct {
	// Granted is true when the start was counted in every active window.
	Granted bool
	// Window is the window that refused (WindowScopeDay, WindowScopeWeek,
	// WindowScopeMonth, WindowDay, WindowWeek, WindowMonth; the narrowest when
	// several are full). On a grant it is WindowDay, and Count and Cap say
	// where today stands.
	Window string
	// Soft is true on a refusal by the soft hold (PI_SOFT_HOLD_PCT): the
	// window is below its cap but this start would take it past the hold's
	// share of it. A soft refusal counts nothing either.
	Soft bool
	// Count is the window's count: including this start when granted, of the
	// starts already counted when refused (a refusal counts nothing).
	Count int
	// Cap is the window's cap.
	Cap int
	// Ticket is the budget's own handle of a grant, which its Release
	// reads; nil on a refusal.
	Ticket any
}

// Reason is the record reason of a refusal: ReasonSoftHold for a soft hold,
// ReasonScopeCap for a scope window, ReasonOverBudget for a global one, ""
// for a grant.
func (r Reservation) Reason() jobs.Reason {
	switch {
	case r.Granted:
		return ""
	case r.Soft:
		return jobs.ReasonSoftHold
	case r.Window == WindowScopeDay || r.Window == WindowScopeWeek || r.Window == WindowScopeMonth:
		return jobs.ReasonScopeCap
	default:
		return jobs.ReasonOverBudget
	}
}
