package runner_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/client"

	"github.com/pidispatch/pidispatch/internal/image/jobimage"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/internal/testkit/logtest"
	"github.com/pidispatch/pidispatch/runner"
)

const secretValue = "s3cr3t-value"

var (
	imageOnce sync.Once
	imageErr  error
)

// liveDocker gives the test a Docker client with the test job image built.
func liveDocker(t testing.TB) *client.Client {
	t.Helper()
	c := livetest.Docker(t)
	imageOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		imageErr = jobimage.Ensure(ctx, c, jobimage.TestTag)
	})
	if imageErr != nil {
		t.Fatalf("test job image: %v", imageErr)
	}
	return c
}

func unique(prefix string) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return prefix + "-" + hex.EncodeToString(b)
}

type liveBundle struct {
	c      *client.Client
	d      *runner.Docker
	logs   *logtest.Buffer
	worker string
}

// setup gives the test a runtime of a worker of its own, whose containers are
// reaped when the test ends whatever happened.
func setup(t testing.TB, cfg runner.Config) *liveBundle {
	t.Helper()
	c := liveDocker(t)
	logs := &logtest.Buffer{}
	cfg.Logger = slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	d, err := runner.NewDocker(c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	b := &liveBundle{c: c, d: d, logs: logs, worker: unique("test-worker")}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = d.Reap(ctx, b.worker)
	})
	return b
}

func (b *liveBundle) spec(env map[string]string) runner.Spec {
	return runner.Spec{JobID: unique("live-job"), Worker: b.worker, Image: jobimage.TestTag, Env: env, Memory: 128 << 20, CPUs: 0.5}
}

// byLabel lists containers (any state) carrying label=value.
func byLabel(t *testing.T, c *client.Client, label, value string) []container.Summary {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := c.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: make(client.Filters).Add("label", label+"="+value)})
	if err != nil {
		t.Fatal(err)
	}
	return res.Items
}

func runCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// TestLiveExitCodes proves the contract's exit codes and telemetry come back
// from real containers, glued exit lines included, and nothing is left.
func TestLiveExitCodes(t *testing.T) {
	t.Parallel()
	b := setup(t, runner.Config{})
	tests := []struct {
		name      string
		env       map[string]string
		code      int
		telemetry bool
	}{
		{"Completed", map[string]string{"JOB_PRINT_EXIT_LINE": "1"}, 0, true},
		{"InfraGlued", map[string]string{"JOB_EXIT_CODE": "1", "JOB_PRINT_EXIT_LINE": "1", "JOB_GLUE": "1"}, 1, true},
		{"PolicyNoExitLine", map[string]string{"JOB_EXIT_CODE": "2", "JOB_PRINT_EXIT_LINE": "0"}, 2, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			spec := b.spec(tt.env)
			res, err := b.d.Run(runCtx(t), spec)
			if err != nil {
				t.Fatal(err)
			}
			if res.ExitCode != tt.code || res.NeverStarted || res.TimedOut || res.Cancelled {
				t.Fatalf("result %+v\n%s", res, res.Tail)
			}
			if (res.Telemetry != nil) != tt.telemetry {
				t.Fatalf("telemetry %+v, want present=%v; output:\n%s", res.Telemetry, tt.telemetry, res.Tail)
			}
			if tt.telemetry && (res.Telemetry.Turns != 3 || res.Telemetry.Tokens != 1234 || res.Telemetry.Cost != 0.05) {
				t.Fatalf("telemetry %+v", res.Telemetry)
			}
			if !bytes.Contains(res.Tail, []byte("hello from the pidispatch test job")) || !bytes.Contains(res.Tail, []byte("a line on stderr")) {
				t.Fatalf("tail lacks stdout or stderr:\n%s", res.Tail)
			}
			if left := byLabel(t, b.c, runner.LabelJob, spec.JobID); len(left) != 0 {
				t.Fatalf("%d containers left", len(left))
			}
		})
	}
}

