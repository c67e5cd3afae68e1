package fleetsim

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"
)

func requireRedisServer(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err == nil {
		return
	}
	if os.Getenv("PIDISPATCH_REQUIRE_LIVE") == "1" {
		t.Fatal("PIDISPATCH_REQUIRE_LIVE=1 but redis-server is not on PATH")
	}
	t.Skip("redis-server is not on PATH")
}

// TestRun_SmokeFiveHosts runs a fleet of 5 for a 2 s window on a private
// server, with the periods shortened so every operation happens in it, and
// checks that each did, without an error, and that nothing outlives Run.
func TestRun_SmokeFiveHosts(t *testing.T) {
	requireRedisServer(t)
	baseline := runtime.NumGoroutine()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	short := 400 * time.Millisecond
	rep, err := Run(ctx, Config{
		Hosts: []int{5},
		// The router reads the registry once per 5 s (enqueue.RouterConfig):
		// the window [4 s, 6 s] holds its second read.
		Warmup:      4 * time.Second,
		Duration:    2 * time.Second,
		ServerTimes: 500 * time.Millisecond,
		Rate:        20,
		JobTime:     20 * time.Millisecond,
		Periods:     Periods{Beat: short, Block: time.Second, Stalled: short, Rehome: short, Cron: short, Status: short, Dash: short},
	})
	if err != nil {
		t.Fatal(err)
	}
	var table bytes.Buffer
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", table.String())
	if len(rep.Runs) != 1 {
		t.Fatalf("%d runs, want 1", len(rep.Runs))
	}
	res := rep.Runs[0]
	for _, op := range opOrder {
		l := res.Ops[op]
		if l.Count == 0 || l.Errors > 0 {
			t.Errorf("%s: %d calls, %d errors; want calls and no error", op, l.Count, l.Errors)
		}
		if l.Count > 0 && (l.P50 <= 0 || l.P99 < l.P50 || l.Max < l.P99) {
			t.Errorf("%s: p50 %s, p99 %s, max %s are not ordered", op, l.P50, l.P99, l.Max)
		}
	}
	if res.ValkeyCPU <= 0 || res.ValkeyCPU > 2 {
		t.Errorf("valkey cpu share %.3f: want in (0, 2]", res.ValkeyCPU)
	}
	if res.UsedMemory <= 0 || res.Clients < 5 {
		t.Errorf("used_memory %d, clients %d: want memory and a client per host at least", res.UsedMemory, res.Clients)
	}
	var evalsha bool
	for _, c := range res.Commands {
		evalsha = evalsha || c.Command == "evalsha" && c.PerSec > 0
	}
	if !evalsha {
		t.Errorf("no evalsha among the commands: %+v", res.Commands)
	}
	if res.registryReadServer() == "-" {
		t.Errorf("no server time for the registry read in the slow log: %+v", res.Server)
	}
	if p := res.Probe; p == nil || p.Rows != 5 || p.Calls != DefaultProbeCalls || p.Client <= 0 || p.P99 < p.P50 {
		t.Errorf("probe %+v: want the 5 rows read %d times, timed", p, DefaultProbeCalls)
	}
	if !strings.Contains(table.String(), "routing decision read") {
		t.Errorf("the table lacks the routing decision read:\n%s", table.String())
	}
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > baseline+2 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > baseline+2 {
		buf := make([]byte, 1<<20)
		t.Errorf("%d goroutines after Run, %d before:\n%s", n, baseline, buf[:runtime.Stack(buf, true)])
	}
}

func TestRun_RefusesBadConfig(t *testing.T) {
	for name, cfg := range map[string]Config{
		"no sizes":      {},
		"zero hosts":    {Hosts: []int{0}},
		"negative rate": {Hosts: []int{1}, Rate: -1},
	} {
		if _, err := Run(context.Background(), cfg); !errors.Is(err, ErrBadConfig) {
			t.Errorf("%s: err %v, want ErrBadConfig", name, err)
		}
	}
}

func TestParseInfo(t *testing.T) {
	raw := "# Clients\r\nconnected_clients:12\r\n# Memory\r\nused_memory:1048576\r\n# CPU\r\nused_cpu_sys:1.5\r\nused_cpu_user:2.25\r\n" +
		"# Commandstats\r\ncmdstat_evalsha:calls=10,usec=500,usec_per_call=50.00\r\ncmdstat_info:calls=3,usec=30\r\n"
	s := parseInfo(raw)
	if s.clients != 12 || s.memory != 1<<20 || s.cpu != 3750*time.Millisecond || s.calls["evalsha"] != 10 || s.usec["evalsha"] != 500 {
		t.Fatalf("parsed %+v", s)
	}
	before := parseInfo("cmdstat_evalsha:calls=4,usec=200\r\ncmdstat_get:calls=1,usec=1\r\n")
	rates := commandRates(before, s, 2*time.Second)
	if len(rates) != 1 || rates[0].Command != "evalsha" || rates[0].PerSec != 3 || rates[0].UsecPerCall != 50 || rates[0].Share != 1 {
		t.Fatalf("rates %+v: want evalsha alone, 3/s, 50 us per call, all the time (info left out)", rates)
	}
}
