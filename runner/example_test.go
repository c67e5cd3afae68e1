package runner_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/moby/moby/client"

	"github.com/pidispatch/pidispatch/runner"
)

// Run one job and read its outcome the way a worker does: a missing image is
// a refusal before anything is spent; NeverStarted means nothing ran (release
// what was reserved); otherwise the exit code and the telemetry tell the rest.
func ExampleDocker_Run() {
	c, err := client.New(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	rt, err := runner.NewDocker(c, runner.Config{StopGrace: 5 * time.Second, Logger: slog.Default()})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx := context.Background()

	// At boot: remove whatever an earlier run of this worker left behind.
	if rep, err := rt.Reap(ctx, "worker-a"); err != nil || !rep.Clean() {
		fmt.Println("reap not proven:", err)
	}

	res, err := rt.Run(ctx, runner.Spec{
		JobID:        "local-0123456789abcdef",
		Worker:       "worker-a",
		Image:        "pi-job:latest",
		Env:          map[string]string{"PROVIDER_API_KEY": "from the secret resolver"},
		JobDir:       "/var/lib/pidispatch/jobs/local-0123456789abcdef",
		WorkspaceDir: "/home/me/project",
		Timeout:      30 * time.Minute,
	})
	switch {
	case errors.Is(err, runner.ErrImageMissing):
		fmt.Println("refused: job-image-missing")
	case res.NeverStarted:
		fmt.Println("never started:", res.ExitCode, res.StartError, err)
	case err != nil:
		fmt.Println("run failed:", err)
	case res.TimedOut:
		fmt.Println("timed out")
	default:
		fmt.Println("exit", res.ExitCode)
		if res.Telemetry != nil {
			fmt.Println("turns", res.Telemetry.Turns, "cost", res.Telemetry.Cost)
		}
	}
}
