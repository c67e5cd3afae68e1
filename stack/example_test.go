package stack_test

import (
	"context"
	"log/slog"
	"os"

	"github.com/pidispatch/pidispatch/config"
	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/stack"
)

// A service builds the real worker from the environment and runs it until
// its context ends; an Option changes a part, here adding a task of its own
// that runs beside the worker's.
func ExampleBuild() {
	cfg, err := config.Load(os.Getenv)
	if err != nil {
		slog.Error("config", "err", err)
		return
	}
	logger := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	s, err := stack.Build(context.Background(), cfg, logger, dispatch.Tuning{Version: "my-service"},
		func(d *dispatch.Deps) { d.Background = append(d.Background, myTask{}) })
	if err != nil {
		logger.Error("boot", "err", err)
		return
	}
	defer s.Close()
	_ = s.Worker.Run(context.Background())
}

// myTask is a Background part the service adds to the worker.
type myTask struct{}

func (myTask) Run(ctx context.Context) error { <-ctx.Done(); return nil }
