// Package reach logs a dependency's reachability once per transition: one
// event when it becomes unreachable, one when it is back, nothing in between,
// so a long outage is one line, not one per call.
package reach

import (
	"context"
	"log/slog"
	"sync"
)

// Events names what a Tracker logs. The caller owns the names and keys, so
// each dependency keeps the events its operators already search for.
type Events struct {
	// Down is logged, at DownLevel, on the first failure after a success (or
	// at the start).
	Down string
	// DownLevel is the level of Down. The zero value is slog.LevelInfo.
	DownLevel slog.Level
	// ErrKey is the attribute of Down carrying the error's text. Defaults to
	// "err".
	ErrKey string
	// Up is logged, at Info, on the first success after a failure.
	Up string
}

// Transition is what one observation changed.
type Transition int

// Transitions, as Fail, OK and Observe report them.
const (
	Steady   Transition = iota // no change: nothing was logged
	WentDown                   // Down was logged
	CameBack                   // Up was logged
)

// Tracker remembers whether a dependency is down. It is safe for concurrent
// use. Create it with New.
type Tracker struct {
	log *slog.Logger
	ev  Events

	mu   sync.Mutex
	down bool
}

// New returns a Tracker that starts reachable and logs to log (nil discards).
func New(log *slog.Logger, ev Events) *Tracker {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if ev.ErrKey == "" {
		ev.ErrKey = "err"
	}
	return &Tracker{log: log, ev: ev}
}

// Observe records the outcome of one call: Fail(err) when err is not nil,
// else OK().
func (t *Tracker) Observe(err error) Transition {
	if err != nil {
		return t.Fail(err)
	}
	return t.OK()
}

// Fail records a failed call. It logs Down, with err's text (empty for a
// nil err: a call may fail without an error value), when the dependency was
// reachable.
func (t *Tracker) Fail(err error) Transition {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.down {
		return Steady
	}
	t.down = true
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	t.log.Log(context.Background(), t.ev.DownLevel, t.ev.Down, t.ev.ErrKey, msg)
	return WentDown
}

// OK records a successful call. It logs Up when the dependency was down.
func (t *Tracker) OK() Transition {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.down {
		return Steady
	}
	t.down = false
	t.log.Info(t.ev.Up)
	return CameBack
}

// Down reports whether the last observation was a failure.
func (t *Tracker) Down() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.down
}
