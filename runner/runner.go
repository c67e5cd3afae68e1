package runner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/pidispatch/pidispatch/dispatch/container"
)

// Runtime runs job containers and cleans up after a worker. The worker
// declares its own consumer interface; this one is the compile-time check
// that Docker provides the whole contract.
type Runtime interface {
	Run(ctx context.Context, spec Spec) (Result, error)
	Reap(ctx context.Context, worker string) (ReapReport, error)
	ImageDigest(ctx context.Context, image string) (string, error)
	ImagePresent(ctx context.Context, image string) (bool, error)
}

var _ Runtime = (*Docker)(nil)

// The runner speaks the container package's types: a worker written against
// them needs no Docker code.
type (
	Spec       = container.Spec
	Result     = container.Result
	Telemetry  = container.Telemetry
	ReapReport = container.ReapReport
	ExitedJob  = container.ExitedJob
)

// The refusals of Run, defined in package container.
var (
	ErrImageMissing = container.ErrImageMissing
	ErrInvalidSpec  = container.ErrInvalidSpec
	ErrNameConflict = container.ErrNameConflict
)

// Isolation applied to every container; a Spec cannot change it.
const (
	// PidsLimit bounds the processes of a job (fork bombs, runaway tools).
	PidsLimit = 512
	// ShmSize is the size of /dev/shm (browsers and test runners need more
	// than the engine's 64 MiB default).
	ShmSize = 1 << 30
	// NofileLimit is the soft and hard limit of a job's open files: a job
	// that leaks descriptors fails alone instead of starving the host.
	NofileLimit = 8192
	// EngineLogMax bounds the engine's own log of a job: two files of
	// half this size (the runner keeps its own copy of the output, and the
	// reaper reads only the last 8 KiB of stdout from this one).
	EngineLogMax = 64 << 20
	// TmpfsPath is the one writable folder of a job's read-only root file
	// system besides its mounts; its size is the job's memory limit, which
	// its pages count against.
	TmpfsPath = "/tmp"
)

// Config defaults.
const (
	MemoryDefault    int64 = 4 << 30
	CPUsDefault            = 2.0
	TimeoutDefault         = 30 * time.Minute
	StopGraceDefault       = 5 * time.Second
	TailBytesDefault       = 16 << 10
	OutputMaxDefault int64 = 16 << 20
	// OutputMaxMin keeps the exit line's scan window (and some context
	// before it) inside the capped output file.
	OutputMaxMin int64 = 64 << 10
)

// Bounds of the cleanup after a job, which runs even when the caller's
// context is cancelled.
const (
	// exitWait bounds the wait for the exit status after a stop and a kill.
	exitWait = 10 * time.Second
	// drainWait bounds the wait for the rest of the output after the exit.
	drainWait = 5 * time.Second
	// cleanupTimeout bounds each engine call of the cleanup.
	cleanupTimeout = 30 * time.Second
	// minMemory is the engine's smallest memory limit.
	minMemory = 6 << 20
)

// Config tunes a Docker runtime. The zero value is usable.
type Config struct {
	// Memory is the memory limit of a job whose Spec leaves Memory zero, in
	// bytes. Defaults to MemoryDefault (4 GiB).
	Memory int64
	// CPUs is the CPU limit of a job whose Spec leaves CPUs zero. Defaults to
	// CPUsDefault (2).
	CPUs float64
	// Timeout bounds a job whose Spec leaves Timeout zero. Defaults to
	// TimeoutDefault (30 minutes).
	Timeout time.Duration
	// StopGrace is how long a stopped job gets between the stop signal and
	// the kill, rounded up to whole seconds (the engine's unit). Defaults to
	// StopGraceDefault (5 s).
	StopGrace time.Duration
	// TailBytes is how much of a job's combined output Result.Tail keeps.
	// Defaults to TailBytesDefault (16 KiB).
	TailBytes int
	// OutputMax bounds a job's output file (Spec.OutputFile): once it would
	// grow past this many bytes, the oldest output is dropped and the tail
	// kept, so the exit line, printed last, is always in it. Defaults to
	// OutputMaxDefault (16 MiB); at least OutputMaxMin.
	OutputMax int64
	// Logger receives the runner's events, each with a host attribute (the
	// worker name). Defaults to discarding them.
	Logger *slog.Logger
}

