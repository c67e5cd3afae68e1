package scriptcost

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestRun_CountsTheDrainOnly(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const jobs = 150
	rep, err := Run(ctx, Config{Jobs: jobs, Slots: 4})
	if errors.Is(err, ErrNoTools) {
		if os.Getenv("PIDISPATCH_REQUIRE_LIVE") == "1" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%.0f instructions, %d script calls, %d commands for %d jobs", rep.PerJob(), rep.ScriptCalls, rep.Commands, rep.Jobs)
	// The adds came before the counters were zeroed: only the takes and
	// completions are counted, each slot's first Fetch plus at most one
	// call per job.
	if rep.ScriptCalls < 1 || rep.ScriptCalls > jobs+4 {
		t.Errorf("script calls %d for %d jobs", rep.ScriptCalls, jobs)
	}
	// A take and a completion run at least a dozen commands per job.
	if rep.Commands < 10*jobs {
		t.Errorf("commands %d for %d jobs", rep.Commands, jobs)
	}
	if pj := rep.PerJob(); pj < 10_000 || pj > 10_000_000 {
		t.Errorf("instructions per job %.0f", pj)
	}
}

func TestRun_RejectsBadConfig(t *testing.T) {
	for _, cfg := range []Config{{Jobs: -1}, {Slots: -2}, {Slots: 5000}} {
		if _, err := Run(context.Background(), cfg); err == nil {
			t.Errorf("Run(%+v) accepted", cfg)
		}
	}
}

func TestCountCommands(t *testing.T) {
	info := "# Commandstats\r\n" +
		"cmdstat_evalsha:calls=40,usec=100,usec_per_call=2.50,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_eval:calls=2,usec=10,usec_per_call=5.00,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_hset:calls=80,usec=80,usec_per_call=1.00,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_info:calls=3,usec=80,usec_per_call=26.67,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_config|resetstat:calls=1,usec=5,usec_per_call=5.00,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_junk:calls=x\r\n"
	scripts, all := countCommands(info)
	if scripts != 42 || all != 122 {
		t.Fatalf("countCommands = %d, %d; want 42, 122", scripts, all)
	}
}

func TestReadTotal(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{
		"totals":  "version: 1\ncreator: callgrind-3.19.0\nevents: Ir\nfn=main\n10 5\nsummary: 999\ntotals: 1234567\n",
		"summary": "events: Ir\nsummary: 42\n",
	} {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := readTotal(p)
		want := map[string]int64{"totals": 999, "summary": 42}[name]
		if err != nil || got != want {
			t.Errorf("%s: readTotal = %d, %v; want %d", name, got, err, want)
		}
	}
	p := filepath.Join(dir, "empty")
	if err := os.WriteFile(p, []byte("events: Ir\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := readTotal(p); err == nil {
		t.Error("readTotal of a file without totals: no error")
	}
}
