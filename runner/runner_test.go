package runner

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pidispatch/pidispatch/dispatch/container"
	"github.com/pidispatch/pidispatch/internal/testkit/logtest"
)

func newTestDocker(t *testing.T, eng engine, cfg Config) (*Docker, *logtest.Buffer) {
	t.Helper()
	logs := &logtest.Buffer{}
	cfg.Logger = slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	d, err := newDocker(eng, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return d, logs
}

func baseSpec() Spec {
	return Spec{JobID: "job-1", Worker: "w1", Image: "job:latest"}
}

// checkNoLeak fails when goroutines started during the test outlive it.
func checkNoLeak(t *testing.T) {
	t.Helper()
	before := runtime.NumGoroutine()
	t.Cleanup(func() {
		deadline := time.Now().Add(2 * time.Second)
		for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if n := runtime.NumGoroutine(); n > before {
			buf := make([]byte, 1<<16)
			t.Errorf("%d goroutines outlived the test (before %d):\n%s", n-before, before, buf[:runtime.Stack(buf, true)])
		}
	})
}

func TestRunCompleted(t *testing.T) {
	checkNoLeak(t)
	eng := newFakeEngine()
	eng.stdout = []byte("hello\ntext{\"event\":\"exit\",\"turns\":3,\"tokens\":1234,\"cost\":0.05}\n")
	eng.stderr = []byte("warning\n")
	eng.exitCode = 2
	d, _ := newTestDocker(t, eng, Config{})

	res, err := d.Run(context.Background(), baseSpec())
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 2 || res.NeverStarted || res.TimedOut || res.Cancelled {
		t.Fatalf("result %+v", res)
	}
	if res.Telemetry == nil || res.Telemetry.Turns != 3 || res.Telemetry.Tokens != 1234 || res.Telemetry.Cost != 0.05 {
		t.Fatalf("telemetry %+v", res.Telemetry)
	}
	if !bytes.Contains(res.Tail, []byte("hello")) || !bytes.Contains(res.Tail, []byte("warning")) {
		t.Fatalf("tail %q lacks stdout or stderr", res.Tail)
	}
	if res.ImageID != "sha256:feed" || res.Container != "pi-job-job-1" || res.StartedAt.IsZero() || res.EndedAt.Before(res.StartedAt) {
		t.Fatalf("result %+v", res)
	}
	want := []string{"imageID job:latest", "create pi-job-job-1", "attach", "wait", "start", "usage c1", "inspect", "remove c1"}
	if got := eng.callLog(); !slices.Equal(got, want) {
		t.Fatalf("calls\n got %q\nwant %q", got, want)
	}
	if eng.count() != 0 {
		t.Fatal("container left behind")
	}
}

// TestRunContainerSpec pins what the runner asks of the engine: the fixed
// isolation, defaults from Config, the image by ID, env only in Env.
func TestRunContainerSpec(t *testing.T) {
	eng := newFakeEngine()
	d, _ := newTestDocker(t, eng, Config{Memory: 1 << 30, CPUs: 1.5})
	spec := baseSpec()
	spec.Env = map[string]string{"B": "2", "A": "1", "SECRET_TOKEN": "s3cr3t-value", "EMPTY": ""}
	spec.Labels = map[string]string{"team": "x"}
	spec.JobDir, spec.WorkspaceDir = "/srv/jobs/1/", "/srv/ws/1"
	spec.Network = "none"
	spec.User = "1000:1001"
	if _, err := d.Run(context.Background(), spec); err != nil {
		t.Fatal(err)
	}
	cs := eng.created[0]
	if cs.User != "1000:1001" {
		t.Fatalf("user %q, want the spec's", cs.User)
	}
	if cs.Image != "sha256:feed" || !slices.Equal(cs.Env, []string{"A=1", "B=2", "EMPTY=", "SECRET_TOKEN=s3cr3t-value"}) {
		t.Fatalf("image %q env %q", cs.Image, cs.Env)
	}
	if !slices.Equal(cs.CapDrop, []string{"ALL"}) || !cs.NoNewPrivileges || cs.PidsLimit != 512 || !cs.Init || cs.ShmSize != 1<<30 {
		t.Fatalf("isolation %+v", cs)
	}
	if cs.Memory != 1<<30 || cs.NanoCPUs != 1_500_000_000 || cs.Network != "none" {
		t.Fatalf("limits %d %d %q", cs.Memory, cs.NanoCPUs, cs.Network)
	}
	wantLabels := map[string]string{LabelJob: "job-1", LabelWorker: "w1", "team": "x"}
	if len(cs.Labels) != 3 || cs.Labels[LabelJob] != "job-1" || cs.Labels[LabelWorker] != "w1" || cs.Labels["team"] != "x" {
		t.Fatalf("labels %v, want %v", cs.Labels, wantLabels)
	}
	wantMounts := []bindMount{{"/srv/jobs/1", "/job", true}, {"/srv/ws/1", "/workspace", false}}
	if !slices.Equal(cs.Mounts, wantMounts) {
		t.Fatalf("mounts %+v", cs.Mounts)
	}

	spec.Memory, spec.CPUs = 64<<20, 0.25
	spec.JobID = "job-2"
	spec.User = ""
	if _, err := d.Run(context.Background(), spec); err != nil {
		t.Fatal(err)
	}
	if cs := eng.created[1]; cs.Memory != 64<<20 || cs.NanoCPUs != 250_000_000 || cs.User != "" {
		t.Fatalf("spec limits not used: %d %d %q", cs.Memory, cs.NanoCPUs, cs.User)
	}
}

func TestRunRefusesInvalidSpec(t *testing.T) {
	secret := "s3cr3t-value"
	mutate := map[string]func(*Spec){
		"no job id":          func(s *Spec) { s.JobID = "" },
		"job id with NUL":    func(s *Spec) { s.JobID = "a\x00b" },
		"job id not UTF-8":   func(s *Spec) { s.JobID = "\xff" },
		"no worker":          func(s *Spec) { s.Worker = "" },
		"no image":           func(s *Spec) { s.Image = "" },
		"image with space":   func(s *Spec) { s.Image = "job latest" },
		"env name with =":    func(s *Spec) { s.Env = map[string]string{"A=B": secret} },
		"empty env name":     func(s *Spec) { s.Env = map[string]string{"": secret} },
		"env value NUL":      func(s *Spec) { s.Env = map[string]string{"TOKEN": secret + "\x00"} },
		"env value not UTF8": func(s *Spec) { s.Env = map[string]string{"TOKEN": secret + "\xff"} },
		"reserved job label": func(s *Spec) { s.Labels = map[string]string{LabelJob: "other"} },
		"reserved worker":    func(s *Spec) { s.Labels = map[string]string{LabelWorker: "other"} },
		"host network":       func(s *Spec) { s.Network = "host" },
		"HOST network":       func(s *Spec) { s.Network = "HOST" },
		"container network":  func(s *Spec) { s.Network = "container:abc" },
		"relative job dir":   func(s *Spec) { s.JobDir = "jobs/1" },
		"relative workspace": func(s *Spec) { s.WorkspaceDir = "./ws" },
		"relative out dir":   func(s *Spec) { s.JobDir, s.OutDir = "/srv/jobs/1", "out" },
		"out dir, no job":    func(s *Spec) { s.OutDir = "/srv/out/1" },
		"out dir is job dir": func(s *Spec) { s.JobDir, s.OutDir = "/srv/jobs/1", "/srv/jobs/1/." },
		"out dir holds job":  func(s *Spec) { s.JobDir, s.OutDir = "/srv/jobs/1", "/srv/jobs" },
		"out dir with NUL":   func(s *Spec) { s.JobDir, s.OutDir = "/srv/jobs/1", "/srv/out\x00" },
		"negative memory":    func(s *Spec) { s.Memory = -1 },
		"tiny memory":        func(s *Spec) { s.Memory = 1024 },
		"NaN cpus":           func(s *Spec) { s.CPUs = math.NaN() },
		"infinite cpus":      func(s *Spec) { s.CPUs = math.Inf(1) },
		"negative cpus":      func(s *Spec) { s.CPUs = -1 },
		"negative timeout":   func(s *Spec) { s.Timeout = -time.Second },
		"user by name":       func(s *Spec) { s.User = "root" },
		"user with a space":  func(s *Spec) { s.User = "1000 :1000" },
		"user empty gid":     func(s *Spec) { s.User = "1000:" },
		"user three parts":   func(s *Spec) { s.User = "1:2:3" },
		"user too long":      func(s *Spec) { s.User = "12345678901" },
	}
	for name, m := range mutate {
		t.Run(name, func(t *testing.T) {
			eng := newFakeEngine()
			d, logs := newTestDocker(t, eng, Config{})
			spec := baseSpec()
			m(&spec)
			res, err := d.Run(context.Background(), spec)
			if !errors.Is(err, ErrInvalidSpec) {
				t.Fatalf("err = %v, want ErrInvalidSpec", err)
			}
			if strings.Contains(err.Error(), secret) || strings.Contains(logs.String(), secret) {
				t.Fatalf("secret value leaked into the error or log: %v", err)
			}
			if !res.NeverStarted || len(eng.callLog()) != 0 {
				t.Fatalf("engine was called: %q", eng.callLog())
			}
		})
	}
}

// An output folder is mounted read-write at /job/out, after the read-only
// /job it is inside, and its mount point is made in the job folder (the
// engine cannot make it in a read-only /job); a job folder whose "out" is
// something else than a folder is refused before anything is created.
func TestRunMountsTheOutputFolder(t *testing.T) {
	eng := newFakeEngine()
	d, _ := newTestDocker(t, eng, Config{})
	spec := baseSpec()
	jobDir, out := t.TempDir(), t.TempDir()
	spec.JobDir, spec.OutDir, spec.WorkspaceDir = jobDir, out+"/", "/srv/ws/1"
	if _, err := d.Run(context.Background(), spec); err != nil {
		t.Fatal(err)
	}
	want := []bindMount{{jobDir, "/job", true}, {out, "/job/out", false}, {"/srv/ws/1", "/workspace", false}}
	if got := eng.created[0].Mounts; !slices.Equal(got, want) {
		t.Fatalf("mounts %+v\nwant   %+v", got, want)
	}
	if fi, err := os.Lstat(filepath.Join(jobDir, "out")); err != nil || !fi.IsDir() {
		t.Fatalf("mount point in the job folder: %v %v", fi, err)
	}
	// Made once, found the next time.
	spec.JobID = "job-2"
	if _, err := d.Run(context.Background(), spec); err != nil {
		t.Fatal(err)
	}

	eng = newFakeEngine()
	d, _ = newTestDocker(t, eng, Config{})
	jobDir = t.TempDir()
	if err := os.Symlink("/etc", filepath.Join(jobDir, "out")); err != nil {
		t.Fatal(err)
	}
	spec.JobDir = jobDir
	res, err := d.Run(context.Background(), spec)
	if err == nil || !strings.Contains(err.Error(), "is not a folder") || !res.NeverStarted {
		t.Fatalf("err %v res %+v", err, res)
	}
	if got := eng.callLog(); !slices.Equal(got, []string{"imageID job:latest"}) {
		t.Fatalf("calls %q", got)
	}
}

func TestRunMissingImageCreatesNothing(t *testing.T) {
	eng := newFakeEngine()
	d, _ := newTestDocker(t, eng, Config{})
	spec := baseSpec()
	spec.Image = "absent:latest"
	spec.OutputFile = filepath.Join(t.TempDir(), "out.log")
	res, err := d.Run(context.Background(), spec)
	if !errors.Is(err, ErrImageMissing) || !res.NeverStarted {
		t.Fatalf("err %v res %+v", err, res)
	}
	if got := eng.callLog(); !slices.Equal(got, []string{"imageID absent:latest"}) {
		t.Fatalf("calls %q", got)
	}
	if _, err := os.Stat(spec.OutputFile); !os.IsNotExist(err) {
		t.Fatal("output file created for a refused job")
	}
}

func TestRunNameConflict(t *testing.T) {
	t.Run("OursIsReplaced", func(t *testing.T) {
		eng := newFakeEngine()
		stale := eng.add("pi-job-job-1", map[string]string{LabelWorker: "w1", LabelJob: "job-1"})
		d, logs := newTestDocker(t, eng, Config{})
		res, err := d.Run(context.Background(), baseSpec())
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("err %v res %+v", err, res)
		}
		if !slices.Contains(eng.callLog(), "remove "+stale) || !strings.Contains(logs.String(), "job_container_replaced") {
			t.Fatalf("stale container not replaced: %q", eng.callLog())
		}
	})
	t.Run("OthersIsLeftAlone", func(t *testing.T) {
		for _, labels := range []map[string]string{nil, {LabelWorker: "w2"}, {LabelWorker: "w1x"}} {
			eng := newFakeEngine()
			other := eng.add("pi-job-job-1", labels)
			d, _ := newTestDocker(t, eng, Config{})
			res, err := d.Run(context.Background(), baseSpec())
			if !errors.Is(err, ErrNameConflict) || !res.NeverStarted {
				t.Fatalf("labels %v: err %v", labels, err)
			}
			if eng.get(other) == nil || slices.Contains(eng.callLog(), "remove "+other) {
				t.Fatalf("labels %v: another owner's container was removed", labels)
			}
		}
	})
}