// TestLiveNeverStarted proves an image whose entrypoint does not exist maps to
// NeverStarted (the init process reports 127).
func TestLiveNeverStarted(t *testing.T) {
	t.Parallel()
	b := setup(t, runner.Config{})
	tag := unique("pidispatch-test-noentry") + ":dev"
	ctx := runCtx(t)
	files := []jobimage.File{{Name: "Dockerfile", Mode: 0o644, Data: []byte("FROM " + jobimage.TestTag + "\nENTRYPOINT [\"/does-not-exist\"]\n")}}
	if err := jobimage.BuildFiles(ctx, b.c, tag, files, nil, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = b.c.ImageRemove(context.Background(), tag, client.ImageRemoveOptions{Force: true}) })

	spec := b.spec(nil)
	spec.Image = tag
	res, err := b.d.Run(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	if !res.NeverStarted || res.ExitCode < 125 || res.ExitCode > 127 || res.Telemetry != nil {
		t.Fatalf("result %+v\n%s", res, res.Tail)
	}
	if left := byLabel(t, b.c, runner.LabelJob, spec.JobID); len(left) != 0 {
		t.Fatalf("%d containers left", len(left))
	}
}

// TestLiveIsolationAndSecrets inspects a running job container: every
// isolation setting is in place, and a secret is in the container's
// environment but in no command line, no process argv on the host, no log
// line and no output.
func TestLiveIsolationAndSecrets(t *testing.T) {
	t.Parallel()
	b := setup(t, runner.Config{})
	jobDir, ws := t.TempDir(), t.TempDir()
	spec := b.spec(map[string]string{"SECRET_TOKEN": secretValue, "JOB_CHECK_ENV": "SECRET_TOKEN", "JOB_SLEEP": "2s"})
	spec.Memory, spec.CPUs = 256<<20, 0.5
	spec.Network = "none"
	spec.Labels = map[string]string{"team": "qa"}
	spec.JobDir, spec.WorkspaceDir = jobDir, ws

	type outcome struct {
		res runner.Result
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := b.d.Run(runCtx(t), spec)
		done <- outcome{res, err}
	}()

	var id string
	for deadline := time.Now().Add(15 * time.Second); id == "" && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		for _, s := range byLabel(t, b.c, runner.LabelJob, spec.JobID) {
			if s.State == container.StateRunning {
				id = s.ID
			}
		}
	}
	if id == "" {
		t.Fatal("job container never seen running")
	}
	ins, err := b.c.ContainerInspect(context.Background(), id, client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	hc, cfg := ins.Container.HostConfig, ins.Container.Config
	checks := []struct {
		what string
		ok   bool
	}{
		{"CapDrop ALL", slices.Contains(hc.CapDrop, "ALL") && len(hc.CapAdd) == 0},
		{"no-new-privileges", slices.Contains(hc.SecurityOpt, "no-new-privileges")},
		{"PidsLimit 512", hc.PidsLimit != nil && *hc.PidsLimit == 512},
		{"Init", hc.Init != nil && *hc.Init},
		{"Memory", hc.Memory == 256<<20},
		{"NanoCPUs", hc.NanoCPUs == 500_000_000},
		{"ShmSize 1 GiB", hc.ShmSize == 1<<30},
		{"not privileged", !hc.Privileged},
		{"network none", hc.NetworkMode == "none"},
		{"no host namespaces", !hc.PidMode.IsHost() && !hc.IpcMode.IsHost() && !hc.UTSMode.IsHost() && !hc.NetworkMode.IsHost()},
		{"not auto-removed", !hc.AutoRemove},
		{"name", ins.Container.Name == "/"+runner.ContainerName(spec.JobID)},
		{"labels", cfg.Labels[runner.LabelJob] == spec.JobID && cfg.Labels[runner.LabelWorker] == b.worker && cfg.Labels["team"] == "qa"},
		{"image's own command", slices.Equal(cfg.Entrypoint, []string{"/jobprog"}) && len(cfg.Cmd) == 0},
	}
	for _, c := range checks {
		if !c.ok {
			t.Errorf("isolation: %s not in place (HostConfig %+v)", c.what, hc)
		}
	}
	mounts := map[string]container.MountPoint{}
	for _, m := range ins.Container.Mounts {
		mounts[m.Destination] = m
	}
	if m := mounts["/job"]; m.Type != mount.TypeBind || m.RW || m.Source != jobDir {
		t.Errorf("/job mount %+v", m)
	}
	if m := mounts["/workspace"]; m.Type != mount.TypeBind || !m.RW || m.Source != ws {
		t.Errorf("/workspace mount %+v", m)
	}
	argv := strings.Join(append(append(append([]string{ins.Container.Path}, ins.Container.Args...), cfg.Cmd...), cfg.Entrypoint...), " ")
	if strings.Contains(argv, secretValue) {
		t.Errorf("secret on the container's command line: %q", argv)
	}
	if !slices.Contains(cfg.Env, "SECRET_TOKEN="+secretValue) {
		t.Errorf("secret not passed in Env")
	}
	// Every process on this host: the secret is in no argv, and (proving the
	// scan sees the job's processes) in the job's environment.
	inArgv, inEnviron := scanProc(t, secretValue)
	if inArgv != "" {
		t.Errorf("secret in the argv of host process %s", inArgv)
	}
	if !inEnviron {
		t.Errorf("the job's process (with the secret in its environment) was not visible in /proc")
	}

	out := <-done
	if out.err != nil || out.res.ExitCode != 0 {
		t.Fatalf("run: %v %+v", out.err, out.res)
	}
	if !bytes.Contains(out.res.Tail, []byte("env SECRET_TOKEN present")) {
		t.Errorf("job did not see the secret:\n%s", out.res.Tail)
	}
	if bytes.Contains(out.res.Tail, []byte(secretValue)) || strings.Contains(b.logs.String(), secretValue) {
		t.Errorf("secret value in the output or the runner's log")
	}
	if !strings.Contains(b.logs.String(), `"msg":"job_container_started"`) || !strings.Contains(b.logs.String(), `"host":"`+b.worker+`"`) {
		t.Errorf("runner log lacks its events with the host attribute:\n%s", b.logs)
	}
}

