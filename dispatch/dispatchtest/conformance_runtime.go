package dispatchtest

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/dispatch/container"
)

// KeepingRuntime is a Runtime with the optional parts the Worker uses: the
// removal of a kept container and the boot reap that keeps exited ones.
type KeepingRuntime interface {
	dispatch.Runtime
	RemoveContainer(ctx context.Context, name string) error
	ReapRunning(ctx context.Context, worker string) (container.ReapReport, error)
}

// RuntimeHarness is one Runtime under test. Spec gives the Spec of a job of
// Worker on a present image that sleeps for sleep and then exits exit;
// MissingImage names an image the host does not have; Containers lists the
// names of Worker's containers in any state.
type RuntimeHarness struct {
	Runtime      KeepingRuntime
	Worker       string
	MissingImage string
	Spec         func(jobID string, exit int, sleep time.Duration) container.Spec
	Containers   func() []string
}

// FakeRuntimeHarness is a fake Runtime scripted by the job's environment
// (RunByEnv), as the test job image is.
func FakeRuntimeHarness(t *testing.T) RuntimeHarness {
	r := NewRuntime()
	r.RunFunc = RunByEnv
	r.Missing["pi-job-missing:none"] = true
	const worker = "conformance-worker"
	return RuntimeHarness{
		Runtime: r, Worker: worker, MissingImage: "pi-job-missing:none",
		Spec: func(jobID string, exit int, sleep time.Duration) container.Spec {
			return container.Spec{JobID: jobID, Worker: worker, Image: "pi-job:test", Env: map[string]string{
				"JOB_EXIT_CODE": strconv.Itoa(exit), "JOB_SLEEP": sleep.String(),
			}}
		},
		Containers: func() []string { return r.Kept(worker) },
	}
}

// TestRuntime runs the Runtime contract the Worker relies on.
func TestRuntime(t *testing.T, newRuntime func(t *testing.T) RuntimeHarness) {
	for _, c := range []struct {
		name string
		run  func(*testing.T, RuntimeHarness)
	}{
		{"RunReportsTheExitCode", runtimeExitCodes},
		{"MissingImageCreatesNothing", runtimeMissingImage},
		{"Exit125To127NeverStarted", runtimeNeverStarted},
		{"CancelStopsTheRun", runtimeCancel},
		{"TimeoutStopsTheRun", runtimeTimeout},
		{"KeptContainerStaysUntilRemoved", runtimeKeep},
		{"ReapRemovesWhatTheWorkerLeft", runtimeReap},
	} {
		t.Run(c.name, func(t *testing.T) { c.run(t, newRuntime(t)) })
	}
}

func rctx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func runtimeExitCodes(t *testing.T, h RuntimeHarness) {
	for _, exit := range []int{0, 3} {
		res, err := h.Runtime.Run(rctx(t), h.Spec("exit-"+strconv.Itoa(exit), exit, 0))
		if err != nil || res.ExitCode != exit || res.NeverStarted || res.TimedOut || res.Cancelled {
			t.Fatalf("Run of a job exiting %d = %+v, %v", exit, res, err)
		}
		if res.StartedAt.IsZero() || res.EndedAt.Before(res.StartedAt) {
			t.Fatalf("exit %d: StartedAt %v, EndedAt %v; want both set, in order", exit, res.StartedAt, res.EndedAt)
		}
	}
	if got := h.Containers(); len(got) != 0 {
		t.Fatalf("containers left after runs not kept: %v", got)
	}
}

func runtimeMissingImage(t *testing.T, h RuntimeHarness) {
	spec := h.Spec("missing", 0, 0)
	spec.Image = h.MissingImage
	spec.KeepContainer = true
	res, err := h.Runtime.Run(rctx(t), spec)
	if !errors.Is(err, container.ErrImageMissing) || !res.NeverStarted {
		t.Fatalf("Run of a missing image = %+v, %v; want ErrImageMissing, NeverStarted", res, err)
	}
	if present, err := h.Runtime.ImagePresent(rctx(t), h.MissingImage); err != nil || present {
		t.Fatalf("ImagePresent of the missing image = %v, %v", present, err)
	}
	if got := h.Containers(); len(got) != 0 {
		t.Fatalf("a missing image created containers: %v", got)
	}
}