func TestRunStartRefused(t *testing.T) {
	checkNoLeak(t)
	eng := newFakeEngine()
	eng.startErr = errors.New(`OCI runtime create failed: exec: "/nope": no such file or directory`)
	eng.startExitCode = 127
	d, _ := newTestDocker(t, eng, Config{})
	res, err := d.Run(context.Background(), baseSpec())
	if err != nil {
		t.Fatal(err)
	}
	if !res.NeverStarted || res.ExitCode != 127 || !strings.Contains(res.StartError, "/nope") {
		t.Fatalf("result %+v", res)
	}
	if eng.count() != 0 {
		t.Fatal("container not removed")
	}

	eng = newFakeEngine()
	eng.startErr = errors.New("something else")
	d, _ = newTestDocker(t, eng, Config{})
	if res, _ := d.Run(context.Background(), baseSpec()); !res.NeverStarted || res.ExitCode != 125 {
		t.Fatalf("unclassified start failure: %+v", res)
	}
}

func TestRunEntrypointExitCodesMeanNeverStarted(t *testing.T) {
	for code, never := range map[int64]bool{1: false, 124: false, 125: true, 126: true, 127: true, 128: false} {
		eng := newFakeEngine()
		eng.exitCode = code
		d, _ := newTestDocker(t, eng, Config{})
		res, err := d.Run(context.Background(), baseSpec())
		if err != nil || res.NeverStarted != never || res.ExitCode != int(code) {
			t.Fatalf("exit %d: err %v res %+v", code, err, res)
		}
	}
}