// scanProc reports a process whose argv holds needle, and whether any
// process's environment does.
func scanProc(t *testing.T, needle string) (argvPID string, inEnviron bool) {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatalf("read /proc: %v", err)
	}
	for _, e := range entries {
		pid := e.Name()
		if pid[0] < '0' || pid[0] > '9' {
			continue
		}
		if cmd, err := os.ReadFile(filepath.Join("/proc", pid, "cmdline")); err == nil && bytes.Contains(cmd, []byte(needle)) {
			argvPID = pid
		}
		if env, err := os.ReadFile(filepath.Join("/proc", pid, "environ")); err == nil && bytes.Contains(env, []byte("SECRET_TOKEN="+needle)) {
			inEnviron = true
		}
	}
	return argvPID, inEnviron
}

// TestLiveTimeout proves a job past its timeout is stopped (the stop signal,
// then a kill when it ignores it), TimedOut is set, the call returns, and no
// container is left.
func TestLiveTimeout(t *testing.T) {
	t.Parallel()
	b := setup(t, runner.Config{StopGrace: time.Second})
	for name, tt := range map[string]struct {
		env  map[string]string
		code int
	}{
		"HonoursStop": {map[string]string{"JOB_SLEEP": "60s"}, 143},
		"IgnoresStop": {map[string]string{"JOB_SLEEP": "60s", "JOB_IGNORE_TERM": "1"}, 137},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			spec := b.spec(tt.env)
			spec.Timeout = 1500 * time.Millisecond
			start := time.Now()
			res, err := b.d.Run(runCtx(t), spec)
			elapsed := time.Since(start)
			if err != nil {
				t.Fatal(err)
			}
			if !res.TimedOut || res.Cancelled || res.NeverStarted || res.ExitCode != tt.code {
				t.Fatalf("result %+v", res)
			}
			if elapsed > 30*time.Second { // the job sleeps 60 s: only a missed stop takes this long
				t.Fatalf("run took %v", elapsed)
			}
			if !bytes.Contains(res.Tail, []byte("hello")) {
				t.Fatalf("output before the stop lost: %q", res.Tail)
			}
			if left := byLabel(t, b.c, runner.LabelJob, spec.JobID); len(left) != 0 {
				t.Fatalf("%d containers left", len(left))
			}
		})
	}
}

// TestLiveCancel proves cancelling the context stops the job, marks the result
// cancelled, returns ctx.Err() and leaves nothing behind.
func TestLiveCancel(t *testing.T) {
	t.Parallel()
	b := setup(t, runner.Config{StopGrace: time.Second})
	spec := b.spec(map[string]string{"JOB_SLEEP": "60s"})
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(1500*time.Millisecond, cancel)
	res, err := b.d.Run(ctx, spec)
	if !errors.Is(err, context.Canceled) || !res.Cancelled || res.TimedOut || res.NeverStarted {
		t.Fatalf("err %v result %+v", err, res)
	}
	if left := byLabel(t, b.c, runner.LabelJob, spec.JobID); len(left) != 0 {
		t.Fatalf("%d containers left", len(left))
	}
}

