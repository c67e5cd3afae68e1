package dispatchtest

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/pidispatch/pidispatch/container"
	"github.com/pidispatch/pidispatch/dispatch"
)

// Runtime is an in-memory dispatch.Runtime. A run's result is, in order of
// precedence: RunFunc's, the scripted Results entry of the job id, or exit 0.
// It records every Spec it was given and every container it was asked to
// remove. Like the Docker runtime it reports exits 125 to 127 NeverStarted,
// keeps containers (RemoveContainer) and reaps only running ones at boot
// (ReapRunning), reporting Report.
type Runtime struct {
	mu sync.Mutex
	// RunFunc, when set, runs every job: it may block until ctx ends, as a
	// container stopped by the worker does.
	RunFunc func(ctx context.Context, spec container.Spec) (container.Result, error)
	// Results are the scripted outcomes by job id.
	Results map[string]RunResult
	// Missing names the images ImagePresent reports absent.
	Missing map[string]bool
	// ImageErr, when set, is ImagePresent's error (Docker unreachable).
	ImageErr error
	// Digest is ImageDigest's answer.
	Digest string
	// Report is what Reap and ReapRunning return; the zero value reports
	// nothing enumerated.
	Report container.ReapReport
	// ReapErr is Reap's and ReapRunning's error.
	ReapErr error

	specs   []container.Spec
	removed []string
	reaps   int
}

// RunResult is a scripted run.
type RunResult struct {
	Result container.Result
	Err    error
}

var (
	_ dispatch.Runtime = (*Runtime)(nil)
	_ interface {
		ReapRunning(ctx context.Context, worker string) (container.ReapReport, error)
		RemoveContainer(ctx context.Context, name string) error
	} = (*Runtime)(nil)
)

// NewRuntime returns a Runtime whose runs exit 0 and whose reap enumerates
// nothing left over.
func NewRuntime() *Runtime {
	return &Runtime{Results: map[string]RunResult{}, Missing: map[string]bool{}, Report: container.ReapReport{Enumerated: true}}
}

// Script sets job id's run to end with r and err.
func (r *Runtime) Script(id string, res container.Result, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.Results[id] = RunResult{Result: res, Err: err}
}

// Run records spec and returns the job's scripted outcome.
func (r *Runtime) Run(ctx context.Context, spec container.Spec) (container.Result, error) {
	r.mu.Lock()
	r.specs = append(r.specs, cloneSpec(spec))
	run, scripted := r.Results[spec.JobID]
	fn := r.RunFunc
	r.mu.Unlock()
	if fn != nil {
		return fn(ctx, spec)
	}
	res := run.Result
	if !scripted {
		res = container.Result{ExitCode: 0}
	}
	if res.ExitCode >= 125 && res.ExitCode <= 127 {
		res.NeverStarted = true // as the Docker runtime reports them
	}
	if res.Container == "" && !res.NeverStarted {
		res.Container = "pi-job-" + spec.JobID
	}
	if res.StartedAt.IsZero() && !res.NeverStarted {
		res.StartedAt = time.Now()
		res.EndedAt = res.StartedAt
	}
	return res, run.Err
}

func cloneSpec(s container.Spec) container.Spec {
	s.Env = cloneMap(s.Env)
	s.Labels = cloneMap(s.Labels)
	return s
}

func cloneMap(m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// BlockUntilStopped is a RunFunc that runs until ctx ends and then reports
// the container stopped by the worker (Cancelled, exit 137, ctx's error),
// as the Docker runtime does.
func BlockUntilStopped(ctx context.Context, spec container.Spec) (container.Result, error) {
	start := time.Now()
	<-ctx.Done()
	return container.Result{Container: "pi-job-" + spec.JobID, ExitCode: 137, Cancelled: true, StartedAt: start, EndedAt: time.Now()}, ctx.Err()
}

// Specs returns the Specs Run was given, in order.
func (r *Runtime) Specs() []container.Spec {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.specs)
}

// Removed returns the containers RemoveContainer was asked to remove.
func (r *Runtime) Removed() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.removed)
}

// Reaps counts Reap and ReapRunning calls.
func (r *Runtime) Reaps() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.reaps
}

// Reap returns Report.
func (r *Runtime) Reap(ctx context.Context, worker string) (container.ReapReport, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reaps++
	return r.Report, r.ReapErr
}

// ReapRunning returns Report: exited containers are reported, not removed.
func (r *Runtime) ReapRunning(ctx context.Context, worker string) (container.ReapReport, error) {
	return r.Reap(ctx, worker)
}

// RemoveContainer records the removal of name.
func (r *Runtime) RemoveContainer(ctx context.Context, name string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.removed = append(r.removed, name)
	return nil
}

// ImagePresent reports image present unless Missing names it.
func (r *Runtime) ImagePresent(ctx context.Context, image string) (bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ImageErr != nil {
		return false, fmt.Errorf("image %s: %w", image, r.ImageErr)
	}
	return !r.Missing[image], nil
}

// ImageDigest returns Digest.
func (r *Runtime) ImageDigest(ctx context.Context, image string) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.Digest, nil
}
