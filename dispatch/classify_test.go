package dispatch

import (
	"errors"
	"fmt"
	"testing"

	"github.com/pidispatch/pidispatch/container"
	"github.com/pidispatch/pidispatch/jobs"
)

// TestClassifyRun pins how a finished run is classified, first match wins,
// from pure inputs: no Valkey, no Docker.
func TestClassifyRun(t *testing.T) {
	errDocker := errors.New("docker: connection reset")
	imageGone := fmt.Errorf("start: %w", container.ErrImageMissing)
	exit := func(code int) container.Result { return container.Result{ExitCode: code, Container: "c"} }
	with := func(r container.Result, f func(*container.Result)) container.Result { f(&r); return r }
	timedOut := func(r *container.Result) { r.TimedOut = true }
	shutdown := func(r *container.Result) { r.Cancelled = true }
	never := func(r *container.Result) { r.NeverStarted = true }
	for _, tc := range []struct {
		name string
		end  runEnd
		want runClass
	}{
		{"exit 0", runEnd{result: exit(0)},
			runClass{jobs.OutcomeCompleted, jobs.ReasonCompleted, reportCompleted, ""}},
		{"exit 1", runEnd{result: exit(1)},
			runClass{jobs.OutcomeFailed, jobs.ReasonExit1, reportFailed, ""}},
		{"exit 2", runEnd{result: exit(2)},
			runClass{jobs.OutcomePolicy, jobs.ReasonPolicy, reportPolicy, ""}},
		{"exit 3", runEnd{result: exit(3)},
			runClass{jobs.OutcomeFailed, jobs.ReasonExitOther, reportFailed, ""}},
		{"exit 137", runEnd{result: exit(137)},
			runClass{jobs.OutcomeFailed, jobs.ReasonExitOther, reportFailed, ""}},
		{"runtime error over exit 0", runEnd{result: exit(0), err: errDocker},
			runClass{jobs.OutcomeFailed, jobs.ReasonExitOther, reportFailed, eventRunFailed}},
		{"timeout", runEnd{result: with(exit(137), timedOut)},
			runClass{jobs.OutcomePolicy, jobs.ReasonTimeout, reportPolicy, ""}},
		{"timeout over runtime error", runEnd{result: with(exit(0), timedOut), err: errDocker},
			runClass{jobs.OutcomePolicy, jobs.ReasonTimeout, reportPolicy, ""}},
		{"shutdown", runEnd{result: with(exit(137), shutdown)},
			runClass{jobs.OutcomeFailed, jobs.ReasonWorkerShutdown, reportRequeued, ""}},
		{"shutdown over runtime error", runEnd{result: with(exit(0), shutdown), err: errDocker},
			runClass{jobs.OutcomeFailed, jobs.ReasonWorkerShutdown, reportRequeued, ""}},
		{"timeout over shutdown", runEnd{result: with(with(exit(137), shutdown), timedOut)},
			runClass{jobs.OutcomePolicy, jobs.ReasonTimeout, reportPolicy, ""}},
		{"operator cancel", runEnd{result: exit(137), operatorCancel: true},
			runClass{jobs.OutcomePolicy, jobs.ReasonOperatorCancel, reportPolicy, ""}},
		{"operator cancel over timeout and exit 0", runEnd{result: with(exit(0), timedOut), operatorCancel: true},
			runClass{jobs.OutcomePolicy, jobs.ReasonOperatorCancel, reportPolicy, ""}},
		{"cost cap over exit 1", runEnd{result: exit(1), capHit: jobs.ReasonCostCap},
			runClass{jobs.OutcomePolicy, jobs.ReasonCostCap, reportPolicy, ""}},
		{"token cap over timeout", runEnd{result: with(exit(137), timedOut), capHit: jobs.ReasonTokenCap},
			runClass{jobs.OutcomePolicy, jobs.ReasonTokenCap, reportPolicy, ""}},
		{"operator cancel over cost cap", runEnd{result: exit(137), operatorCancel: true, capHit: jobs.ReasonCostCap},
			runClass{jobs.OutcomePolicy, jobs.ReasonOperatorCancel, reportPolicy, ""}},
		{"never started", runEnd{result: container.Result{NeverStarted: true}, err: errDocker},
			runClass{jobs.OutcomeFailed, jobs.ReasonNeverStarted, reportFailed, eventNeverStarted}},
		{"never started over operator cancel", runEnd{result: with(exit(0), never), operatorCancel: true},
			runClass{jobs.OutcomeFailed, jobs.ReasonNeverStarted, reportFailed, eventNeverStarted}},
		{"image missing", runEnd{result: container.Result{NeverStarted: true}, err: imageGone},
			runClass{jobs.OutcomePolicy, jobs.ReasonJobImageMissing, reportRefusal, ""}},
		{"lock lost", runEnd{result: exit(137), lockLost: true},
			runClass{jobs.OutcomeFailed, jobs.ReasonStalled, reportNothing, ""}},
		{"lock lost over exit 0 and cancel", runEnd{result: exit(0), lockLost: true, operatorCancel: true},
			runClass{jobs.OutcomeFailed, jobs.ReasonStalled, reportNothing, ""}},
		{"lock lost over image missing", runEnd{result: container.Result{NeverStarted: true}, err: imageGone, lockLost: true},
			runClass{jobs.OutcomeFailed, jobs.ReasonStalled, reportNothing, ""}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := classifyRun(tc.end); got != tc.want {
				t.Errorf("classifyRun(%+v) = %+v, want %+v", tc.end, got, tc.want)
			}
		})
	}
}