func runtimeNeverStarted(t *testing.T, h RuntimeHarness) {
	for _, exit := range []int{125, 126, 127} {
		res, err := h.Runtime.Run(rctx(t), h.Spec("ns-"+strconv.Itoa(exit), exit, 0))
		if err != nil || res.ExitCode != exit || !res.NeverStarted {
			t.Fatalf("Run of a job exiting %d = %+v, %v; want NeverStarted", exit, res, err)
		}
	}
}

func runtimeCancel(t *testing.T, h RuntimeHarness) {
	ctx, cancel := context.WithCancel(rctx(t))
	time.AfterFunc(time.Second, cancel)
	start := time.Now()
	res, err := h.Runtime.Run(ctx, h.Spec("cancel", 0, time.Minute))
	if err == nil || !res.Cancelled || res.TimedOut || res.NeverStarted {
		t.Fatalf("Run cancelled = %+v, %v; want Cancelled and ctx's error", res, err)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Fatalf("a cancelled run took %v", d)
	}
}

func runtimeTimeout(t *testing.T, h RuntimeHarness) {
	spec := h.Spec("timeout", 0, time.Minute)
	spec.Timeout = time.Second
	start := time.Now()
	res, err := h.Runtime.Run(rctx(t), spec)
	if err != nil || !res.TimedOut || res.Cancelled || res.NeverStarted {
		t.Fatalf("Run past its timeout = %+v, %v; want TimedOut", res, err)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Fatalf("a timed-out run took %v", d)
	}
}

// runKept runs a kept job exiting exit and checks its container stays.
func runKept(t *testing.T, h RuntimeHarness, jobID string, exit int) (container.Spec, container.Result) {
	t.Helper()
	spec := h.Spec(jobID, exit, 0)
	spec.KeepContainer = true
	res, err := h.Runtime.Run(rctx(t), spec)
	if err != nil || res.ExitCode != exit || res.Container == "" {
		t.Fatalf("kept Run = %+v, %v", res, err)
	}
	if got := h.Containers(); !slices.Equal(got, []string{res.Container}) {
		t.Fatalf("containers after a kept run = %v, want [%s]", got, res.Container)
	}
	return spec, res
}

func wantExited(t *testing.T, rep container.ReapReport, jobID string, exit int) {
	t.Helper()
	for _, e := range rep.Exited {
		if e.JobID == jobID && e.ExitCode == exit {
			return
		}
	}
	t.Fatalf("reap report %+v: want job %s exited %d", rep, jobID, exit)
}

func runtimeKeep(t *testing.T, h RuntimeHarness) {
	spec, res := runKept(t, h, "keep", 4)
	rep, err := h.Runtime.ReapRunning(rctx(t), h.Worker)
	if err != nil || !rep.Enumerated {
		t.Fatalf("ReapRunning = %+v, %v", rep, err)
	}
	wantExited(t, rep, spec.JobID, 4)
	if got := h.Containers(); !slices.Equal(got, []string{res.Container}) {
		t.Fatalf("containers after ReapRunning = %v, want the exited one kept", got)
	}
	if err := h.Runtime.RemoveContainer(rctx(t), res.Container); err != nil {
		t.Fatalf("RemoveContainer: %v", err)
	}
	if got := h.Containers(); len(got) != 0 {
		t.Fatalf("containers after RemoveContainer = %v", got)
	}
}

func runtimeReap(t *testing.T, h RuntimeHarness) {
	spec, _ := runKept(t, h, "reap", 5)
	rep, err := h.Runtime.Reap(rctx(t), h.Worker)
	if err != nil || !rep.Clean() || rep.Found != 1 {
		t.Fatalf("Reap = %+v, %v; want one found and removed", rep, err)
	}
	wantExited(t, rep, spec.JobID, 5)
	if got := h.Containers(); len(got) != 0 {
		t.Fatalf("containers after Reap = %v", got)
	}
}
