package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pidispatch/pidispatch/enqueue"
	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/internal/image/jobimage"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/internal/testkit/logtest"
	"github.com/pidispatch/pidispatch/jobs"
	"github.com/pidispatch/pidispatch/queue"
	"github.com/pidispatch/pidispatch/runner"
)

// The worker binary, built once per test run for the tests that run it as a
// separate process.
var workerBin struct {
	once sync.Once
	dir  string
	path string
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if workerBin.dir != "" {
		os.RemoveAll(workerBin.dir)
	}
	if code == 0 {
		if leaked := leakedGoroutines(5 * time.Second); leaked != "" {
			fmt.Fprintf(os.Stderr, "goroutines of the worker's packages outlived every test:\n%s\n", leaked)
			code = 1
		}
	}
	os.Exit(code)
}

// leakedGoroutines waits up to timeout for every goroutine running code of
// the project's packages to end (every worker has stopped and every stack
// has been closed by now) and returns the stacks of those that did not.
func leakedGoroutines(timeout time.Duration) string {
	deadline := time.Now().Add(timeout)
	for {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		var leaked []string
		for _, g := range strings.Split(string(buf), "\n\n") {
			for _, pkg := range []string{"dispatch", "queue", "registry", "lease", "runner", "metrics"} {
				if strings.Contains(g, "github.com/pidispatch/pidispatch/"+pkg+".") {
					leaked = append(leaked, g)
					break
				}
			}
		}
		if len(leaked) == 0 || time.Now().After(deadline) {
			return strings.Join(leaked, "\n\n")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// workerBinary builds ./cmd/worker (this package) once and returns its path.
func workerBinary(t *testing.T) string {
	t.Helper()
	livetest.SkipShort(t) // builds and runs the binary: not for the short lane
	workerBin.once.Do(func() {
		goBin, err := exec.LookPath("go")
		if err != nil {
			goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
		}
		dir, err := os.MkdirTemp("", "pidispatch-worker-bin-")
		if err != nil {
			workerBin.err = err
			return
		}
		workerBin.dir = dir
		workerBin.path = filepath.Join(dir, "worker")
		cmd := exec.Command(goBin, "build", "-o", workerBin.path, ".")
		if out, err := cmd.CombinedOutput(); err != nil {
			workerBin.err = fmt.Errorf("go build ./cmd/worker: %v\n%s", err, out)
		}
	})
	if workerBin.err != nil {
		t.Fatal(workerBin.err)
	}
	return workerBin.path
}

// workerProcess is the worker binary running as a child process.
type workerProcess struct {
	cmd    *exec.Cmd
	stderr *logtest.Buffer
	done   chan struct{}
	err    error // Wait's result, once done is closed
}

// processEnv is the environment of a worker process: the test's own PATH,
// HOME and Docker settings, and vars.
func processEnv(vars map[string]string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if k == "PATH" || k == "HOME" || strings.HasPrefix(k, "DOCKER_") {
			env = append(env, kv)
		}
	}
	for k, v := range vars {
		env = append(env, k+"="+v)
	}
	return env
}

// startProcess starts the worker binary; the test's end kills it if it still
// runs.
func startProcess(t *testing.T, bin string, env []string) *workerProcess {
	t.Helper()
	p := &workerProcess{cmd: exec.Command(bin), stderr: &logtest.Buffer{}, done: make(chan struct{})}
	p.cmd.Env = env
	p.cmd.Stderr = p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// waitEvent waits until the process has logged msg.
func (p *workerProcess) waitEvent(t *testing.T, msg string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if strings.Contains(p.stderr.String(), `"msg":"`+msg+`"`) {
			return
		}
		select {
		case <-p.done:
			t.Fatalf("worker exited (%v) before %s:\n%s", p.err, msg, p.stderr.String())
		case <-time.After(50 * time.Millisecond):
		}
	}
	t.Fatalf("no %s after %s:\n%s", msg, timeout, p.stderr.String())
}

// exit waits for the process to end and returns its exit code.
func (p *workerProcess) exit(t *testing.T, timeout time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(timeout):
		t.Fatalf("worker still running after %s", timeout)
	}
	var ee *exec.ExitError
	switch {
	case p.err == nil:
		return 0
	case errors.As(p.err, &ee):
		return ee.ExitCode()
	}
	t.Fatalf("wait: %v", p.err)
	return -1
}

// A worker process killed (SIGKILL) while its job runs, then started again
// under the same name: the orphaned container is reaped, the job's scope
// claim swept, the job failed as stalled and recorded, and nothing runs twice.
func TestKilledWorkerProcessRestarts(t *testing.T) {
	t.Parallel()
	ensureImage(t)
	bin := workerBinary(t)
	dc := livetest.Docker(t)
	db := livetest.Valkey(t)
	name := uniqueName("k", db)
	scope := "acme/kill"
	limits := filepath.Join(t.TempDir(), "scoped-limits.json")
	if err := os.WriteFile(limits, []byte(`{"version":1,"limits":[{"scope":"`+scope+`","concurrent":1}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	logsDir := t.TempDir()
	env := processEnv(map[string]string{
		"VALKEY_URL": db.URL, "PI_UNSIGNED_QUEUES": "*",
		"PI_WORKER_NAME":        name,
		"PI_JOB_IMAGE":          jobimage.TestTag,
		"PI_LOGS_DIR":           logsDir,
		"PI_JOB_MEMORY":         "256m",
		"PI_JOB_CPUS":           "0.5",
		"PI_SCOPED_LIMITS_FILE": limits,
		"TMPDIR":                t.TempDir(), // the jobs dir lives under it
	})

	first := startProcess(t, bin, env)
	first.waitEvent(t, "worker_started", 30*time.Second)
	jobID := uniqueName("gh-kill", db)
	e, err := newRouter(t, db).EnqueueForge(context.Background(), enqueue.ForgeDelivery{JobID: jobID, Job: forgeJob(scope, "JOB_SLEEP=120s")})
	if err != nil || e.Queue != fleet.SharedQueue {
		t.Fatalf("enqueue: %+v %v", e, err)
	}

	claimKey := fleet.ScopeSlotKey(fleet.ScopeHash(scope), 0)
	holder := name + "#" + jobID
	deadline := time.Now().Add(60 * time.Second)
	for {
		running := false
		for _, c := range containers(t, dc, runner.LabelJob, jobID) {
			running = running || c.State == "running"
		}
		got, _ := db.Client.Get(context.Background(), claimKey).Result()
		if running && got == holder {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("job never ran holding its scope claim (claim %q):\n%s", got, first.stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}

	if err := first.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if code := first.exit(t, 10*time.Second); code != -1 {
		t.Fatalf("killed worker exit code %d", code)
	}
	if left := containers(t, dc, runner.LabelJob, jobID); len(left) != 1 {
		t.Fatalf("the job's container should outlive its killed worker: %d", len(left))
	}

	began := time.Now()
	second := startProcess(t, bin, env)
	j := waitJobState(t, testQueue(t, db, fleet.SharedQueue), jobID, queue.StateFailed, 90*time.Second)
	t.Logf("the restarted worker failed the orphaned job after %s", time.Since(began).Round(time.Millisecond))
	if j.FailedReason != string(jobs.ReasonStalled) {
		t.Fatalf("failed reason %q, want stalled", j.FailedReason)
	}
	rec := waitRecord(t, logsDir, jobID, 10*time.Second)
	if rec.Outcome != jobs.OutcomeFailed || rec.Reason != jobs.ReasonStalled || rec.Host != name || rec.Kind != jobs.KindForge || rec.Target != scope {
		t.Fatalf("record %+v", rec)
	}
	if left := containers(t, dc, runner.LabelJob, jobID); len(left) != 0 {
		t.Fatalf("the orphaned container was not reaped: %d left", len(left))
	}
	if got, err := db.Client.Get(context.Background(), claimKey).Result(); err != redis.Nil && got == holder {
		t.Fatalf("the dead run's scope claim %s = %q survived the restart (%v)", claimKey, got, err)
	}
	second.waitEvent(t, "worker_started", 10*time.Second)
	// The restart proves at boot that the job is its own orphan: it fails it
	// at once rather than after the lock expires (LockTTL + stalled interval).
	for _, msg := range []string{"reaped_containers", "scope_claims_swept", "job_orphan_failed"} {
		if countEvents(t, second.stderr.String(), msg, "") != 1 {
			t.Fatalf("the restarted worker did not log %s once:\n%s", msg, second.stderr.String())
		}
	}

	if err := second.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := second.exit(t, 40*time.Second); code != 0 {
		t.Fatalf("restarted worker exit code %d after SIGTERM:\n%s", code, second.stderr.String())
	}
	starts := countEvents(t, first.stderr.String(), "job_started", jobID)
	again := countEvents(t, second.stderr.String(), "job_started", jobID)
	if starts != 1 || again != 0 {
		t.Fatalf("job_started: %d in the killed process, %d in the restarted one; want 1 and 0", starts, again)
	}
	if n := len(containers(t, dc, runner.LabelJob, jobID)); n != 0 {
		t.Fatalf("%d containers of the job after the restart", n)
	}
}

// An invalid environment refuses boot with exit code 2 and names the
// variable, from run and from the built binary alike.
func TestInvalidEnvironmentRefusesBoot(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, value string
	}{
		{"PI_WORKER_NAME", "bad name"},
		{"PI_CONCURRENCY", "0"},
		{"PI_SECRET_PROFILES", "prod:relative/path"},
	} {
		env := map[string]string{"VALKEY_URL": "redis://127.0.0.1:1/0", "PI_UNSIGNED_QUEUES": "*", tc.name: tc.value}
		var stderr bytes.Buffer
		code := run(context.Background(), nil, func(k string) string { return env[k] }, io.Discard, &stderr)
		if code != exitConfig || !strings.Contains(stderr.String(), tc.name) {
			t.Errorf("%s=%q: exit %d, stderr %q; want 2 naming the variable", tc.name, tc.value, code, stderr.String())
		}
	}

	bin := workerBinary(t)
	p := startProcess(t, bin, processEnv(map[string]string{"VALKEY_URL": "redis://127.0.0.1:1/0", "PI_UNSIGNED_QUEUES": "*", "PI_CONCURRENCY": "0"}))
	if code := p.exit(t, 30*time.Second); code != exitConfig {
		t.Fatalf("binary exit %d, want 2:\n%s", code, p.stderr.String())
	}
	if !strings.Contains(p.stderr.String(), "PI_CONCURRENCY") {
		t.Fatalf("binary stderr does not name the variable:\n%s", p.stderr.String())
	}
}

// A second process started under the name of a live worker is refused boot
// (exit 2, name in use) without touching the live worker's running job: its
// container keeps running and the job completes.
func TestDuplicateNameRefusedWithoutHarm(t *testing.T) {
	t.Parallel()
	ensureImage(t)
	bin := workerBinary(t)
	dc := livetest.Docker(t)
	db := livetest.Valkey(t)
	name := uniqueName("dup", db)
	logsDir := t.TempDir()
	env := processEnv(map[string]string{
		"VALKEY_URL": db.URL, "PI_UNSIGNED_QUEUES": "*",
		"PI_WORKER_NAME": name,
		"PI_JOB_IMAGE":   jobimage.TestTag,
		"PI_LOGS_DIR":    logsDir,
		"PI_JOB_MEMORY":  "256m",
		"PI_JOB_CPUS":    "0.5",
		"TMPDIR":         t.TempDir(),
	})
	live := startProcess(t, bin, env)
	live.waitEvent(t, "worker_started", 30*time.Second)
	jobID := uniqueName("gh-dup", db)
	if _, err := newRouter(t, db).EnqueueForge(context.Background(), enqueue.ForgeDelivery{JobID: jobID, Job: forgeJob("acme/dup", "JOB_SLEEP=4s")}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for len(containers(t, dc, runner.LabelJob, jobID)) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the job never started:\n%s", live.stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}

	dup := startProcess(t, bin, env)
	if code := dup.exit(t, 30*time.Second); code != exitConfig {
		t.Fatalf("duplicate exit %d, want 2:\n%s", code, dup.stderr.String())
	}
	if !strings.Contains(dup.stderr.String(), "in use") {
		t.Fatalf("duplicate's stderr does not say the name is in use:\n%s", dup.stderr.String())
	}
	if n := len(containers(t, dc, runner.LabelJob, jobID)); n != 1 {
		t.Fatalf("the live worker's job container was removed by the refused duplicate (%d left)", n)
	}
	rec := waitRecord(t, logsDir, jobID, 30*time.Second)
	if rec.Outcome != jobs.OutcomeCompleted || rec.Host != name {
		t.Fatalf("the live worker's job: %+v", rec)
	}
	for _, msg := range []string{"reaped_container", "scope_claims_swept", "job_started", "worker_started"} {
		if strings.Contains(dup.stderr.String(), `"msg":"`+msg) {
			t.Fatalf("the refused duplicate logged %s:\n%s", msg, dup.stderr.String())
		}
	}
	if err := live.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := live.exit(t, 40*time.Second); code != 0 {
		t.Fatalf("live worker exit %d", code)
	}
}
