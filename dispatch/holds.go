package dispatch

import "github.com/pidispatch/pidispatch/dispatch/internal/hold"

// The Holds store's terms are package hold's.
type (
	// HoldState is a held job's state as one hold script saw it.
	HoldState = hold.State
	// HoldBounds are the job's `after` conditions and this host's limits.
	HoldBounds = hold.Bounds
	// CheckOutcome is what one check round established.
	CheckOutcome = hold.Outcome
)
