package stack_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/pidispatch/pidispatch/config"
	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/stack"
)

func metricsStack(t *testing.T, db *livetest.ValkeyDB, metricsAddr string, extra ...string) *stack.Stack {
	t.Helper()
	env := map[string]string{"VALKEY_URL": db.URL, "PI_UNSIGNED_QUEUES": "*", "PI_WORKER_NAME": fmt.Sprintf("mx-%d", db.DB), "PI_LOGS_DIR": t.TempDir(),
		"PI_JOB_IMAGE": "never-pulled:1", "PI_METRICS_ADDR": metricsAddr}
	for i := 0; i+1 < len(extra); i += 2 {
		env[extra[i]] = extra[i+1]
	}
	cfg, err := config.Load(func(k string) string { return env[k] })
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
	var ce *config.ConfigError
	if srv != nil || !errors.As(err, &ce) || ce.Var != "PI_METRICS_ADDR" || ce.Value != ln.Addr().String() {
		t.Fatalf("ListenMetrics on a taken port = %v, %v; want a ConfigError naming PI_METRICS_ADDR", srv, err)
	}
}

// The polled gauges read the real budget: container starts of every count
// window against its cap, and the dollar windows' spent, reserved and cap.
func TestMetricsBudgetWindows(t *testing.T) {
	db := livetest.Valkey(t)
	s := metricsStack(t, db, "127.0.0.1:0", "PI_DAILY_CAP", "40", "PI_WEEKLY_CAP", "100", "PI_MONTHLY_CAP", "500",
		"PI_MAX_COST_USD", "1.5", "PI_DAILY_COST_USD", "5", "PI_MONTHLY_COST_USD", "200")
	ctx := context.Background()
	if _, err := s.Budget.Reserve(ctx, "scope-a", nil); err != nil {
		t.Fatal(err)
	}
	if r, err := s.Dollars.ReserveDollars(ctx, "job-a", "scope-a", nil, 1_500_000, time.Minute); err != nil || !r.Granted {
		t.Fatalf("reserve dollars: %+v %v", r, err)
	}
	host := fmt.Sprintf("mx-%d", db.DB)
	want := strings.ReplaceAll(`
# HELP pidispatch_container_starts Container starts counted in the current budget window.
# TYPE pidispatch_container_starts gauge
pidispatch_container_starts{host="H",window="day"} 1
pidispatch_container_starts{host="H",window="month"} 1
pidispatch_container_starts{host="H",window="week"} 1
# HELP pidispatch_container_starts_cap Cap of container starts of a budget window.
# TYPE pidispatch_container_starts_cap gauge
pidispatch_container_starts_cap{host="H",window="day"} 40
pidispatch_container_starts_cap{host="H",window="month"} 500
pidispatch_container_starts_cap{host="H",window="week"} 100
# HELP pidispatch_spend_cap_dollars Dollar cap of a spend window.
# TYPE pidispatch_spend_cap_dollars gauge
pidispatch_spend_cap_dollars{host="H",window="day"} 5
pidispatch_spend_cap_dollars{host="H",window="month"} 200
# HELP pidispatch_spend_reserved_dollars Dollars running jobs hold reserved in the current spend window.
# TYPE pidispatch_spend_reserved_dollars gauge
pidispatch_spend_reserved_dollars{host="H",window="day"} 1.5
pidispatch_spend_reserved_dollars{host="H",window="month"} 1.5
# HELP pidispatch_spend_used_dollars Dollars settled in the current spend window.
# TYPE pidispatch_spend_used_dollars gauge
pidispatch_spend_used_dollars{host="H",window="day"} 0
pidispatch_spend_used_dollars{host="H",window="month"} 0
`, `"H"`, `"`+host+`"`)
	names := []string{"pidispatch_container_starts", "pidispatch_container_starts_cap", "pidispatch_spend_cap_dollars",
		"pidispatch_spend_reserved_dollars", "pidispatch_spend_used_dollars"}
	if err := testutil.GatherAndCompare(s.Metrics.Registry(), strings.NewReader(want), names...); err != nil {
		t.Fatal(err)
	}
}
