package runner_test

import (
	"context"
	"testing"
	"time"

	"github.com/pidispatch/pidispatch/internal/image/jobimage"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/runner"
)

// usageTag is this test's own tag of the job image: built from this tree's
// program (which allocates on JOB_ALLOC_BYTES), never swapped by a run of
// another tree that rebuilds the shared test tag meanwhile.
var usageTag = "pidispatch-test-job:usage-" + jobimage.SourceDigest()

// TestLiveUsage runs real containers: one that holds 64 MiB is seen using
// at least that and some CPU time; one that asks for more than its memory
// limit is recorded killed for memory.
func TestLiveUsage(t *testing.T) {
	c := livetest.Docker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := jobimage.Ensure(ctx, c, usageTag); err != nil {
		t.Fatalf("test job image: %v", err)
	}
	d, err := runner.NewDocker(c, runner.Config{})
	if err != nil {
		t.Fatal(err)
	}
	worker := unique("test-worker")
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = d.Reap(ctx, worker)
	})
	spec := func(env map[string]string, memory int64) runner.Spec {
		return runner.Spec{JobID: unique("usage-job"), Worker: worker, Image: usageTag, Env: env, Memory: memory, CPUs: 1, Timeout: time.Minute}
	}

	t.Run("Peak", func(t *testing.T) {
		// Held for 3 s: the engine reads a running container about once a second.
		res, err := d.Run(runCtx(t), spec(map[string]string{"JOB_ALLOC_BYTES": "67108864", "JOB_SLEEP": "3s"}, 512<<20))
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("%+v %v\n%s", res, err, res.Tail)
		}
		if res.PeakMemoryBytes < 64<<20 || res.PeakMemoryBytes > 512<<20 || res.CPUTime <= 0 || res.OOMKilled {
			t.Fatalf("peak %d bytes, cpu %s, oom %v: want at least 64 MiB, some CPU, no OOM kill", res.PeakMemoryBytes, res.CPUTime, res.OOMKilled)
		}
		t.Logf("peak %d bytes, cpu %s", res.PeakMemoryBytes, res.CPUTime)
	})

	t.Run("OOMKilled", func(t *testing.T) {
		res, err := d.Run(runCtx(t), spec(map[string]string{"JOB_ALLOC_BYTES": "268435456", "JOB_SLEEP": "3s"}, 32<<20))
		if err != nil {
			t.Fatal(err)
		}
		if !res.OOMKilled || res.ExitCode == 0 || res.PeakMemoryBytes < 32<<20 {
			t.Fatalf("exit %d, oom %v, peak %d: want an OOM kill at its 32 MiB limit\n%s", res.ExitCode, res.OOMKilled, res.PeakMemoryBytes, res.Tail)
		}
		t.Logf("exit %d, peak %d bytes", res.ExitCode, res.PeakMemoryBytes)
	})
}
