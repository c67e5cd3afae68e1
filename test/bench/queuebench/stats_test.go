package queuebench

import (
	"encoding/json"
	"slices"
	"testing"
	"time"
)

func TestSummarize_NearestRankPercentiles(t *testing.T) {
	var s []time.Duration
	for i := 100; i >= 1; i-- { // unsorted on purpose
		s = append(s, time.Duration(i)*time.Millisecond)
	}
	got := summarize(s)
	want := Latency{Samples: 100, P50: 50 * time.Millisecond, P99: 99 * time.Millisecond, Max: 100 * time.Millisecond}
	if got != want {
		t.Fatalf("summarize = %+v, want %+v", got, want)
	}
	if s[0] != 100*time.Millisecond {
		t.Fatal("summarize sorted the caller's slice")
	}
	if got := summarize([]time.Duration{7}); got.P50 != 7 || got.P99 != 7 || got.Max != 7 {
		t.Fatalf("one sample: %+v", got)
	}
	if got := summarize(nil); got != (Latency{}) {
		t.Fatalf("no samples: %+v", got)
	}
}

func TestParseInfo_CommandStatsAndCPU(t *testing.T) {
	before := parseInfo("# Commandstats\r\n" +
		"cmdstat_evalsha:calls=10,usec=400,usec_per_call=40.00,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_info:calls=3,usec=30,usec_per_call=10.00,rejected_calls=0,failed_calls=0\r\n" +
		"# CPU\r\nused_cpu_sys:1.500000\r\nused_cpu_user:2.250000\r\n")
	after := parseInfo("# Commandstats\r\n" +
		"cmdstat_evalsha:calls=30,usec=1200,usec_per_call=40.00,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_client|id:calls=1,usec=1,usec_per_call=1.00,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_info:calls=5,usec=50,usec_per_call=10.00,rejected_calls=0,failed_calls=0\r\n" +
		"# CPU\r\nused_cpu_sys:2.000000\r\nused_cpu_user:3.000000\r\n")
	d := deltaSince(before, after)
	if d.Calls["evalsha"] != 20 || d.Usec["evalsha"] != 800 || d.Calls["client|id"] != 1 {
		t.Fatalf("delta calls %v usec %v", d.Calls, d.Usec)
	}
	if _, ok := d.Calls["info"]; ok {
		t.Fatal("INFO's own calls counted")
	}
	if d.CPU != 1250*time.Millisecond || d.Commands() != 21 || d.ScriptTime() != 800*time.Microsecond {
		t.Fatalf("cpu %v commands %d script %v", d.CPU, d.Commands(), d.ScriptTime())
	}
}

func TestParseInfo_JunkGivesNothing(t *testing.T) {
	for _, raw := range []string{
		"", "\x00\xff", "cmdstat_x", "cmdstat_x:calls=abc,usec=", "used_cpu_sys:NaN", "used_cpu_user:-5",
		"cmdstat_" + string(make([]byte, 70000)) + ":calls=1",
	} {
		s := parseInfo(raw)
		if s.CPU != 0 || sum(toCalls(s)) > 1 {
			t.Errorf("parseInfo(%.20q) = %+v", raw, s)
		}
	}
}

func toCalls(s serverSnapshot) map[string]int64 {
	out := map[string]int64{}
	for k, v := range s.Commands {
		out[k] = v.Calls
	}
	return out
}

func TestFormatCounts_LargestFirst(t *testing.T) {
	got := formatCounts(map[string]int64{"bzpopmin": 1, "evalsha": 20017, "client": 2, "eval": 2})
	if want := "evalsha=20017 client=2 eval=2 bzpopmin=1"; got != want {
		t.Fatalf("formatCounts = %q, want %q", got, want)
	}
}

func TestEncodePayload_IsTheJSONOfPayload(t *testing.T) {
	for _, p := range []payload{{}, {I: 7}, {I: -1, T: 1764470000123456789}} {
		want, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		if got := encodePayload(p); string(got) != string(want) {
			t.Errorf("encodePayload(%+v) = %s, want %s", p, got, want)
		}
	}
}

func TestMedian_LowerMiddleAndItsIndex(t *testing.T) {
	for _, c := range []struct {
		xs   []float64
		want float64
		at   int
	}{
		{[]float64{3}, 3, 0},
		{[]float64{5, 1, 3}, 3, 2},
		{[]float64{4, 1, 3, 2}, 2, 3}, // lower middle of an even count
	} {
		xs := slices.Clone(c.xs)
		if got := medianOf(xs); got != c.want {
			t.Errorf("medianOf(%v) = %v, want %v", c.xs, got, c.want)
		}
		if got := medianIndex(xs); got != c.at {
			t.Errorf("medianIndex(%v) = %d, want %d", c.xs, got, c.at)
		}
		if !slices.Equal(xs, c.xs) {
			t.Errorf("median sorted the caller's slice: %v", xs)
		}
	}
}

func TestCeilingRound_BothReadings(t *testing.T) {
	ours := ourResult{Throughput: Throughput{Jobs: 1000, Drain: 50 * time.Millisecond}, // 20000 jobs/s
		Calls: map[string]int64{"evalsha": 200}}
	c := ceilingRound(70000, 90000, ours)
	if c.EvalshaPerSec != 80000 || c.CallsPerJob != 0.2 || c.OursJobsPerSec != 20000 {
		t.Fatalf("ceilingRound = %+v", c)
	}
	// The ceiling formula: 80000 calls/s over 0.2 calls per job.
	if c.JobsPerSec != 400000 || c.Fraction != 0.05 {
		t.Errorf("formula reading: %v jobs/s, fraction %v", c.JobsPerSec, c.Fraction)
	}
	if c.PerCallFraction != 0.25 {
		t.Errorf("one call per job reading: %v", c.PerCallFraction)
	}
	if z := ceilingRound(0, 0, ourResult{}); z.Fraction != 0 || z.JobsPerSec != 0 {
		t.Errorf("no measurement gives a ceiling: %+v", z)
	}
}
