package dispatch

import (
	"time"

	"errors"

	"github.com/pidispatch/pidispatch/container"
	"github.com/pidispatch/pidispatch/jobs"
)

// runEnd is what a finished run left: the runtime's answer and what the
// worker saw around it.
type runEnd struct {
	result container.Result
	err    error // the runtime's error
	// startedAt is the Worker's clock when it asked the runtime to start the
	// container: the record's start (the runtime's own times are telemetry).
	startedAt time.Time
	// lockLost: the job's lock expired while it ran, so the stalled check
	// failed the job (never re-run) and the container was stopped.
	lockLost bool
	// operatorCancel: an operator asked for the stop (pi-dispatch cancel).
	operatorCancel bool
	// capHit is the cap the gateway stopped the job's model calls at
	// (jobs.ReasonCostCap, jobs.ReasonTokenCap), or "".
	capHit jobs.Reason
}

// report is how the queue hears of a classified run.
type report int

const (
	reportNothing   report = iota // recorded only: the stalled check answered already
	reportRefusal                 // completed with a policy result, recorded without exit code or telemetry
	reportPolicy                  // completed with a policy result: never retried
	reportCompleted               // completed
	reportFailed                  // failed: retried within attempts
	reportRequeued                // failed and retried without using an attempt: the worker cut it short
)

// Log events of a run's classification, written before its report.
const (
	eventNeverStarted = "job_never_started"
	eventRunFailed    = "job_run_failed"
)

// runClass is a finished run's classification.
type runClass struct {
	outcome string // jobs.Outcome*
	reason  jobs.Reason
	report  report
	event   string // the log event written before the report, or ""
}

// classifyRun decides what a finished run was, first match wins: a lost
// lock (the stalled check already failed the job), an image gone since its
// gate, a container that never started, an operator's cancel, a cap the
// gateway stopped the job at, a timeout, a
// shutdown whose grace ran out (an infrastructure failure, retried), a
// runtime error, then the exit code of the container contract
// (docs/container-contract.md): 0 completed, 2 policy, 1 and any other
// failed.
func classifyRun(e runEnd) runClass {
	r := e.result
	failed := func(reason jobs.Reason) runClass {
		return runClass{outcome: jobs.OutcomeFailed, reason: reason, report: reportFailed}
	}
	policy := func(reason jobs.Reason) runClass {
		return runClass{outcome: jobs.OutcomePolicy, reason: reason, report: reportPolicy}
	}
	switch {
	case e.lockLost:
		return runClass{outcome: jobs.OutcomeFailed, reason: jobs.ReasonStalled, report: reportNothing}
	case errors.Is(e.err, container.ErrImageMissing):
		return runClass{outcome: jobs.OutcomePolicy, reason: jobs.ReasonJobImageMissing, report: reportRefusal}
	case r.NeverStarted:
		c := failed(jobs.ReasonNeverStarted)
		c.event = eventNeverStarted
		return c
	case e.operatorCancel:
		return policy(jobs.ReasonOperatorCancel)
	case e.capHit != "":
		// Whatever the agent made of the refusal (an exit 1 among them),
		// the job reached its cap: a retry would only reach it again.
		return policy(e.capHit)
	case r.TimedOut:
		return policy(jobs.ReasonTimeout)
	case r.Cancelled:
		// The worker's stop cut the run short: nothing the job did, so it
		// runs again without losing an attempt.
		return runClass{outcome: jobs.OutcomeFailed, reason: jobs.ReasonWorkerShutdown, report: reportRequeued}
	case e.err != nil:
		c := failed(jobs.ReasonExitOther)
		c.event = eventRunFailed
		return c
	case r.ExitCode == exitCompleted:
		return runClass{outcome: jobs.OutcomeCompleted, reason: jobs.ReasonCompleted, report: reportCompleted}
	case r.ExitCode == exitPolicy:
		return policy(jobs.ReasonPolicy)
	case r.ExitCode == exitInfra:
		return failed(jobs.ReasonExit1)
	default:
		return failed(jobs.ReasonExitOther)
	}
}
