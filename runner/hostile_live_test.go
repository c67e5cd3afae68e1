package runner_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/pidispatch/pidispatch/dispatch/container"
	"github.com/pidispatch/pidispatch/runner"
)

// TestLiveHostileOutputCapped runs a job that prints 300 MB: the output file
// keeps only its tail, within the cap, and still ends with the exit line the
// telemetry is read from; the engine's own log of the job is capped too.
func TestLiveHostileOutputCapped(t *testing.T) {
	t.Parallel()
	const printed = 300 << 20
	b := setup(t, runner.Config{OutputMax: runner.OutputMaxDefault})
	spec := b.spec(map[string]string{"JOB_STDOUT_BYTES": strconv.Itoa(printed), "JOB_PRINT_EXIT_LINE": "1"})
	spec.KeepContainer = true
	spec.OutputFile = filepath.Join(t.TempDir(), "output.log")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	res, err := b.d.Run(ctx, spec)
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("run: %v %+v", err, res)
	}
	defer func() { _ = b.d.RemoveContainer(context.Background(), res.Container) }()
	if res.Telemetry == nil || res.Telemetry.Tokens != 1234 {
		t.Fatalf("telemetry %+v", res.Telemetry)
	}
	fi, err := os.Stat(spec.OutputFile)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() > runner.OutputMaxDefault || fi.Size() < runner.OutputMaxDefault/2 {
		t.Fatalf("output file holds %d bytes of %d printed; want at most the cap %d and at least half of it", fi.Size(), printed, runner.OutputMaxDefault)
	}
	data, err := os.ReadFile(spec.OutputFile)
	if err != nil {
		t.Fatal(err)
	}
	// A restarted worker reads the exit line from this file's tail.
	if tel, ok := container.ParseExitLine(data[len(data)-container.TelemetryScanBytes:]); !ok || tel.Tokens != 1234 {
		t.Fatalf("no exit line in the output file's tail: %q", data[len(data)-200:])
	}

	ins, err := b.c.ContainerInspect(context.Background(), res.Container, client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	lc := ins.Container.HostConfig.LogConfig
	size, _ := strconv.ParseInt(lc.Config["max-size"], 10, 64)
	files, _ := strconv.ParseInt(lc.Config["max-file"], 10, 64)
	if lc.Type != "none" && (lc.Type != "json-file" || size <= 0 || files <= 0 || size*files > 64<<20) {
		t.Fatalf("the engine's log of a job is neither off nor capped at 64 MiB: %+v", lc)
	}
	// Where the daemon's files are visible (a local daemon run as root), the
	// log files themselves are within the cap.
	if p := ins.Container.LogPath; p != "" {
		var total int64
		seen := false
		for _, f := range []string{p, p + ".1"} {
			if fi, err := os.Stat(f); err == nil {
				total, seen = total+fi.Size(), true
			}
		}
		if seen && total > 64<<20 {
			t.Fatalf("engine log holds %d bytes", total)
		}
		if !seen {
			t.Logf("engine log files not visible here (%s); checked the log configuration only", p)
		}
	}
}

// TestLiveHostileContainerLimits runs a job that tries to write to its root
// file system, opens files without end and reads its cgroup: the root is
// read-only with a writable /tmp, the open files are bounded, the job sees
// only its own cgroup, and it has no swap beyond its memory.
func TestLiveHostileContainerLimits(t *testing.T) {
	t.Parallel()
	b := setup(t, runner.Config{})
	spec := b.spec(map[string]string{
		"JOB_WRITE_ROOT": "1",
		"JOB_OPEN_FILES": "100000",
		"JOB_SHOW_FILE":  "/proc/self/cgroup",
	})
	spec.KeepContainer = true
	res, err := b.d.Run(runCtx(t), spec)
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("run: %v %+v\n%s", err, res, res.Tail)
	}
	defer func() { _ = b.d.RemoveContainer(context.Background(), res.Container) }()
	out := string(res.Tail)
	if !strings.Contains(out, "write / failed") || !strings.Contains(out, "read-only file system") {
		t.Errorf("the job wrote to its root file system:\n%s", out)
	}
	if !strings.Contains(out, "write /tmp ok") {
		t.Errorf("the job could not write /tmp:\n%s", out)
	}
	if want := "opened " + strconv.Itoa(runner.NofileLimit-3) + " of 100000 files"; !strings.Contains(out, "of 100000 files") || strings.Contains(out, "opened 100000 ") {
		t.Errorf("open files not bounded (about %q expected):\n%s", want, out)
	}
	// With a private cgroup namespace the job's cgroup paths are its own
	// root; on the host's namespace they name the engine's hierarchy.
	if i := strings.Index(out, "file /proc/self/cgroup:"); i < 0 {
		t.Errorf("cgroup not shown:\n%s", out)
	} else if cg := out[i:]; strings.Contains(cg, "docker") || strings.Contains(cg, ".scope") {
		t.Errorf("the job sees the host's cgroup hierarchy:\n%s", cg)
	}
	ins, err := b.c.ContainerInspect(context.Background(), res.Container, client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	hc := ins.Container.HostConfig
	if hc.MemorySwap != hc.Memory {
		t.Errorf("memory+swap %d, memory %d: the job may swap", hc.MemorySwap, hc.Memory)
	}
	if !hc.ReadonlyRootfs || !hc.CgroupnsMode.IsPrivate() {
		t.Errorf("read-only root %v, cgroupns %q", hc.ReadonlyRootfs, hc.CgroupnsMode)
	}
}
