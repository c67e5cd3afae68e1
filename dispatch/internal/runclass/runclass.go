// Package runclass decides what a finished job run was: from the container
// runtime's answer and what the Worker saw around it, the run's outcome, its
// record reason and how its queue hears of it. It is pure.
package runclass

import (
	"encoding/json"
	"errors"
	"time"

	"github.com/pidispatch/pidispatch/dispatch/container"
	"github.com/pidispatch/pidispatch/jobs"
)

// Exit codes of the container contract (docs/container-contract.md).
const (
	ExitCompleted = 0
	ExitInfra     = 1
	ExitPolicy    = 2
)

// End is what a finished run left: the runtime's answer and what the
// worker saw around it.
type End struct {
	Result container.Result
	Err    error // the runtime's error
	// StartedAt is the Worker's clock when it asked the runtime to start the
	// container: the record's start (the runtime's own times are telemetry).
	StartedAt time.Time
	// LockLost: the job's lock expired while it ran, so the stalled check
	// failed the job (never re-run) and the container was stopped.
	LockLost bool
	// OperatorCancel: an operator asked for the stop (pi-dispatch cancel).
	OperatorCancel bool
	// CapHit is the cap the gateway stopped the job's model calls at
	// (jobs.ReasonCostCap, jobs.ReasonTokenCap), or "".
	CapHit jobs.Reason
}

// ExitCode is the container's exit code for the record, nil when it never
// started.
func (e End) ExitCode() *int {
	r := e.Result
	if r.NeverStarted && r.ExitCode == 0 {
		return nil
	}
	c := r.ExitCode
	return &c
}

// Telemetry is the exit line the container printed, as it printed it (the
// job's, untrusted: package exitline cleans it), or nil.
func (e End) Telemetry() json.RawMessage {
	r := e.Result
	if r.Telemetry == nil || len(r.Telemetry.Raw) == 0 {
		return nil
	}
	return r.Telemetry.Raw
}

// Report is how the queue hears of a classified run.
type Report int

// The reports.
const (
	ReportNothing   Report = iota // recorded only: the stalled check answered already
	ReportRefusal                 // completed with a policy result, recorded without exit code or telemetry
	ReportPolicy                  // completed with a policy result: never retried
	ReportCompleted               // completed
	ReportFailed                  // failed: retried within attempts
	ReportRequeued                // failed and retried without using an attempt: the worker cut it short
)

// Log events of a run's classification, written before its report.
const (
	EventNeverStarted = "job_never_started"
	EventRunFailed    = "job_run_failed"
)

// Class is a finished run's classification.
type Class struct {
	Outcome string // jobs.Outcome*
	Reason  jobs.Reason
	Report  Report
	Event   string // the log event written before the report, or ""
}

// Of decides what a finished run was, first match wins: a lost
// lock (the stalled check already failed the job), an image gone since its
// gate, a container that never started, an operator's cancel, a cap the
// gateway stopped the job at, a timeout, a
// shutdown whose grace ran out (an infrastructure failure, retried), a
// runtime error, then the exit code of the container contract
// (docs/container-contract.md): 0 completed, 2 policy, 1 and any other
// failed.
func Of(e End) Class {
	r := e.Result
	failed := func(reason jobs.Reason) Class {
		return Class{Outcome: jobs.OutcomeFailed, Reason: reason, Report: ReportFailed}
	}
	policy := func(reason jobs.Reason) Class {
		return Class{Outcome: jobs.OutcomePolicy, Reason: reason, Report: ReportPolicy}
	}
	switch {
	case e.LockLost:
		return Class{Outcome: jobs.OutcomeFailed, Reason: jobs.ReasonStalled, Report: ReportNothing}
	case errors.Is(e.Err, container.ErrImageMissing):
		return Class{Outcome: jobs.OutcomePolicy, Reason: jobs.ReasonJobImageMissing, Report: ReportRefusal}
	case r.NeverStarted:
		c := failed(jobs.ReasonNeverStarted)
		c.Event = EventNeverStarted
		return c
	case e.OperatorCancel:
		return policy(jobs.ReasonOperatorCancel)
	case e.CapHit != "":
		// Whatever the agent made of the refusal (an exit 1 among them),
		// the job reached its cap: a retry would only reach it again.
		return policy(e.CapHit)
	case r.TimedOut:
		return policy(jobs.ReasonTimeout)
	case r.Cancelled:
		// The worker's stop cut the run short: nothing the job did, so it
		// runs again without losing an attempt.
		return Class{Outcome: jobs.OutcomeFailed, Reason: jobs.ReasonWorkerShutdown, Report: ReportRequeued}
	case e.Err != nil:
		c := failed(jobs.ReasonExitOther)
		c.Event = EventRunFailed
		return c
	case r.ExitCode == ExitCompleted:
		return Class{Outcome: jobs.OutcomeCompleted, Reason: jobs.ReasonCompleted, Report: ReportCompleted}
	case r.ExitCode == ExitPolicy:
		return policy(jobs.ReasonPolicy)
	case r.ExitCode == ExitInfra:
		return failed(jobs.ReasonExit1)
	default:
		return failed(jobs.ReasonExitOther)
	}
}

// Exited is the outcome of a container found exited with code after its
// worker died (the boot reap's find): mapped as a run maps it, and 125 to
// 127 (the engine could not start the command) never started.
func Exited(code int) (outcome string, reason jobs.Reason) {
	switch {
	case code == ExitCompleted:
		return jobs.OutcomeCompleted, jobs.ReasonCompleted
	case code == ExitPolicy:
		return jobs.OutcomePolicy, jobs.ReasonPolicy
	case code == ExitInfra:
		return jobs.OutcomeFailed, jobs.ReasonExit1
	case code >= 125 && code <= 127:
		return jobs.OutcomeFailed, jobs.ReasonNeverStarted
	}
	return jobs.OutcomeFailed, jobs.ReasonExitOther
}