// withDefaults returns a validated copy with the defaults applied.
func (c Config) withDefaults() (Config, error) {
	switch {
	case c.Memory < 0:
		return c, fmt.Errorf("runner config: Memory %d is negative", c.Memory)
	case c.Memory != 0 && c.Memory < minMemory:
		return c, fmt.Errorf("runner config: Memory %d is below the engine's minimum of 6 MiB", c.Memory)
	case c.CPUs < 0 || math.IsNaN(c.CPUs) || math.IsInf(c.CPUs, 0):
		return c, fmt.Errorf("runner config: CPUs %v is not a positive number", c.CPUs)
	case c.Timeout < 0:
		return c, fmt.Errorf("runner config: Timeout %v is negative", c.Timeout)
	case c.StopGrace < 0:
		return c, fmt.Errorf("runner config: StopGrace %v is negative", c.StopGrace)
	case c.TailBytes < 0:
		return c, fmt.Errorf("runner config: TailBytes %d is negative", c.TailBytes)
	case c.OutputMax < 0 || c.OutputMax != 0 && c.OutputMax < OutputMaxMin:
		return c, fmt.Errorf("runner config: OutputMax %d must be 0 (the default) or at least %d", c.OutputMax, OutputMaxMin)
	}
	c.Memory = cmpOr(c.Memory, MemoryDefault)
	c.CPUs = cmpOr(c.CPUs, CPUsDefault)
	c.Timeout = cmpOr(c.Timeout, TimeoutDefault)
	c.StopGrace = cmpOr(c.StopGrace, StopGraceDefault)
	c.TailBytes = cmpOr(c.TailBytes, TailBytesDefault)
	c.OutputMax = cmpOr(c.OutputMax, OutputMaxDefault)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c, nil
}

