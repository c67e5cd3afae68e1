package queuebench_test

import (
	"bytes"
	"context"
	"net"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pidispatch/pidispatch/test/bench/queuebench"
)

// requireTools skips the test when redis-server, node or the node_modules
// of bench/bullmq (BullMQ 5) or bench/bullmq6 (BullMQ 6) are missing, or fails it when PIDISPATCH_REQUIRE_LIVE=1 (CI).
func requireTools(t *testing.T, bullmq bool) {
	t.Helper()
	var missing []string
	if _, err := exec.LookPath("redis-server"); err != nil {
		missing = append(missing, "redis-server")
	}
	if bullmq {
		if _, err := exec.LookPath("node"); err != nil {
			missing = append(missing, "node")
		}
		for _, dir := range []string{"bullmq", "bullmq6"} {
			if _, err := os.Stat("../" + dir + "/node_modules/bullmq/package.json"); err != nil {
				missing = append(missing, "bench/"+dir+"/node_modules (npm ci)")
			}
		}
	}
	if len(missing) == 0 {
		return
	}
	if os.Getenv("PIDISPATCH_REQUIRE_LIVE") == "1" {
		t.Fatalf("PIDISPATCH_REQUIRE_LIVE=1 but missing: %s", strings.Join(missing, ", "))
	}
	t.Skipf("missing: %s", strings.Join(missing, ", "))
}

func TestRun_SmokeAllSystemsOnPrivateServer(t *testing.T) {
	requireTools(t, true)
	baseline := runtime.NumGoroutine()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const jobs, probes, rounds = 200, 20, 2
	rep, err := queuebench.Run(ctx, queuebench.Config{
		Jobs:            jobs,
		LatencyJobs:     probes,
		CeilingDuration: 200 * time.Millisecond,
		NodeDir:         "../bullmq",
		Node6Dir:        "../bullmq6",
		Script:          "../bench.js",
		PhaseTimeout:    time.Minute,
		Rounds:          rounds,
	})
	if err != nil {
		t.Fatal(err)
	}
	var table bytes.Buffer
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", table.String())

	if !rep.Private || !strings.HasPrefix(rep.ServerVersion, "redis ") && !strings.HasPrefix(rep.ServerVersion, "valkey ") {
		t.Errorf("server: private %v, version %q", rep.Private, rep.ServerVersion)
	}
	for _, system := range []string{queuebench.SystemOurs, queuebench.SystemBullMQ, queuebench.SystemBullMQ6, queuebench.SystemAsynq} {
		res := rep.Result(system)
		if res == nil {
			t.Fatalf("no result for %s", system)
		}
		tp, lat := res.Throughput, res.Latency
		if tp.Jobs != jobs || tp.JobsPerSec() <= 0 || tp.Enqueue <= 0 {
			t.Errorf("%s throughput: %+v", system, tp)
		}
		if len(res.Rounds) != rounds || !slices.ContainsFunc(res.Rounds, func(r queuebench.Throughput) bool { return r.Drain == tp.Drain }) {
			t.Errorf("%s: %d rounds, reported %+v not among them", system, len(res.Rounds), tp)
		}
		// Each drain ran real commands on the server: at least one script
		// call per job.
		if n := tp.Server.Commands(); n < jobs || tp.Server.ScriptTime() <= 0 || tp.Server.CPU <= 0 {
			t.Errorf("%s server work: %d commands, %v in scripts, %v CPU", system, n, tp.Server.ScriptTime(), tp.Server.CPU)
		}
		if lat.Samples != probes || lat.P50 <= 0 || lat.P50 > lat.P99 || lat.P99 > lat.Max || lat.Max > time.Minute {
			t.Errorf("%s latency: %+v", system, lat)
		}
	}
	// Ours takes at most one script call per job (CompleteAndFetch, whose
	// concurrent calls share script calls) plus the Consumer's few fetches
	// and waits.
	c := rep.Ceiling
	if c == nil || c.CallsPerJob <= 0 || c.CallsPerJob > 1.5 || c.Calls["evalsha"]+c.Calls["eval"] == 0 {
		t.Fatalf("ceiling: %+v", c)
	}
	if c.EvalshaPerSec <= 0 || c.Before <= 0 || c.After <= 0 || c.JobsPerSec <= 0 || c.Fraction <= 0 || c.PerCallFraction <= 0 || len(c.Rounds) != rounds {
		t.Errorf("ceiling: %+v", c)
	}
	for _, peer := range []string{queuebench.SystemBullMQ, queuebench.SystemBullMQ6} {
		if r, each, ok := rep.Ratio(peer); !ok || r <= 0 || len(each) != rounds {
			t.Errorf("ours/%s ratio: %v %v %v", peer, r, each, ok)
		}
	}
	for _, want := range []string{"ours / bullmq throughput", "ours / bullmq6 throughput", "ours / asynq throughput", "ceiling: EVALSHA", "at one script call per job", "median of 2 rounds", "ours pickup p99"} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("table lacks %q", want)
		}
	}

	// The private server is gone, and so is every goroutine Run started.
	if conn, err := net.DialTimeout("tcp", rep.Server, time.Second); err == nil {
		conn.Close()
		t.Errorf("private server %s still answers after Run", rep.Server)
	}
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > baseline && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > baseline {
		t.Errorf("%d goroutines outlive Run (baseline %d)", n, baseline)
	}
}

func TestRun_RefusesADatabaseThatHoldsKeys(t *testing.T) {
	requireTools(t, false)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv, err := queuebench.StartServer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer c.Close()
	if err := c.Set(ctx, "someone:else", "data", 0).Err(); err != nil {
		t.Fatal(err)
	}
	_, err = queuebench.Run(ctx, queuebench.Config{ValkeyURL: srv.URL(), Systems: []string{queuebench.SystemOurs}, Jobs: 10})
	if err == nil || !strings.Contains(err.Error(), "holds 1 keys") {
		t.Fatalf("Run on a database with data: %v", err)
	}
	if v, err := c.Get(ctx, "someone:else").Result(); err != nil || v != "data" {
		t.Fatalf("the key was touched: %q, %v", v, err)
	}
}

func TestRun_RejectsBadConfig(t *testing.T) {
	for _, cfg := range []queuebench.Config{
		{Jobs: -1},
		{Concurrency: 5000},
		{LatencyJobs: -3},
		{Spacing: -time.Millisecond},
		{Systems: []string{"ours", "sidekiq"}},
		{Systems: []string{""}},
		{Rounds: -1},
		{Rounds: 1000},
	} {
		if _, err := queuebench.Run(context.Background(), cfg); err == nil {
			t.Errorf("Run(%+v) accepted", cfg)
		}
	}
}

func TestStartServer_CloseStopsIt(t *testing.T) {
	requireTools(t, false)
	ctx := context.Background()
	srv, err := queuebench.StartServer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1, DialTimeout: time.Second})
	defer c.Close()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	if err := srv.Close(); err != nil {
		t.Fatal("second Close:", err)
	}
	if conn, err := net.DialTimeout("tcp", srv.Addr(), time.Second); err == nil {
		conn.Close()
		t.Fatal("server still accepts connections after Close")
	}
}