// TestLiveReap proves the reaper removes this worker's containers (running
// and created) and leaves another worker's and an unlabelled pi-job-* alone.
func TestLiveReap(t *testing.T) {
	t.Parallel()
	b := setup(t, runner.Config{})
	other := unique("test-other-worker")
	ctx := runCtx(t)
	create := func(name string, labels map[string]string, start bool) string {
		t.Helper()
		res, err := b.c.ContainerCreate(ctx, client.ContainerCreateOptions{
			Name:   name,
			Config: &container.Config{Image: jobimage.TestTag, Labels: labels, Env: []string{"JOB_SLEEP=60s"}},
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_, _ = b.c.ContainerRemove(context.Background(), res.ID, client.ContainerRemoveOptions{Force: true})
		})
		if start {
			if _, err := b.c.ContainerStart(ctx, res.ID, client.ContainerStartOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		return res.ID
	}
	create(unique("pi-job-mine-running"), map[string]string{runner.LabelWorker: b.worker}, true)
	create(unique("reap-mine-created"), map[string]string{runner.LabelWorker: b.worker}, false)
	othersID := create(unique("pi-job-other"), map[string]string{runner.LabelWorker: other}, false)
	unlabelledID := create(unique("pi-job-x"), nil, false)

	rep, err := b.d.Reap(ctx, b.worker)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Enumerated || rep.Found != 2 || rep.Removed != 2 || !rep.Clean() {
		t.Fatalf("report %+v", rep)
	}
	if left := byLabel(t, b.c, runner.LabelWorker, b.worker); len(left) != 0 {
		t.Fatalf("%d of the worker's containers left", len(left))
	}
	for _, id := range []string{othersID, unlabelledID} {
		if _, err := b.c.ContainerInspect(ctx, id, client.ContainerInspectOptions{}); err != nil {
			t.Fatalf("container %s was touched: %v", id, err)
		}
	}
}

// TestLiveReapUnreachable proves a sweep that cannot list says so.
func TestLiveReapUnreachable(t *testing.T) {
	t.Parallel()
	c, err := client.New(client.WithHost("unix:///nonexistent.sock"), client.WithAPIVersion("1.41"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	d, err := runner.NewDocker(c, runner.Config{})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := d.Reap(runCtx(t), "w1")
	if err == nil || rep.Enumerated || rep.Clean() {
		t.Fatalf("report %+v err %v", rep, err)
	}
	if ok, err := d.ImagePresent(runCtx(t), jobimage.TestTag); ok || err == nil {
		t.Fatalf("image presence claimed without a daemon: %v %v", ok, err)
	}
}

// TestLiveMissingImage proves an absent image is refused at once, before any
// container exists.
func TestLiveMissingImage(t *testing.T) {
	t.Parallel()
	b := setup(t, runner.Config{})
	spec := b.spec(nil)
	spec.Image = unique("pidispatch-absent-image") + ":never"
	start := time.Now()
	res, err := b.d.Run(runCtx(t), spec)
	elapsed := time.Since(start)
	if !errors.Is(err, runner.ErrImageMissing) || !res.NeverStarted {
		t.Fatalf("err %v res %+v", err, res)
	}
	if elapsed > 10*time.Second { // a hang-catching bound; that nothing was created is the check below
		t.Fatalf("refusal took %v", elapsed)
	}
	t.Logf("missing image refused in %v", elapsed)
	if left := byLabel(t, b.c, runner.LabelJob, spec.JobID); len(left) != 0 {
		t.Fatal("a container was created for a missing image")
	}
	present, err := b.d.ImagePresent(runCtx(t), spec.Image)
	if present || err != nil {
		t.Fatalf("ImagePresent %v %v", present, err)
	}
	digest, err := b.d.ImageDigest(runCtx(t), jobimage.TestTag)
	if err != nil || !strings.HasPrefix(digest, "sha256:") || len(digest) != 71 {
		t.Fatalf("ImageDigest %q %v", digest, err)
	}
}

// TestLiveMounts proves /job is readable, a file the job writes to /workspace
// appears in the host folder, and the whole output lands in OutputFile.
func TestLiveMounts(t *testing.T) {
	t.Parallel()
	b := setup(t, runner.Config{})
	jobDir, ws := t.TempDir(), t.TempDir()
	// The job runs as root without capabilities (no DAC override).
	if err := os.Chmod(ws, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(jobDir, "job.json"), []byte(`{"jobId":"mounted"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	spec := b.spec(map[string]string{"JOB_WRITE_FILE": "result.txt"})
	spec.JobDir, spec.WorkspaceDir = jobDir, ws
	spec.OutputFile = filepath.Join(t.TempDir(), "job.log")
	res, err := b.d.Run(runCtx(t), spec)
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("err %v res %+v\n%s", err, res, res.Tail)
	}
	if data, err := os.ReadFile(filepath.Join(ws, "result.txt")); err != nil || string(data) != "written by jobprog\n" {
		t.Fatalf("workspace file: %q %v", data, err)
	}
	if !bytes.Contains(res.Tail, []byte(`{"jobId":"mounted"}`)) {
		t.Fatalf("job.json not visible in /job:\n%s", res.Tail)
	}
	log, err := os.ReadFile(spec.OutputFile)
	if err != nil || !bytes.Contains(log, []byte("hello from")) || !bytes.Contains(log, []byte("a line on stderr")) {
		t.Fatalf("output file: %q %v", log, err)
	}
	if fi, err := os.Stat(spec.OutputFile); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("output file mode: %v %v", fi.Mode(), err)
	}
}

// TestLiveLargeOutput proves a job printing a megabyte keeps draining, its
// exit line is still found, and the kept tail is bounded.
func TestLiveLargeOutput(t *testing.T) {
	t.Parallel()
	b := setup(t, runner.Config{})
	res, err := b.d.Run(runCtx(t), b.spec(map[string]string{"JOB_STDOUT_BYTES": "1048576", "JOB_PRINT_EXIT_LINE": "1"}))
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("err %v res %+v", err, res)
	}
	if res.Telemetry == nil || res.Telemetry.Tokens != 1234 {
		t.Fatalf("telemetry %+v", res.Telemetry)
	}
	if len(res.Tail) != runner.TailBytesDefault || !res.TailTruncated {
		t.Fatalf("tail %d bytes, truncated %v", len(res.Tail), res.TailTruncated)
	}
}

// TestLiveNameCollision proves a container holding the job's name is removed
// only when this worker owns it.
func TestLiveNameCollision(t *testing.T) {
	t.Parallel()
	b := setup(t, runner.Config{})
	ctx := runCtx(t)
	spec := b.spec(nil)
	name := runner.ContainerName(spec.JobID)
	squat, err := b.c.ContainerCreate(ctx, client.ContainerCreateOptions{Name: name, Config: &container.Config{Image: jobimage.TestTag}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = b.c.ContainerRemove(context.Background(), squat.ID, client.ContainerRemoveOptions{Force: true})
	})
	if _, err := b.d.Run(ctx, spec); !errors.Is(err, runner.ErrNameConflict) {
		t.Fatalf("err %v, want ErrNameConflict", err)
	}
	if _, err := b.c.ContainerInspect(ctx, squat.ID, client.ContainerInspectOptions{}); err != nil {
		t.Fatalf("unowned container was removed: %v", err)
	}
	_, _ = b.c.ContainerRemove(ctx, squat.ID, client.ContainerRemoveOptions{Force: true})

	stale, err := b.c.ContainerCreate(ctx, client.ContainerCreateOptions{Name: name, Config: &container.Config{
		Image: jobimage.TestTag, Labels: map[string]string{runner.LabelWorker: b.worker},
	}})
	if err != nil {
		t.Fatal(err)
	}
	res, err := b.d.Run(ctx, spec)
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("stale own container not replaced: %v %+v", err, res)
	}
	if _, err := b.c.ContainerInspect(ctx, stale.ID, client.ContainerInspectOptions{}); err == nil {
		t.Fatal("stale container still exists")
	}
}

// TestLiveNoGoroutineLeak proves Run leaves no goroutine behind, on a normal
// exit and on a timeout: once its own client is closed, the process is back
// to the goroutines it had before. Not parallel, so other tests' goroutines
// do not move the count.
func TestLiveNoGoroutineLeak(t *testing.T) {
	liveDocker(t) // the image, before the baseline
	before := runtime.NumGoroutine()
	c, err := client.New(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatal(err)
	}
	d, err := runner.NewDocker(c, runner.Config{StopGrace: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	worker := unique("test-leak")
	ok := runner.Spec{JobID: unique("leak-ok"), Worker: worker, Image: jobimage.TestTag}
	slow := runner.Spec{JobID: unique("leak-slow"), Worker: worker, Image: jobimage.TestTag, Env: map[string]string{"JOB_SLEEP": "60s"}, Timeout: time.Second}
	for _, spec := range []runner.Spec{ok, slow} {
		if _, err := d.Run(runCtx(t), spec); err != nil {
			t.Fatal(err)
		}
	}
	_ = c.Close()
	deadline := time.Now().Add(3 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		buf := make([]byte, 1<<16)
		t.Fatalf("%d goroutines outlived Run:\n%s", n-before, buf[:runtime.Stack(buf, true)])
	}
}