func cmpOr[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// Docker runs jobs on a container engine that speaks the Docker Engine API.
// It holds no state between calls and is safe for concurrent use.
type Docker struct {
	eng engine
	cfg Config
	log *slog.Logger
	// exitWait and drainWait are the package constants; tests shorten them.
	exitWait, drainWait time.Duration
}

func newDocker(eng engine, cfg Config) (*Docker, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	return &Docker{eng: eng, cfg: cfg, log: cfg.Logger, exitWait: exitWait, drainWait: drainWait}, nil
}

// ImagePresent reports whether image is on this host.
func (d *Docker) ImagePresent(ctx context.Context, image string) (bool, error) {
	if err := checkImageRef(image); err != nil {
		return false, err
	}
	_, err := d.eng.imageID(ctx, image)
	if errors.Is(err, errNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("inspect image %q: %w", image, err)
	}
	return true, nil
}

// ImageDigest returns the image ID (sha256:...) of a local image: the digest
// of its configuration, which every image has, including local builds that no
// registry ever saw (a repo digest exists only for pushed or pulled images).
// ErrImageMissing when it is not on this host.
func (d *Docker) ImageDigest(ctx context.Context, image string) (string, error) {
	if err := checkImageRef(image); err != nil {
		return "", err
	}
	id, err := d.eng.imageID(ctx, image)
	if errors.Is(err, errNotFound) {
		return "", fmt.Errorf("%w: %s", ErrImageMissing, image)
	}
	if err != nil {
		return "", fmt.Errorf("inspect image %q: %w", image, err)
	}
	return id, nil
}

// Run runs one job to its end and removes its container. The image must be
// on this host (ErrImageMissing otherwise, before anything is created). A job
// that outlives its timeout is stopped (the stop signal, Config.StopGrace,
// then a kill) and Run returns with TimedOut set and a nil error; a cancelled
// ctx stops it the same way and Run returns Cancelled with ctx.Err().
func (d *Docker) Run(ctx context.Context, spec Spec) (Result, error) {
	res := Result{ExitCode: -1, NeverStarted: true}
	cs, timeout, err := d.prepare(spec)
	if err != nil {
		return res, err
	}
	res.Container = cs.Name

	imageID, err := d.eng.imageID(ctx, spec.Image)
	if errors.Is(err, errNotFound) {
		return res, fmt.Errorf("%w: %s", ErrImageMissing, spec.Image)
	}
	if err != nil {
		return d.failedBeforeStart(ctx, res, fmt.Errorf("inspect image %q: %w", spec.Image, err))
	}
	cs.Image, res.ImageID = imageID, imageID
	if spec.OutDir != "" {
		if err := makeOutMountPoint(spec.JobDir); err != nil {
			return res, err
		}
	}

	log := d.log.With("host", spec.Worker, "job", spec.JobID, "container", cs.Name)
	var out *outputFile
	if spec.OutputFile != "" {
		if out, err = createOutputFile(spec.OutputFile, d.cfg.OutputMax); err != nil {
			return res, fmt.Errorf("job output file: %w", err)
		}
		defer func() {
			if err := out.Close(); err != nil {
				log.Warn("job_output_file_failed", "path", spec.OutputFile, "err", err)
			}
		}()
	}

	id, err := d.create(ctx, cs, spec, log)
	if err != nil {
		return d.failedBeforeStart(ctx, res, err)
	}
	res, err = d.runCreated(ctx, id, cs.Memory, timeout, out, res, log)
	if !spec.KeepContainer || res.NeverStarted {
		d.remove(ctx, id, log)
	}
	return res, err
}

// RemoveContainer force-removes a job container Run kept (Spec.KeepContainer),
// by the name Result.Container gave; one already gone is not an error.
func (d *Docker) RemoveContainer(ctx context.Context, name string) error {
	if err := checkText("container name", name, 256); err != nil || name == "" {
		return fmt.Errorf("%w: container name", ErrInvalidSpec)
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	if err := d.eng.remove(cctx, name); err != nil && !errors.Is(err, errNotFound) {
		return fmt.Errorf("remove container %s: %w", name, err)
	}
	return nil
}

// failedBeforeStart marks a run that ended before its container started.
func (d *Docker) failedBeforeStart(ctx context.Context, res Result, err error) (Result, error) {
	if ctx.Err() != nil {
		res.Cancelled = true
		return res, ctx.Err()
	}
	return res, err
}

// prepare validates a Spec and turns it into the container to create.
func (d *Docker) prepare(spec Spec) (containerSpec, time.Duration, error) {
	if err := checkIdentity(spec); err != nil {
		return containerSpec{}, 0, err
	}
	env, err := jobEnv(spec.Env)
	if err != nil {
		return containerSpec{}, 0, err
	}
	labels, err := jobLabels(spec)
	if err != nil {
		return containerSpec{}, 0, err
	}
	mounts, err := jobMounts(spec)
	if err != nil {
		return containerSpec{}, 0, err
	}
	if err := checkUserNetwork(spec); err != nil {
		return containerSpec{}, 0, err
	}
	memory, cpus, timeout, err := d.limits(spec)
	if err != nil {
		return containerSpec{}, 0, err
	}
	cs := containerSpec{
		Name:     ContainerName(spec.JobID),
		Env:      env,
		Labels:   labels,
		Mounts:   mounts,
		Network:  spec.Network,
		User:     spec.User,
		Memory:   memory,
		NanoCPUs: int64(math.Round(cpus * 1e9)),
	}
	isolate(&cs)
	return cs, timeout, nil
}

// invalidSpec is an ErrInvalidSpec refusal of a Spec.
func invalidSpec(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalidSpec}, args...)...)
}

// checkIdentity checks the job id, worker and image, which name the job and its container.
func checkIdentity(spec Spec) error {
	if err := checkText("job id", spec.JobID, 1024); err != nil {
		return invalidSpec("%v", err)
	}
	if err := checkText("worker name", spec.Worker, 256); err != nil {
		return invalidSpec("%v", err)
	}
	return checkImageRef(spec.Image)
}