func TestRunTimeout(t *testing.T) {
	checkNoLeak(t)
	t.Run("StopTakes", func(t *testing.T) {
		eng := newFakeEngine()
		eng.exitAfter = -1
		d, logs := newTestDocker(t, eng, Config{StopGrace: 2 * time.Second})
		spec := baseSpec()
		spec.Timeout = 20 * time.Millisecond
		start := time.Now()
		res, err := d.Run(context.Background(), spec)
		if err != nil || !res.TimedOut || res.ExitCode != 143 || res.Cancelled {
			t.Fatalf("err %v res %+v", err, res)
		}
		if time.Since(start) > 10*time.Second { // a hang-catching bound: the job never exits by itself
			t.Fatal("timeout not honoured")
		}
		calls := eng.callLog()
		if !slices.Contains(calls, "stop 2s") || slices.Contains(calls, "kill") || eng.count() != 0 {
			t.Fatalf("calls %q", calls)
		}
		if !strings.Contains(logs.String(), `"msg":"job_timed_out"`) || !strings.Contains(logs.String(), `"host":"w1"`) {
			t.Fatalf("log lacks job_timed_out with host: %s", logs)
		}
	})
	t.Run("StopFailsThenKill", func(t *testing.T) {
		eng := newFakeEngine()
		eng.exitAfter = -1
		eng.stopFails = true
		d, _ := newTestDocker(t, eng, Config{})
		spec := baseSpec()
		spec.Timeout = 20 * time.Millisecond
		res, err := d.Run(context.Background(), spec)
		if err != nil || !res.TimedOut || res.ExitCode != 137 {
			t.Fatalf("err %v res %+v", err, res)
		}
		if !slices.Contains(eng.callLog(), "kill") {
			t.Fatalf("no kill after a failed stop: %q", eng.callLog())
		}
	})
}

