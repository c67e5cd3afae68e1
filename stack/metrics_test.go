package stack_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/internal/livetest"
	"github.com/pidispatch/pidispatch/stack"
)

func metricsStack(t *testing.T, db *livetest.ValkeyDB, metricsAddr string) *stack.Stack {
	t.Helper()
	env := map[string]string{"VALKEY_URL": db.URL, "PI_WORKER_NAME": fmt.Sprintf("mx-%d", db.DB), "PI_LOGS_DIR": t.TempDir(),
		"PI_JOB_IMAGE": "never-pulled:1", "PI_METRICS_ADDR": metricsAddr}
	cfg, err := dispatch.LoadConfig(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	s, err := stack.Build(context.Background(), cfg, slog.New(slog.DiscardHandler), dispatch.Tuning{JobsDir: t.TempDir()},
		func(d *dispatch.Deps) { d.Runtime = &scriptedRuntime{} })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// Without PI_METRICS_ADDR nothing is served and no observer is added.
func TestMetricsOffServesNothing(t *testing.T) {
	s := metricsStack(t, livetest.Valkey(t), "")
	if s.Metrics != nil {
		t.Fatal("metrics built without PI_METRICS_ADDR")
	}
	if srv, err := s.ListenMetrics(); srv != nil || err != nil {
		t.Fatalf("ListenMetrics = %v, %v; want nil, nil", srv, err)
	}
}

// Ready answers ErrConsumersStopped until Run starts the consumers and
// after it stopped them, nil in between.
func TestMetricsReadyFollowsRun(t *testing.T) {
	s := metricsStack(t, livetest.Valkey(t), "127.0.0.1:0")
	if s.Metrics == nil {
		t.Fatal("no metrics with PI_METRICS_ADDR set")
	}
	ctx := context.Background()
	if err := s.Ready(ctx); !errors.Is(err, stack.ErrConsumersStopped) {
		t.Fatalf("Ready before Run = %v, want ErrConsumersStopped", err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- s.Worker.Run(runCtx) }()
	deadline := time.Now().Add(20 * time.Second)
	for s.Ready(ctx) != nil {
		if time.Now().After(deadline) {
			t.Fatalf("Ready while running: %v", s.Ready(ctx))
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := s.Ready(ctx); !errors.Is(err, stack.ErrConsumersStopped) {
		t.Fatalf("Ready after Run = %v, want ErrConsumersStopped", err)
	}
}

// A port in use is a ConfigError naming PI_METRICS_ADDR.
func TestMetricsListenTakenPort(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	s := metricsStack(t, livetest.Valkey(t), ln.Addr().String())
	srv, err := s.ListenMetrics()
	var ce *dispatch.ConfigError
	if srv != nil || !errors.As(err, &ce) || ce.Var != "PI_METRICS_ADDR" || ce.Value != ln.Addr().String() {
		t.Fatalf("ListenMetrics on a taken port = %v, %v; want a ConfigError naming PI_METRICS_ADDR", srv, err)
	}
}