// jobEnv is the job's environment as NAME=value, sorted so the container does not depend on map order.
func jobEnv(vars map[string]string) ([]string, error) {
	env := make([]string, 0, len(vars))
	for _, k := range slices.Sorted(maps.Keys(vars)) {
		v := vars[k]
		// The messages name the variable, never its value.
		if err := checkText("env name", k, 4096); err != nil || strings.Contains(k, "=") {
			return nil, invalidSpec("env name %q is empty, contains '=' or NUL, or is not UTF-8", k)
		}
		if strings.IndexByte(v, 0) >= 0 || !utf8.ValidString(v) {
			return nil, invalidSpec("env %s: value contains NUL or is not UTF-8", k)
		}
		env = append(env, k+"="+v)
	}
	return env, nil
}

// jobLabels adds the job's labels to the runner's own, which it may not override: the reaper trusts them.
func jobLabels(spec Spec) (map[string]string, error) {
	labels := map[string]string{LabelJob: spec.JobID, LabelWorker: spec.Worker}
	for k, v := range spec.Labels {
		if k == LabelJob || k == LabelWorker {
			return nil, invalidSpec("label %s is reserved", k)
		}
		if err := checkText("label name", k, 1024); err != nil {
			return nil, invalidSpec("%v", err)
		}
		if strings.IndexByte(v, 0) >= 0 || !utf8.ValidString(v) {
			return nil, invalidSpec("label %s: value contains NUL or is not UTF-8", k)
		}
		labels[k] = v
	}
	return labels, nil
}

// OutTarget is where Spec.OutDir is mounted: inside the read-only /job.
const OutTarget = "/job/out"

// SessionTarget is where Spec.SessionDir is mounted.
const SessionTarget = "/session"

// jobMounts mounts the folders the job sets at the fixed paths of the
// container contract. /job/out follows /job, which it is mounted inside.
func jobMounts(spec Spec) ([]bindMount, error) {
	var mounts []bindMount
	for _, m := range []bindMount{{spec.JobDir, "/job", true}, {spec.OutDir, OutTarget, false},
		{spec.WorkspaceDir, "/workspace", false}, {spec.SessionDir, SessionTarget, false},
		{spec.ModelSocketDir, "/run/pidispatch", true}} {
		if m.Source == "" {
			continue
		}
		if !filepath.IsAbs(m.Source) || strings.IndexByte(m.Source, 0) >= 0 || !utf8.ValidString(m.Source) {
			return nil, invalidSpec("mount source for %s must be an absolute path", m.Target)
		}
		m.Source = filepath.Clean(m.Source)
		mounts = append(mounts, m)
	}
	if err := checkOutDir(spec); err != nil {
		return nil, err
	}
	return mounts, nil
}

// checkOutDir refuses an output folder that would not stay a folder inside a
// read-only /job: one with no /job to be inside, or one that is the job
// folder or holds it, through which the job could rewrite its own job.json.
func checkOutDir(spec Spec) error {
	if spec.OutDir == "" {
		return nil
	}
	if spec.JobDir == "" {
		return invalidSpec("an output folder (%s) needs the job folder (/job) it is mounted inside", OutTarget)
	}
	if rel, err := filepath.Rel(filepath.Clean(spec.OutDir), filepath.Clean(spec.JobDir)); err == nil &&
		rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return invalidSpec("the output folder (%s) may not be the job folder or hold it: /job would be writable", OutTarget)
	}
	return nil
}

// makeOutMountPoint makes the folder /job/out is mounted on, an empty "out"
// in the job folder, when it is missing: with /job mounted read-only the
// engine cannot make it (runc's mkdir fails with EROFS), and the host's
// folder is the only place it can be made. Something else of that name
// (a file, a symbolic link) is an error.
func makeOutMountPoint(jobDir string) error {
	p := filepath.Join(jobDir, filepath.Base(OutTarget))
	err := os.Mkdir(p, 0o755)
	if err == nil {
		return nil
	}
	if !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("mount point of %s: %w", OutTarget, err)
	}
	if fi, err := os.Lstat(p); err != nil || !fi.IsDir() {
		return fmt.Errorf("mount point of %s: %s exists and is not a folder", OutTarget, p)
	}
	return nil
}

