package runclass

import (
	"errors"
	"fmt"
	"testing"

	"github.com/pidispatch/pidispatch/dispatch/container"
	"github.com/pidispatch/pidispatch/jobs"
)

// TestOf pins how a finished run is classified, first match wins,
// from pure inputs: no Valkey, no Docker.
func TestOf(t *testing.T) {
	errDocker := errors.New("docker: connection reset")
	imageGone := fmt.Errorf("start: %w", container.ErrImageMissing)
	exit := func(code int) container.Result { return container.Result{ExitCode: code, Container: "c"} }
	with := func(r container.Result, f func(*container.Result)) container.Result { f(&r); return r }
	timedOut := func(r *container.Result) { r.TimedOut = true }
	shutdown := func(r *container.Result) { r.Cancelled = true }
	never := func(r *container.Result) { r.NeverStarted = true }
	for _, tc := range []struct {
		name string
		end  End
		want Class
	}{
		{"exit 0", End{Result: exit(0)},
			Class{jobs.OutcomeCompleted, jobs.ReasonCompleted, ReportCompleted, ""}},
		{"exit 1", End{Result: exit(1)},
			Class{jobs.OutcomeFailed, jobs.ReasonExit1, ReportFailed, ""}},
		{"exit 2", End{Result: exit(2)},
			Class{jobs.OutcomePolicy, jobs.ReasonPolicy, ReportPolicy, ""}},
		{"exit 3", End{Result: exit(3)},
			Class{jobs.OutcomeFailed, jobs.ReasonExitOther, ReportFailed, ""}},
		{"exit 137", End{Result: exit(137)},
			Class{jobs.OutcomeFailed, jobs.ReasonExitOther, ReportFailed, ""}},
		{"runtime error over exit 0", End{Result: exit(0), Err: errDocker},
			Class{jobs.OutcomeFailed, jobs.ReasonExitOther, ReportFailed, EventRunFailed}},
		{"timeout", End{Result: with(exit(137), timedOut)},
			Class{jobs.OutcomePolicy, jobs.ReasonTimeout, ReportPolicy, ""}},
		{"timeout over runtime error", End{Result: with(exit(0), timedOut), Err: errDocker},
			Class{jobs.OutcomePolicy, jobs.ReasonTimeout, ReportPolicy, ""}},
		{"shutdown", End{Result: with(exit(137), shutdown)},
			Class{jobs.OutcomeFailed, jobs.ReasonWorkerShutdown, ReportRequeued, ""}},
		{"shutdown over runtime error", End{Result: with(exit(0), shutdown), Err: errDocker},
			Class{jobs.OutcomeFailed, jobs.ReasonWorkerShutdown, ReportRequeued, ""}},
		{"timeout over shutdown", End{Result: with(with(exit(137), shutdown), timedOut)},
			Class{jobs.OutcomePolicy, jobs.ReasonTimeout, ReportPolicy, ""}},
		{"operator cancel", End{Result: exit(137), OperatorCancel: true},
			Class{jobs.OutcomePolicy, jobs.ReasonOperatorCancel, ReportPolicy, ""}},
		{"operator cancel over timeout and exit 0", End{Result: with(exit(0), timedOut), OperatorCancel: true},
			Class{jobs.OutcomePolicy, jobs.ReasonOperatorCancel, ReportPolicy, ""}},
		{"cost cap over exit 1", End{Result: exit(1), CapHit: jobs.ReasonCostCap},
			Class{jobs.OutcomePolicy, jobs.ReasonCostCap, ReportPolicy, ""}},
		{"token cap over timeout", End{Result: with(exit(137), timedOut), CapHit: jobs.ReasonTokenCap},
			Class{jobs.OutcomePolicy, jobs.ReasonTokenCap, ReportPolicy, ""}},
		{"operator cancel over cost cap", End{Result: exit(137), OperatorCancel: true, CapHit: jobs.ReasonCostCap},
			Class{jobs.OutcomePolicy, jobs.ReasonOperatorCancel, ReportPolicy, ""}},
		{"never started", End{Result: container.Result{NeverStarted: true}, Err: errDocker},
			Class{jobs.OutcomeFailed, jobs.ReasonNeverStarted, ReportFailed, EventNeverStarted}},
		{"never started over operator cancel", End{Result: with(exit(0), never), OperatorCancel: true},
			Class{jobs.OutcomeFailed, jobs.ReasonNeverStarted, ReportFailed, EventNeverStarted}},
		{"image missing", End{Result: container.Result{NeverStarted: true}, Err: imageGone},
			Class{jobs.OutcomePolicy, jobs.ReasonJobImageMissing, ReportRefusal, ""}},
		{"lock lost", End{Result: exit(137), LockLost: true},
			Class{jobs.OutcomeFailed, jobs.ReasonStalled, ReportNothing, ""}},
		{"lock lost over exit 0 and cancel", End{Result: exit(0), LockLost: true, OperatorCancel: true},
			Class{jobs.OutcomeFailed, jobs.ReasonStalled, ReportNothing, ""}},
		{"lock lost over image missing", End{Result: container.Result{NeverStarted: true}, Err: imageGone, LockLost: true},
			Class{jobs.OutcomeFailed, jobs.ReasonStalled, ReportNothing, ""}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Of(tc.end); got != tc.want {
				t.Errorf("Of(%+v) = %+v, want %+v", tc.end, got, tc.want)
			}
		})
	}
}

// A container found exited after its worker died maps as a run maps it,
// and the engine's own 125 to 127 mean it never started.
func TestExited(t *testing.T) {
	for code, want := range map[int]jobs.Reason{
		0: jobs.ReasonCompleted, 1: jobs.ReasonExit1, 2: jobs.ReasonPolicy, 3: jobs.ReasonExitOther,
		124: jobs.ReasonExitOther, 125: jobs.ReasonNeverStarted, 127: jobs.ReasonNeverStarted, 137: jobs.ReasonExitOther,
	} {
		outcome, reason := Exited(code)
		if reason != want {
			t.Errorf("Exited(%d) reason = %s, want %s", code, reason, want)
		}
		wantOutcome := jobs.OutcomeFailed
		switch code {
		case 0:
			wantOutcome = jobs.OutcomeCompleted
		case 2:
			wantOutcome = jobs.OutcomePolicy
		}
		if outcome != wantOutcome {
			t.Errorf("Exited(%d) outcome = %s, want %s", code, outcome, wantOutcome)
		}
	}
}

// A container that never started has no exit code on its record; one that
// ran has its own, 0 included, and its exit line as printed.
func TestEndExitCodeAndTelemetry(t *testing.T) {
	if got := (End{Result: container.Result{NeverStarted: true}}).ExitCode(); got != nil {
		t.Errorf("never started: exit code %d, want none", *got)
	}
	if got := (End{Result: container.Result{ExitCode: 0}}).ExitCode(); got == nil || *got != 0 {
		t.Errorf("exit 0: got %v", got)
	}
	if got := (End{Result: container.Result{NeverStarted: true, ExitCode: 125}}).ExitCode(); got == nil || *got != 125 {
		t.Errorf("engine exit 125: got %v", got)
	}
	if got := (End{}).Telemetry(); got != nil {
		t.Errorf("no exit line: telemetry %s", got)
	}
	raw := []byte(`{"event":"exit","turns":1}`)
	if got := (End{Result: container.Result{Telemetry: &container.Telemetry{Raw: raw}}}).Telemetry(); string(got) != string(raw) {
		t.Errorf("telemetry %s, want %s", got, raw)
	}
}
