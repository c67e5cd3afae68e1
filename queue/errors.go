package queue

import (
	"errors"
	"fmt"
	"strings"
)

// Conditions callers branch on.
var (
	// ErrNotFound: no job with that id.
	ErrNotFound = errors.New("queue: job not found")
	// ErrLockLost: the caller no longer holds the job (its lock expired or
	// another consumer took it over). The caller must stop reporting on it.
	ErrLockLost = errors.New("queue: job lock lost")
	// ErrNotActive: the job exists but is not active.
	ErrNotActive = errors.New("queue: job is not active")
	// ErrJobLocked: a consumer holds the job, so it cannot be removed.
	ErrJobLocked = errors.New("queue: job is held by a consumer")
	// ErrSchedulerJob: the job is its scheduler's pending run; remove the
	// scheduler instead.
	ErrSchedulerJob = errors.New("queue: job is a scheduler's pending run")
	// ErrSchedulerCollision: the scheduler's next run id is taken by an
	// existing job.
	ErrSchedulerCollision = errors.New("queue: scheduler run id already exists")
	// ErrScheduleEnded: a scheduler's EndDate leaves it no run.
	ErrScheduleEnded = errors.New("queue: schedule has ended")
	// ErrInvalidOption wraps every *OptionError.
	ErrInvalidOption = errors.New("queue: invalid option")
	// ErrInvalidQueueName: a name that is neither fleet.SharedQueue nor a valid
	// host queue name.
	ErrInvalidQueueName = errors.New("queue: invalid queue name")
	// ErrDiscoveryIncomplete wraps every *DiscoveryError.
	ErrDiscoveryIncomplete = errors.New("queue: queue discovery incomplete")
	// ErrTxRefused: the server refused a MULTI/EXEC transaction as a whole
	// (MULTI or EXEC answered an error: an unauthenticated connection, a
	// command refused while queued, EXECABORT), so none of it ran.
	ErrTxRefused = errors.New("queue: transaction refused, nothing ran")
)

// OptionError reports a bad argument; nothing was written.
type OptionError struct {
	Field  string // the argument or option, e.g. "Delay", "Backoff.Type"
	Reason string
}

func (e *OptionError) Error() string {
	return fmt.Sprintf("queue: invalid option %s: %s", e.Field, e.Reason)
}

// Unwrap makes errors.Is(err, ErrInvalidOption) true.
func (e *OptionError) Unwrap() error { return ErrInvalidOption }

func optErr(field, format string, args ...any) error {
	return &OptionError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// DiscoveryError reports a SCAN that could not finish. Found holds the
// valid names seen before it stopped: a partial list, never to be mistaken
// for the whole.
type DiscoveryError struct {
	Found []string
	Err   error
}

func (e *DiscoveryError) Error() string {
	return fmt.Sprintf("queue: queue discovery incomplete after %d name(s) [%s]: %v",
		len(e.Found), strings.Join(e.Found, ","), e.Err)
}

// Unwrap makes errors.Is match ErrDiscoveryIncomplete and the cause.
func (e *DiscoveryError) Unwrap() []error { return []error{ErrDiscoveryIncomplete, e.Err} }

// scriptError maps a script's negative status to the package's errors.
func scriptError(code int64, op, id string) error {
	switch code {
	case -1:
		return fmt.Errorf("%s %q: %w", op, id, ErrNotFound)
	case -2:
		return fmt.Errorf("%s %q: lock missing: %w", op, id, ErrLockLost)
	case -6:
		return fmt.Errorf("%s %q: held by another token: %w", op, id, ErrLockLost)
	case -3:
		return fmt.Errorf("%s %q: %w", op, id, ErrNotActive)
	case -4:
		return fmt.Errorf("%s %q: %w", op, id, ErrJobLocked)
	case -8:
		return fmt.Errorf("%s %q: %w", op, id, ErrSchedulerJob)
	case -10:
		return fmt.Errorf("%s %q: %w", op, id, ErrSchedulerCollision)
	}
	return fmt.Errorf("%s %q: unexpected script status %d", op, id, code)
}