// checkUserNetwork refuses a user an image could resolve to someone else and a shared network namespace.
func checkUserNetwork(spec Spec) error {
	if spec.User != "" && !validUser(spec.User) {
		return invalidSpec("user %q must be UID or UID:GID in numbers (empty keeps the image's user)", spec.User)
	}
	if n := strings.ToLower(spec.Network); n == "host" || strings.Contains(n, ":") {
		return invalidSpec("network %q would share the host's or another container's namespace", spec.Network)
	}
	if err := checkText("network", spec.Network, 256); spec.Network != "" && err != nil {
		return invalidSpec("%v", err)
	}
	return nil
}

// limits are the job's memory, CPU and time limits, the Config's where the Spec leaves them zero.
func (d *Docker) limits(spec Spec) (memory int64, cpus float64, timeout time.Duration, err error) {
	memory = spec.Memory
	switch {
	case memory < 0 || memory > 0 && memory < minMemory:
		return 0, 0, 0, invalidSpec("memory %d must be 0 (the default) or at least 6 MiB", memory)
	case memory == 0:
		memory = d.cfg.Memory
	}
	cpus = spec.CPUs
	switch {
	case cpus < 0 || math.IsNaN(cpus) || math.IsInf(cpus, 0) || cpus > 1<<20:
		return 0, 0, 0, invalidSpec("cpus %v must be 0 (the default) or a positive number", cpus)
	case cpus == 0:
		cpus = d.cfg.CPUs
	}
	timeout = spec.Timeout
	switch {
	case timeout < 0:
		return 0, 0, 0, invalidSpec("timeout %v is negative", timeout)
	case timeout == 0:
		timeout = d.cfg.Timeout
	}
	return memory, cpus, timeout, nil
}

// isolate adds the isolation every container gets, which a Spec cannot change (see the constants).
func isolate(cs *containerSpec) {
	cs.CapDrop = []string{"ALL"}
	cs.NoNewPrivileges = true
	cs.PidsLimit = PidsLimit
	cs.Init = true
	cs.ShmSize = ShmSize
	cs.ReadOnlyRoot = true
	cs.Tmpfs = map[string]string{TmpfsPath: fmt.Sprintf("rw,nosuid,nodev,exec,mode=1777,size=%d", cs.Memory)}
	cs.MemorySwap = cs.Memory // memory plus swap equals memory: no swap
	cs.Nofile = NofileLimit
	cs.PrivateCgroupNS = true
	cs.LogMax = EngineLogMax
}

// validUser accepts "UID" or "UID:GID", each 1 to 10 digits: numbers need
// no passwd file in the image, and a name could resolve to another user in
// another image.
func validUser(u string) bool {
	uid, gid, hasGID := strings.Cut(u, ":")
	digits := func(s string) bool {
		if s == "" || len(s) > 10 {
			return false
		}
		for i := 0; i < len(s); i++ {
			if s[i] < '0' || s[i] > '9' {
				return false
			}
		}
		return true
	}
	return digits(uid) && (!hasGID || digits(gid))
}

// checkText refuses an empty, oversized, NUL-carrying or non-UTF-8 value.
func checkText(what, s string, max int) error {
	switch {
	case s == "":
		return fmt.Errorf("%s is empty", what)
	case len(s) > max:
		return fmt.Errorf("%s is longer than %d bytes", what, max)
	case strings.IndexByte(s, 0) >= 0 || !utf8.ValidString(s):
		return fmt.Errorf("%s contains NUL or is not UTF-8", what)
	}
	return nil
}

func checkImageRef(image string) error {
	if err := checkText("image", image, 1024); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidSpec, err)
	}
	if strings.ContainsFunc(image, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
		return fmt.Errorf("%w: image %q contains whitespace or control characters", ErrInvalidSpec, image)
	}
	return nil
}