func TestRunCancelled(t *testing.T) {
	checkNoLeak(t)
	eng := newFakeEngine()
	eng.exitAfter = -1
	eng.stdout = []byte("working\n")
	d, _ := newTestDocker(t, eng, Config{})
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(30*time.Millisecond, cancel)
	res, err := d.Run(ctx, baseSpec())
	if !errors.Is(err, context.Canceled) || !res.Cancelled || res.TimedOut || res.NeverStarted || res.ExitCode != 143 {
		t.Fatalf("err %v res %+v", err, res)
	}
	if !bytes.Contains(res.Tail, []byte("working")) || eng.count() != 0 {
		t.Fatalf("tail %q, %d containers left", res.Tail, eng.count())
	}

	// Cancelled before anything was created: nothing ran.
	eng = newFakeEngine()
	d, _ = newTestDocker(t, eng, Config{})
	done, cancelNow := context.WithCancel(context.Background())
	cancelNow()
	res, err = d.Run(done, baseSpec())
	if !errors.Is(err, context.Canceled) || !res.Cancelled || !res.NeverStarted {
		t.Fatalf("err %v res %+v", err, res)
	}
	if got := eng.callLog(); !slices.Equal(got, []string{"imageID job:latest"}) {
		t.Fatalf("calls after an early cancel: %q", got)
	}
}

