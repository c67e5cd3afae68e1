package hold

import "time"

// State is a held job's state as one hold script saw it.
type State struct {
	// Now is the server's time at the call.
	Now time.Time
	// Since is when the hold began (server clock).
	Since time.Time
	// AfterAt is when the job's `after` conditions are met (Begin only; zero
	// when the job has none).
	AfterAt    time.Time
	Checks     int
	Faults     int
	Throttles  int
	Met        uint8 // bit i: waitFor[i] passed
	Released   bool
	Superseded bool
	// Fresh is set by the Begin that started the hold.
	Fresh bool
	// Previous is, on a fresh Begin, the job whose wait of the same dedup id
	// this hold took over ("" when none).
	Previous string
	// Lost is set when the hold state was gone (Throttled, Checked, Release).
	Lost bool
}

// Bounds are the job's `after` conditions and this host's limits, which the
// Begin script needs to expire the state at the hold's deadline.
type Bounds struct {
	AfterDelay time.Duration // the longest `after` delay, counted from Since; 0 none
	AfterAt    time.Time     // the latest `after` instant; zero none
	AfterMax   time.Duration // PI_WAIT_AFTER_MAX_MS
	WaitMax    time.Duration // PI_WAIT_MAX_MS
}

// Outcome is what one check round established.
type Outcome struct {
	Met    uint8 // every condition passed so far, earlier rounds included
	Fault  bool  // the round ended in a fault
	AllMet bool  // every condition is met: release the job
}