// create creates the container. A container already holding the name is
// removed only when it carries this worker's label (a leftover of an earlier
// attempt); otherwise the job is refused with ErrNameConflict.
func (d *Docker) create(ctx context.Context, cs containerSpec, spec Spec, log *slog.Logger) (string, error) {
	id, err := d.eng.create(ctx, cs)
	if errors.Is(err, errNameInUse) {
		holder, ierr := d.eng.inspect(ctx, cs.Name)
		switch {
		case errors.Is(ierr, errNotFound):
			// Gone meanwhile.
		case ierr != nil:
			return "", fmt.Errorf("create container %s: name in use, holder unreadable: %w", cs.Name, ierr)
		case holder.Labels[LabelWorker] != spec.Worker:
			return "", fmt.Errorf("%w: %s", ErrNameConflict, cs.Name)
		default:
			log.Info("job_container_replaced", "stale_id", holder.ID, "stale_job", holder.Labels[LabelJob])
			if rerr := d.eng.remove(ctx, holder.ID); rerr != nil && !errors.Is(rerr, errNotFound) {
				return "", fmt.Errorf("remove stale container %s: %w", cs.Name, rerr)
			}
		}
		id, err = d.eng.create(ctx, cs)
	}
	if errors.Is(err, errNotFound) {
		return "", fmt.Errorf("%w: %s", ErrImageMissing, spec.Image)
	}
	if err != nil {
		return "", fmt.Errorf("create container %s: %w", cs.Name, err)
	}
	return id, nil
}

// remove force-removes the container, whatever happened to ctx.
func (d *Docker) remove(ctx context.Context, id string, log *slog.Logger) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	if err := d.eng.remove(cctx, id); err != nil && !errors.Is(err, errNotFound) {
		log.Warn("job_container_remove_failed", "id", id, "err", err)
	}
}

// runCreated attaches to, starts and waits for a created container, stopping
// it on timeout or cancellation, and collects its output.
func (d *Docker) runCreated(ctx context.Context, id string, memory int64, timeout time.Duration, out *outputFile, res Result, log *slog.Logger) (Result, error) {
	stream, err := d.eng.attach(ctx, id)
	if err != nil {
		return d.failedBeforeStart(ctx, res, fmt.Errorf("attach to container %s: %w", res.Container, err))
	}
	r := &jobRun{d: d, id: id, res: res, log: log, memory: memory}
	r.collectOutput(stream, out)
	defer r.finishOutput(0)
	r.watchExit(ctx)
	defer r.unwatchExit()

	r.res.StartedAt = time.Now()
	if err := d.eng.start(ctx, id); err != nil {
		return r.startFailed(ctx, err)
	}
	r.res.NeverStarted = false
	log.Info("job_container_started", "image", r.res.ImageID, "timeout", timeout.String())
	r.watchUsage(ctx)

	runErr := r.await(ctx, timeout)
	r.res.EndedAt = time.Now()
	r.unwatchUsage()
	r.finishOutput(d.drainFor(r.res.ExitCode))
	r.recordExit(ctx)
	return r.res, runErr
}

// jobRun is the state runCreated's steps share about one attached container.
type jobRun struct {
	d   *Docker
	id  string
	res Result
	log *slog.Logger

	// The output: its stream, the copy's end, and the buffers it fills.
	stream     outputStream
	copied     chan error
	stdoutTail *tailBuffer
	combined   *tailBuffer
	streamDone bool

	// The engine's wait for the exit; exitSeen once it yielded a result.
	exited     <-chan waitResult
	exitSeen   bool
	cancelWait context.CancelFunc

	// The resource readings while it runs: the highest of each, and the
	// end of the reader; memory is the container's limit.
	memory      int64
	usageMu     sync.Mutex
	peakMemory  uint64
	cpuNanos    uint64
	usageDone   chan struct{}
	cancelUsage context.CancelFunc
}

// watchUsage reads the container's resource use while it runs, keeping the
// highest memory and CPU time seen. A reading that fails costs only the
// figures, never the run.
func (r *jobRun) watchUsage(ctx context.Context) {
	uctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	r.usageDone, r.cancelUsage = make(chan struct{}), cancel
	go func() {
		defer close(r.usageDone)
		err := r.d.eng.usage(uctx, r.id, func(s usageSample) {
			r.usageMu.Lock()
			r.peakMemory, r.cpuNanos = max(r.peakMemory, s.MemoryBytes), max(r.cpuNanos, s.CPUNanos)
			r.usageMu.Unlock()
		})
		// Said by what failed, not by whether the reader was stopped since:
		// a read that failed just before the container ended is still said.
		if err != nil && !errors.Is(err, context.Canceled) {
			r.log.Warn("job_container_usage_unread", "err", err)
		}
	}()
}

