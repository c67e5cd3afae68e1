package runner_test

import (
	"context"
	"os"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/pidispatch/pidispatch/internal/image/jobimage"
	"github.com/pidispatch/pidispatch/runner"
)

// benchJob runs one quick job (exits 0 at once) through Run.
func benchJob(tb testing.TB, d *runner.Docker, worker string) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := d.Run(ctx, runner.Spec{JobID: unique("bench"), Worker: worker, Image: jobimage.TestTag})
	if err != nil || res.ExitCode != 0 {
		tb.Fatalf("run: %v %+v", err, res)
	}
}

// cliJob runs the same job with `docker run --rm` and the same isolation.
func cliJob(tb testing.TB, docker, worker string) {
	tb.Helper()
	id := unique("bench-cli")
	cmd := exec.Command(docker, "run", "--rm", "--pull=never", "--init",
		"--cap-drop=ALL", "--security-opt", "no-new-privileges", "--pids-limit=512", "--shm-size=1g",
		"--memory=4g", "--cpus=2",
		"--name", runner.ContainerName(id), "--label", runner.LabelJob+"="+id, "--label", runner.LabelWorker+"="+worker,
		jobimage.TestTag)
	if out, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("docker run: %v\n%s", err, out)
	}
}

func benchSetup(tb testing.TB) (*runner.Docker, string, string) {
	tb.Helper()
	b := setup(tb, runner.Config{})
	docker, err := exec.LookPath("docker")
	if err != nil {
		tb.Fatalf("docker CLI: %v", err)
	}
	return b.d, docker, b.worker
}

func BenchmarkRun(b *testing.B) {
	d, _, worker := benchSetup(b)
	benchJob(b, d, worker) // warm the image and the connection
	b.ResetTimer()
	for b.Loop() {
		benchJob(b, d, worker)
	}
}

func BenchmarkDockerCLIRun(b *testing.B) {
	_, docker, worker := benchSetup(b)
	cliJob(b, docker, worker)
	b.ResetTimer()
	for b.Loop() {
		cliJob(b, docker, worker)
	}
}

// TestRunOverheadReport measures Run against `docker run --rm` of the same
// image with the same isolation, alternating in one process so both see the
// same machine load, and reports the medians and the median per-pair ratio
// (target: at most 1.0). It runs only with PIDISPATCH_BENCH=1.
func TestRunOverheadReport(t *testing.T) {
	if os.Getenv("PIDISPATCH_BENCH") != "1" {
		t.Skip("benchmark report; set PIDISPATCH_BENCH=1")
	}
	d, docker, worker := benchSetup(t)
	benchJob(t, d, worker)
	cliJob(t, docker, worker)

	const pairs = 20
	var runs, clis, ratios []float64
	for i := range pairs {
		measure := func(f func()) float64 {
			start := time.Now()
			f()
			return float64(time.Since(start).Microseconds()) / 1000
		}
		var r, c float64
		// Alternate which goes first, so neither always follows the other.
		if i%2 == 0 {
			r = measure(func() { benchJob(t, d, worker) })
			c = measure(func() { cliJob(t, docker, worker) })
		} else {
			c = measure(func() { cliJob(t, docker, worker) })
			r = measure(func() { benchJob(t, d, worker) })
		}
		runs, clis, ratios = append(runs, r), append(clis, c), append(ratios, r/c)
	}
	median := func(v []float64) float64 {
		s := slices.Clone(v)
		slices.Sort(s)
		return (s[len(s)/2] + s[(len(s)-1)/2]) / 2
	}
	t.Logf("%d pairs: Run median %.1f ms, docker run --rm median %.1f ms, median ratio %.3f (min %.3f, max %.3f)",
		pairs, median(runs), median(clis), median(ratios), slices.Min(ratios), slices.Max(ratios))
	if r := median(ratios); r > 1.0 {
		t.Errorf("Run is slower than the docker CLI: median ratio %.3f > 1.0", r)
	}
}
