package dispatch

import (
	"context"
	"encoding/json"
	"time"

	"github.com/pidispatch/pidispatch/dispatch/internal/exitline"
	"github.com/pidispatch/pidispatch/dispatch/internal/runclass"
	"github.com/pidispatch/pidispatch/jobs"
)

// action is what a verdict does with the job. Every step of a job's walk (a
// gate, the workspace, the run, the publish) answers in this one vocabulary,
// and Worker.answer is the one place an answer reaches the queue.
type action int

const (
	actGoOn      action = iota // on to the next step
	actDefer                   // back to delayed for delay: not an attempt
	actDrop                    // the lock was lost before anything ran: the stalled check fails and records the job
	actLockLost                // the lock was lost while the job ran: recorded as seen, nothing reported (the stalled check failed it)
	actRefuse                  // recorded policy, returned as the job's result, never retried
	actComplete                // recorded completed
	actFail                    // recorded failed, retried within attempts
	actFailFinal               // recorded failed, failed for good: no retry can cure it
	actRequeue                 // recorded failed, retried without using an attempt: the worker cut the run short
)

// verdict is a step's answer about a job.
type verdict struct {
	act    action
	reason jobs.Reason   // the record's reason; actDefer: the deferral's
	delay  time.Duration // actDefer
	// exit and telemetry are what the run's container said (its exit code
	// and its cleaned exit line); nil before a run, and for a refusal.
	exit      *int
	telemetry json.RawMessage
	// release undoes what a gate took, once the job's handling ends; nil
	// when it took nothing. started says whether the container started.
	release func(started bool)
}

var goOn = verdict{act: actGoOn}

func refuseFor(reason jobs.Reason) verdict { return verdict{act: actRefuse, reason: reason} }

func deferFor(d time.Duration, why jobs.Reason) verdict {
	return verdict{act: actDefer, reason: why, delay: d}
}

func failFor(reason jobs.Reason) verdict { return verdict{act: actFail, reason: reason} }

func failFinalFor(reason jobs.Reason) verdict { return verdict{act: actFailFinal, reason: reason} }

// outcome is the record's outcome of a verdict that ends the job.
func (v verdict) outcome() string {
	switch v.act {
	case actRefuse:
		return jobs.OutcomePolicy
	case actComplete:
		return jobs.OutcomeCompleted
	}
	return jobs.OutcomeFailed
}

// classify turns a finished run into its verdict (package runclass decides),
// with the container's exit code and the exit line cleaned of everything but
// its documented fields: the line is the job's, which may print its secrets.
func (w *Worker) classify(h *held, end runclass.End) verdict {
	c := runclass.Of(end)
	switch c.Event {
	case runclass.EventNeverStarted:
		h.log.Warn(c.Event, "exitCode", end.Result.ExitCode, "err", errString(end.Err))
	case runclass.EventRunFailed:
		h.log.Error(c.Event, "err", end.Err)
	}
	telemetry, refused := exitline.Check(end.Telemetry(), h.secrets, false)
	for _, r := range refused {
		h.log.Warn("job_exit_field_refused", "field", r.Field, "why", r.Why)
	}
	v := verdict{reason: c.Reason, exit: end.ExitCode(), telemetry: telemetry}
	switch c.Report {
	case runclass.ReportNothing:
		v.act = actLockLost
	case runclass.ReportRefusal:
		v = refuseFor(c.Reason) // refused before it ran: no exit code, no exit line
	case runclass.ReportPolicy:
		v.act = actRefuse
	case runclass.ReportCompleted:
		v.act = actComplete
	case runclass.ReportFailed:
		v.act = actFail
	case runclass.ReportRequeued:
		v.act = actRequeue
	}
	return v
}

// answer carries out a verdict that ends the job's handling here: the one
// place a decision about a held job (a gate's, the workspace's, the run's)
// is recorded and reaches the job's queue.
func (w *Worker) answer(ctx context.Context, h *held, v verdict) {
	switch v.act {
	case actGoOn, actDrop:
		// Nothing to say: a job that went on was answered by its run; a
		// dropped one is the stalled check's.
	case actDefer:
		w.deferJob(ctx, h, v.delay, v.reason)
	case actLockLost:
		// The container was stopped; record what we saw, report nothing.
		w.record(ctx, h, jobs.OutcomeFailed, v.reason, v.exit, v.telemetry)
		w.observeJob(h, Event{Kind: EventLockLost})
	case actRefuse:
		w.finishPolicy(ctx, h, v.reason, v.exit, v.telemetry)
	case actComplete:
		w.complete(ctx, h, v.exit, v.telemetry)
	case actFail:
		w.fail(ctx, h, v.reason, v.exit, v.telemetry, FailOptions{})
	case actFailFinal:
		w.fail(ctx, h, v.reason, v.exit, v.telemetry, FailOptions{NoRetry: true})
	case actRequeue:
		w.fail(ctx, h, v.reason, v.exit, v.telemetry, FailOptions{FreeAttempt: true})
	}
}

// observeGateStop emits the event of a gate that stopped the job (a
// deferral's own event is emitted when the job is deferred).
func (w *Worker) observeGateStop(h *held, v verdict) {
	switch v.act {
	case actRefuse:
		w.observeJob(h, Event{Kind: EventGate, Gate: h.gate, Decision: DecisionRefuse, Reason: v.reason})
	case actFailFinal:
		w.observeJob(h, Event{Kind: EventGate, Gate: h.gate, Decision: DecisionFail, Reason: v.reason})
	}
}