// unwatchUsage ends the reader, waits for it, and puts what it saw in the result.
func (r *jobRun) unwatchUsage() {
	r.cancelUsage()
	<-r.usageDone
	r.usageMu.Lock()
	defer r.usageMu.Unlock()
	r.res.PeakMemoryBytes = int64(min(r.peakMemory, math.MaxInt64))
	r.res.CPUTime = time.Duration(min(r.cpuNanos, math.MaxInt64))
}

// collectOutput copies the output into the tail buffers (and the file) from before the start on.
func (r *jobRun) collectOutput(stream outputStream, out *outputFile) {
	r.stream = stream
	r.stdoutTail = newTailBuffer(container.TelemetryScanBytes)
	r.combined = newTailBuffer(r.d.cfg.TailBytes)
	stdoutW, stderrW := io.Writer(io.MultiWriter(r.stdoutTail, r.combined)), io.Writer(r.combined)
	if out != nil {
		stdoutW, stderrW = io.MultiWriter(stdoutW, out), io.MultiWriter(stderrW, out)
	}
	copied := make(chan error, 1)
	r.copied = copied
	go func() { copied <- stream.demux(stdoutW, stderrW) }()
}

// finishOutput waits up to bound for the output to end by itself (zero:
// not at all), then closes the stream and reads what was collected.
func (r *jobRun) finishOutput(bound time.Duration) {
	if r.streamDone {
		return
	}
	r.streamDone = true
	drained := false
	if bound > 0 {
		timer := time.NewTimer(bound)
		select {
		case <-r.copied:
			drained = true
		case <-timer.C:
			r.log.Warn("job_output_drain_timeout", "waited", bound.String())
		}
		timer.Stop()
	}
	_ = r.stream.Close()
	if !drained {
		<-r.copied // Close unblocks the copy
	}
	r.res.Tail, r.res.TailTruncated = r.combined.Bytes(), r.combined.truncated()
	if t, ok := container.ParseExitLine(r.stdoutTail.Bytes()); ok {
		r.res.Telemetry = &t
	}
}

// watchExit starts the engine's wait before the start, so even an instant exit is seen.
func (r *jobRun) watchExit(ctx context.Context) {
	waitCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	r.exited, r.cancelWait = r.d.eng.wait(waitCtx, r.id), cancel
}

// unwatchExit ends the engine's wait and waits for it to yield, so the wait outlives no run.
func (r *jobRun) unwatchExit() {
	r.cancelWait()
	if !r.exitSeen {
		<-r.exited // the engine's wait has ended once it yields
	}
}

// startFailed ends a run whose start failed: stopped when cancelled (it may have started), else never run.
func (r *jobRun) startFailed(ctx context.Context, err error) (Result, error) {
	if ctx.Err() != nil {
		// The start may have happened; stop it like any cancelled job.
		r.res.NeverStarted, r.res.Cancelled = false, true
		r.res.ExitCode, r.exitSeen = r.d.halt(ctx, r.id, r.exited, r.log)
		r.res.EndedAt = time.Now()
		r.finishOutput(r.d.drainFor(r.res.ExitCode))
		return r.res, ctx.Err()
	}
	r.res.StartError = err.Error()
	r.res.ExitCode = 125
	if info, ierr := r.d.inspectAfter(ctx, r.id); ierr == nil && info.ExitCode >= 125 && info.ExitCode <= 127 {
		r.res.ExitCode = info.ExitCode
	}
	r.res.EndedAt = time.Now()
	r.finishOutput(0)
	r.log.Warn("job_container_not_started", "exit_code", r.res.ExitCode)
	return r.res, nil
}

