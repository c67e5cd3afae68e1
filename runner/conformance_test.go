package runner_test

import (
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pidispatch/pidispatch/dispatch/container"
	"github.com/pidispatch/pidispatch/dispatch/dispatchtest"
	"github.com/pidispatch/pidispatch/runner"
)

// The Runtime suite of package dispatchtest against real containers of the
// test job image, so the fake runtime the Worker's tests use behaves as the
// Docker runtime does.
func TestConformanceRuntime(t *testing.T) {
	dispatchtest.TestRuntime(t, func(t *testing.T) dispatchtest.RuntimeHarness {
		b := setup(t, runner.Config{})
		return dispatchtest.RuntimeHarness{
			Runtime: b.d, Worker: b.worker, MissingImage: unique("pi-job-missing") + ":none",
			Spec: func(jobID string, exit int, sleep time.Duration) container.Spec {
				s := b.spec(map[string]string{"JOB_EXIT_CODE": strconv.Itoa(exit), "JOB_SLEEP": sleep.String()})
				s.JobID = unique(jobID)
				return s
			},
			Containers: func() []string {
				var names []string
				for _, c := range byLabel(t, b.c, runner.LabelWorker, b.worker) {
					for _, n := range c.Names {
						names = append(names, strings.TrimPrefix(n, "/"))
					}
				}
				slices.Sort(names)
				return names
			},
		}
	})
}