func TestRunStopDidNotTake(t *testing.T) {
	checkNoLeak(t)
	eng := newFakeEngine()
	eng.exitAfter = -1
	eng.unstoppable = true
	d, logs := newTestDocker(t, eng, Config{})
	d.exitWait = 50 * time.Millisecond
	spec := baseSpec()
	spec.Timeout = 20 * time.Millisecond
	start := time.Now()
	res, err := d.Run(context.Background(), spec)
	if err != nil || !res.TimedOut || res.ExitCode != -1 {
		t.Fatalf("err %v res %+v", err, res)
	}
	if time.Since(start) > 10*time.Second || !strings.Contains(logs.String(), "job_stop_did_not_take") {
		t.Fatalf("took %v; log %s", time.Since(start), logs)
	}
	if eng.count() != 0 {
		t.Fatal("the force-remove did not run")
	}
}

func TestRunOutputDrainBounded(t *testing.T) {
	checkNoLeak(t)
	eng := newFakeEngine()
	eng.streamHangs = true
	eng.stdout = []byte(`{"event":"exit","turns":1}` + "\n")
	d, logs := newTestDocker(t, eng, Config{})
	d.drainWait = 50 * time.Millisecond
	start := time.Now()
	res, err := d.Run(context.Background(), baseSpec())
	if err != nil || res.ExitCode != 0 || res.Telemetry == nil || res.Telemetry.Turns != 1 {
		t.Fatalf("err %v res %+v", err, res)
	}
	if time.Since(start) > 10*time.Second || !strings.Contains(logs.String(), "job_output_drain_timeout") {
		t.Fatalf("took %v; log %s", time.Since(start), logs)
	}
}