// await waits for the exit, the timeout or ctx's end, stopping the container in the last two cases.
func (r *jobRun) await(ctx context.Context, timeout time.Duration) error {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	var runErr error
	select {
	case w := <-r.exited:
		r.exitSeen = true
		if w.Err == nil {
			r.res.ExitCode = int(w.ExitCode)
			break
		}
		// The engine lost track of the wait: make sure the job is over.
		runErr = fmt.Errorf("wait for container %s: %w", r.res.Container, w.Err)
		r.res.ExitCode, _ = r.d.halt(ctx, r.id, nil, r.log)
	case <-timer.C:
		r.res.TimedOut = true
		r.log.Warn("job_timed_out", "timeout", timeout.String())
		r.res.ExitCode, r.exitSeen = r.d.halt(ctx, r.id, r.exited, r.log)
	case <-ctx.Done():
		r.res.Cancelled = true
		runErr = ctx.Err()
		r.log.Info("job_cancelled")
		r.res.ExitCode, r.exitSeen = r.d.halt(ctx, r.id, r.exited, r.log)
	}
	return runErr
}

// recordExit reads what the exit tells (never run, OOM-killed) and logs the job's end.
func (r *jobRun) recordExit(ctx context.Context) {
	res := &r.res
	if res.ExitCode >= 125 && res.ExitCode <= 127 {
		res.NeverStarted = true
	}
	// Whatever the exit code: the kernel may have killed one of the job's
	// processes for memory while another lived on to exit on its own.
	if !res.NeverStarted {
		if info, err := r.d.inspectAfter(ctx, r.id); err == nil {
			res.OOMKilled = info.OOMKilled
		}
	}
	if res.OOMKilled {
		// Killed on reaching its limit, maybe between two readings.
		res.PeakMemoryBytes = max(res.PeakMemoryBytes, r.memory)
	}
	r.log.Info("job_container_exited", "exit_code", res.ExitCode, "duration", res.EndedAt.Sub(res.StartedAt).String(),
		"timed_out", res.TimedOut, "cancelled", res.Cancelled, "never_started", res.NeverStarted, "oom_killed", res.OOMKilled,
		"peak_memory_bytes", res.PeakMemoryBytes, "cpu_ms", res.CPUTime.Milliseconds())
}

// inspectAfter inspects the container within cleanupTimeout, whatever happened to ctx.
func (d *Docker) inspectAfter(ctx context.Context, id string) (containerInfo, error) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	return d.eng.inspect(cctx, id)
}

// drainFor is how long to wait for the rest of the output of a container
// that ended with code: not at all when it may still run (-1), since its
// output will not end.
func (d *Docker) drainFor(code int) time.Duration {
	if code == -1 {
		return 0
	}
	return d.drainWait
}

// halt stops a running container (stop signal, grace, kill) and returns its
// exit code, read from exited when given (seen reports it was received), else
// by inspection; -1 when it cannot be known.
func (d *Docker) halt(parent context.Context, id string, exited <-chan waitResult, log *slog.Logger) (code int, seen bool) {
	parent = context.WithoutCancel(parent)
	grace := d.cfg.StopGrace
	ctx, cancel := context.WithTimeout(parent, grace+cleanupTimeout)
	defer cancel()
	if err := d.eng.stop(ctx, id, grace); err != nil && !errors.Is(err, errNotFound) {
		log.Warn("job_stop_failed", "err", err)
		kctx, kcancel := context.WithTimeout(parent, cleanupTimeout)
		if err := d.eng.kill(kctx, id); err != nil && !errors.Is(err, errNotFound) {
			log.Warn("job_kill_failed", "err", err)
		}
		kcancel()
	}
	if exited != nil {
		timer := time.NewTimer(d.exitWait)
		defer timer.Stop()
		select {
		case w := <-exited:
			if w.Err == nil {
				return int(w.ExitCode), true
			}
			seen = true
		case <-timer.C:
		}
	}
	ictx, icancel := context.WithTimeout(parent, cleanupTimeout)
	defer icancel()
	info, err := d.eng.inspect(ictx, id)
	if err != nil || info.Running {
		log.Warn("job_stop_did_not_take")
		return -1, seen
	}
	return info.ExitCode, seen
}
