package dispatchtest

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/dispatch/container"
)

// Runtime is an in-memory dispatch.Runtime. A run's result is, in order of
// precedence: RunFunc's, the scripted Results entry of the job id, or exit 0.
// It records every Spec it was given and every container it was asked to
// remove. Like the Docker runtime it refuses a Missing image with
// container.ErrImageMissing, reports exits 125 to 127 NeverStarted, keeps
// the exited container of a KeepContainer run until RemoveContainer or Reap
// (ReapRunning reports it and leaves it), and adds what it kept to Report.
type Runtime struct {
	mu sync.Mutex
	// RunFunc, when set, runs every job: it may block until ctx ends, as a
	// container stopped by the worker does.
	RunFunc func(ctx context.Context, spec container.Spec) (container.Result, error)
	// Results are the scripted outcomes by job id.
	Results map[string]RunResult
	// Missing names the images ImagePresent reports absent and Run refuses.
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
	// kept are the exited containers of KeepContainer runs not yet
	// removed, which Reap reports and removes as the Docker runtime does.
	kept map[string]keptContainer
}

type keptContainer struct {
	worker string
	job    container.ExitedJob
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

// Run records spec and returns the job's scripted outcome. As the Docker
// runtime does, it refuses an image Missing names with
// container.ErrImageMissing before anything is created, and keeps the
// exited container of a KeepContainer run that started until
// RemoveContainer or Reap.
func (r *Runtime) Run(ctx context.Context, spec container.Spec) (container.Result, error) {
	r.mu.Lock()
	r.specs = append(r.specs, cloneSpec(spec))
	run, scripted := r.Results[spec.JobID]
	fn := r.RunFunc
	missing := r.Missing[spec.Image]
	r.mu.Unlock()
	if missing {
		return container.Result{ExitCode: -1, NeverStarted: true}, fmt.Errorf("%w: %s", container.ErrImageMissing, spec.Image)
	}
	res, err := run.Result, run.Err
	switch {
	case fn != nil:
		res, err = fn(ctx, spec)
	case !scripted:
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
	if spec.KeepContainer && !res.NeverStarted {
		r.keep(spec, res)
	}
	return res, err
}

func (r *Runtime) keep(spec container.Spec, res container.Result) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.kept == nil {
		r.kept = map[string]keptContainer{}
	}
	r.kept[res.Container] = keptContainer{worker: spec.Worker, job: container.ExitedJob{
		JobID: spec.JobID, Container: res.Container, ExitCode: res.ExitCode, OOMKilled: res.OOMKilled,
	}}
}

// RunByEnv is a RunFunc driven by the job's environment like the test job
// image (internal/image/jobimage): it sleeps JOB_SLEEP (a Go duration) and exits
// JOB_EXIT_CODE (default 0). A Spec.Timeout that passes first ends it
// TimedOut; a ctx that ends first ends it Cancelled with ctx's error.
func RunByEnv(ctx context.Context, spec container.Spec) (container.Result, error) {
	res := container.Result{Container: "pi-job-" + spec.JobID, StartedAt: time.Now()}
	sleep, _ := time.ParseDuration(spec.Env["JOB_SLEEP"])
	code, _ := strconv.Atoi(spec.Env["JOB_EXIT_CODE"])
	var timeout <-chan time.Time
	if spec.Timeout > 0 {
		t := time.NewTimer(spec.Timeout)
		defer t.Stop()
		timeout = t.C
	}
	done := time.NewTimer(sleep)
	defer done.Stop()
	var err error
	select {
	case <-done.C:
		res.ExitCode = code
	case <-timeout:
		res.ExitCode, res.TimedOut = 143, true
	case <-ctx.Done():
		res.ExitCode, res.Cancelled, err = 143, true, ctx.Err()
	}
	res.EndedAt = time.Now()
	return res, err
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

// Reap returns Report, with the kept containers of worker reported
// exited and removed.
func (r *Runtime) Reap(ctx context.Context, worker string) (container.ReapReport, error) {
	return r.reap(worker, false)
}

// ReapRunning returns Report: exited containers are reported, not removed.
func (r *Runtime) ReapRunning(ctx context.Context, worker string) (container.ReapReport, error) {
	return r.reap(worker, true)
}

func (r *Runtime) reap(worker string, keepExited bool) (container.ReapReport, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reaps++
	rep := r.Report
	rep.Exited = slices.Clone(rep.Exited)
	for _, name := range slices.Sorted(maps.Keys(r.kept)) {
		k := r.kept[name]
		if k.worker != worker {
			continue
		}
		rep.Exited = append(rep.Exited, k.job)
		if !keepExited {
			delete(r.kept, name)
			rep.Found++
			rep.Removed++
		}
	}
	return rep, r.ReapErr
}

// RemoveContainer records the removal of name.
func (r *Runtime) RemoveContainer(ctx context.Context, name string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.removed = append(r.removed, name)
	delete(r.kept, name)
	return nil
}

// Kept returns the names of the exited containers of worker that Run kept
// and nothing removed yet.
func (r *Runtime) Kept(worker string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var names []string
	for name, k := range r.kept {
		if k.worker == worker {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names
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