func TestRunWaitLost(t *testing.T) {
	checkNoLeak(t)
	eng := newFakeEngine()
	eng.exitAfter = -1
	eng.waitErr = errors.New("connection reset")
	d, _ := newTestDocker(t, eng, Config{})
	res, err := d.Run(context.Background(), baseSpec())
	if err == nil || !strings.Contains(err.Error(), "connection reset") {
		t.Fatalf("err %v", err)
	}
	if res.ExitCode != 143 || !slices.Contains(eng.callLog(), "stop 5s") || eng.count() != 0 {
		t.Fatalf("res %+v calls %q", res, eng.callLog())
	}
}

func TestRunOutputFile(t *testing.T) {
	eng := newFakeEngine()
	eng.stdout = bytes.Repeat([]byte("out line\n"), 10000)
	eng.stderr = []byte("err line\n")
	d, _ := newTestDocker(t, eng, Config{TailBytes: 100})
	spec := baseSpec()
	spec.OutputFile = filepath.Join(t.TempDir(), "job.log")
	if err := os.WriteFile(spec.OutputFile, []byte("old content that is longer"), 0o644); err != nil {
		t.Fatal(err)
	}
	res, err := d.Run(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(spec.OutputFile)
	if err != nil {
		t.Fatal(err)
	}
	if len(data) != 90000+9 || !bytes.HasSuffix(data, []byte("err line\n")) {
		t.Fatalf("output file has %d bytes", len(data))
	}
	if fi, _ := os.Stat(spec.OutputFile); fi.Mode().Perm() != 0o600 {
		t.Fatalf("output file mode %v", fi.Mode().Perm())
	}
	if len(res.Tail) != 100 || !res.TailTruncated {
		t.Fatalf("tail %d bytes truncated=%v", len(res.Tail), res.TailTruncated)
	}

	spec.OutputFile = filepath.Join(t.TempDir(), "missing-dir", "job.log")
	if _, err := d.Run(context.Background(), spec); err == nil {
		t.Fatal("unwritable output file accepted")
	}
}

func TestReap(t *testing.T) {
	eng := newFakeEngine()
	a1 := eng.add("pi-job-a1", map[string]string{LabelWorker: "w1"})
	a2 := eng.add("anything", map[string]string{LabelWorker: "w1"})
	broken := eng.add("pi-job-broken", map[string]string{LabelWorker: "w1"})
	otherWorker := eng.add("pi-job-b", map[string]string{LabelWorker: "w2"})
	prefixTwin := eng.add("pi-job-c", map[string]string{LabelWorker: "w1-other"})
	unlabelled := eng.add("pi-job-x", nil)
	eng.removeErr = map[string]error{broken: errors.New("device busy")}
	d, logs := newTestDocker(t, eng, Config{})

	rep, err := d.Reap(context.Background(), "w1")
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Enumerated || rep.Found != 3 || rep.Removed != 2 || len(rep.Errors) != 1 || rep.Clean() {
		t.Fatalf("report %+v", rep)
	}
	for _, id := range []string{a1, a2} {
		if eng.get(id) != nil {
			t.Fatalf("%s not reaped", id)
		}
	}
	for _, id := range []string{broken, otherWorker, prefixTwin, unlabelled} {
		if eng.get(id) == nil {
			t.Fatalf("%s reaped", id)
		}
	}
	if strings.Count(logs.String(), `"msg":"reaped_container"`) != 2 {
		t.Fatalf("log: %s", logs)
	}

	eng.removeErr = nil
	if rep, _ := d.Reap(context.Background(), "w1"); !rep.Clean() || rep.Found != 1 {
		t.Fatalf("second sweep %+v", rep)
	}

	eng.listErr = errors.New("daemon down")
	rep, err = d.Reap(context.Background(), "w1")
	if err == nil || rep.Enumerated || rep.Clean() {
		t.Fatalf("unlisted sweep: %+v %v", rep, err)
	}
	if _, err := d.Reap(context.Background(), ""); !errors.Is(err, ErrInvalidSpec) {
		t.Fatalf("empty worker: %v", err)
	}
}

func TestImageQueries(t *testing.T) {
	eng := newFakeEngine()
	d, _ := newTestDocker(t, eng, Config{})
	ctx := context.Background()
	if ok, err := d.ImagePresent(ctx, "job:latest"); !ok || err != nil {
		t.Fatalf("present: %v %v", ok, err)
	}
	if ok, err := d.ImagePresent(ctx, "nope:1"); ok || err != nil {
		t.Fatalf("absent: %v %v", ok, err)
	}
	if id, err := d.ImageDigest(ctx, "job:latest"); id != "sha256:feed" || err != nil {
		t.Fatalf("digest: %q %v", id, err)
	}
	if _, err := d.ImageDigest(ctx, "nope:1"); !errors.Is(err, ErrImageMissing) {
		t.Fatalf("digest of absent: %v", err)
	}
	if _, err := d.ImagePresent(ctx, ""); !errors.Is(err, ErrInvalidSpec) {
		t.Fatalf("empty ref: %v", err)
	}
}

func TestConfig(t *testing.T) {
	for _, bad := range []Config{{Memory: -1}, {Memory: 100}, {CPUs: -1}, {CPUs: math.NaN()}, {Timeout: -1}, {StopGrace: -1}, {TailBytes: -1}} {
		if _, err := newDocker(newFakeEngine(), bad); err == nil {
			t.Errorf("config %+v accepted", bad)
		}
	}
	d, err := newDocker(newFakeEngine(), Config{})
	if err != nil {
		t.Fatal(err)
	}
	c := d.cfg
	if c.Memory != 4<<30 || c.CPUs != 2 || c.Timeout != 30*time.Minute || c.StopGrace != 5*time.Second || c.TailBytes != 16<<10 || c.Logger == nil {
		t.Fatalf("defaults %+v", c)
	}
	if _, err := NewDocker(nil, Config{}); err == nil {
		t.Fatal("nil client accepted")
	}
}

// A kept container outlives its run until the caller removes it; Reap then
// reports the exit code of an exited one (never of one created and never
// started, or still running) and the end of its stdout from the engine's
// log, before removing it.
func TestKeptContainerAndReapedExit(t *testing.T) {
	eng := newFakeEngine()
	eng.exitCode = 3
	eng.stdout = []byte(strings.Repeat("chatter\n", 2000) + `{"event":"exit","turns":5}` + "\n")
	d, _ := newTestDocker(t, eng, Config{})
	spec := baseSpec()
	spec.KeepContainer = true
	res, err := d.Run(context.Background(), spec)
	if err != nil || res.ExitCode != 3 {
		t.Fatalf("run %+v %v", res, err)
	}
	if eng.count() != 1 {
		t.Fatalf("%d containers after a kept run, want 1", eng.count())
	}
	created := eng.add("pi-job-created", map[string]string{LabelWorker: spec.Worker, LabelJob: "never-started"})
	_ = created
	running := eng.add("pi-job-running", map[string]string{LabelWorker: spec.Worker, LabelJob: "still-running"})
	eng.get(running).started = true

	rep, err := d.Reap(context.Background(), spec.Worker)
	if err != nil || rep.Found != 3 || rep.Removed != 3 {
		t.Fatalf("reap %+v %v", rep, err)
	}
	if len(rep.Exited) != 1 || rep.Exited[0].JobID != spec.JobID || rep.Exited[0].ExitCode != 3 || rep.Exited[0].Container != res.Container {
		t.Fatalf("exited %+v", rep.Exited)
	}
	if tel, ok := container.ParseExitLine(rep.Exited[0].Stdout); !ok || tel.Turns != 5 || len(rep.Exited[0].Stdout) != container.TelemetryScanBytes {
		t.Fatalf("exited container's stdout: %d bytes, exit line %+v %v; want its last %d bytes with the exit line", len(rep.Exited[0].Stdout), tel, ok, container.TelemetryScanBytes)
	}

	// RemoveContainer removes a kept one; one already gone is fine.
	res, err = d.Run(context.Background(), spec)
	if err != nil || eng.count() != 1 {
		t.Fatalf("run %+v %v, %d containers", res, err, eng.count())
	}
	if err := d.RemoveContainer(context.Background(), res.Container); err != nil || eng.count() != 0 {
		t.Fatalf("remove: %v, %d left", err, eng.count())
	}
	if err := d.RemoveContainer(context.Background(), res.Container); err != nil {
		t.Fatalf("second remove: %v", err)
	}
}

// ReapRunning removes running containers and leaves exited ones, reported.
func TestReapRunningLeavesExited(t *testing.T) {
	eng := newFakeEngine()
	eng.exitCode = 0
	d, _ := newTestDocker(t, eng, Config{})
	spec := baseSpec()
	spec.KeepContainer = true
	if _, err := d.Run(context.Background(), spec); err != nil {
		t.Fatal(err)
	}
	running := eng.add("pi-job-running", map[string]string{LabelWorker: spec.Worker, LabelJob: "still-running"})
	eng.get(running).started = true
	rep, err := d.ReapRunning(context.Background(), spec.Worker)
	if err != nil || rep.Found != 1 || rep.Removed != 1 || !rep.Clean() || len(rep.Exited) != 1 || rep.Exited[0].JobID != spec.JobID {
		t.Fatalf("reap %+v %v", rep, err)
	}
	if eng.count() != 1 || eng.get(running) != nil {
		t.Fatalf("%d containers left, want the exited one", eng.count())
	}
}

// The run keeps the highest memory and CPU time the engine's readings show,
// and asks the engine whether the kernel killed the job for memory whatever
// its exit code (a child killed, the job's own process exiting 1).
func TestRunMeasuresUsage(t *testing.T) {
	checkNoLeak(t)
	eng := newFakeEngine()
	eng.exitAfter = 20 * time.Millisecond
	eng.exitCode = 1
	eng.oomKilled = true
	eng.samples = []usageSample{{MemoryBytes: 70 << 20, CPUNanos: 2e6}, {MemoryBytes: 90 << 20, CPUNanos: 5e6}, {MemoryBytes: 10 << 20, CPUNanos: 0}}
	d, logs := newTestDocker(t, eng, Config{})
	spec := baseSpec()
	spec.Memory = 64 << 20
	res, err := d.Run(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	if res.PeakMemoryBytes != 90<<20 || res.CPUTime != 5*time.Millisecond || !res.OOMKilled {
		t.Fatalf("peak %d, cpu %s, oom %v", res.PeakMemoryBytes, res.CPUTime, res.OOMKilled)
	}
	if !strings.Contains(logs.String(), `"peak_memory_bytes":94371840`) {
		t.Fatalf("the exit line logs no peak: %s", logs.String())
	}
	// Killed for memory between two readings: it reached its limit.
	eng.samples = eng.samples[:1]
	spec.Memory = 80 << 20
	if res, _ := d.Run(context.Background(), spec); res.PeakMemoryBytes != 80<<20 {
		t.Fatalf("peak %d, want the 80 MiB limit", res.PeakMemoryBytes)
	}
}

// Readings that cannot be had cost the figures, never the run.
func TestRunWithoutUsage(t *testing.T) {
	checkNoLeak(t)
	eng := newFakeEngine()
	eng.usageErr = errors.New("stats refused")
	d, logs := newTestDocker(t, eng, Config{})
	res, err := d.Run(context.Background(), baseSpec())
	if err != nil || res.ExitCode != 0 || res.PeakMemoryBytes != 0 || res.CPUTime != 0 || res.OOMKilled {
		t.Fatalf("%+v %v", res, err)
	}
	if !strings.Contains(logs.String(), "job_container_usage_unread") {
		t.Fatalf("no warning: %s", logs.String())
	}
}
