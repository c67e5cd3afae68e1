package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pidispatch/pidispatch/internal/image/jobimage"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/internal/testkit/logtest"
)

// The idle measurement's phases: boot settles, then the window is sampled.
const (
	idleSettle = 10 * time.Second
	idleWindow = 60 * time.Second
)

// Bounds the report holds the idle worker to: its timers (a beat every 15 s,
// a 5 s blocking pop per queue, the stalled check every 30 s, the re-home
// check every 60 s) amount to well under one command per second and next to
// no CPU, so these are an order of magnitude of headroom, not a target.
const (
	idleMaxCPUPercent     = 1.0
	idleMaxCommandsPerSec = 5.0
)

// TestIdleFootprintReport measures the worker binary at rest: a named worker
// with no jobs, against a private redis-server so that every command the
// server counts is the worker's. After boot settles it samples, over one
// window, the CPU the process used (utime+stime from /proc/<pid>/stat) as a
// percentage of one core, its peak and current resident memory (VmHWM,
// VmRSS), and the commands per second it sent (the INFO commandstats delta,
// less the measurement's own INFO). It prints one summary line
// and fails past the bounds above. It runs only with PIDISPATCH_BENCH=1: it
// is a measurement of a whole process (about 75 s), not a CI test.
func TestIdleFootprintReport(t *testing.T) {
	if os.Getenv("PIDISPATCH_BENCH") != "1" {
		t.Skip("benchmark report; set PIDISPATCH_BENCH=1")
	}
	ensureImage(t)
	bin := workerBinary(t)
	srv := livetest.StartServer(t)
	admin := srv.Client()
	ticks := clockTicks(t)

	p := startProcess(t, bin, processEnv(map[string]string{
		"VALKEY_URL": srv.URL(), "PI_UNSIGNED_QUEUES": "*",
		"PI_WORKER_NAME": "idle-bench",
		"PI_JOB_IMAGE":   jobimage.TestTag,
		"PI_LOGS_DIR":    t.TempDir(),
		"TMPDIR":         t.TempDir(),
	}))
	p.waitEvent(t, "worker_started", 30*time.Second)
	pid := p.cmd.Process.Pid
	time.Sleep(idleSettle)

	cmds0 := commandStats(t, admin)
	monitor := startMonitor(t, srv.Addr())
	cpu0 := cpuTicks(t, pid)
	start := time.Now()
	time.Sleep(idleWindow)
	cpu1 := cpuTicks(t, pid)
	elapsed := time.Since(start)
	sent := monitor.stop(t)
	cmds1 := commandStats(t, admin)
	hwm, rss := memoryKB(t, pid, "VmHWM"), memoryKB(t, pid, "VmRSS")
	select {
	case <-p.done:
		t.Fatalf("worker exited during the window (%v):\n%s", p.err, p.stderr.String())
	default:
	}

	cpuPercent := float64(cpu1-cpu0) / float64(ticks) / elapsed.Seconds() * 100
	// Server side: every command the server ran, those inside scripts too.
	var total int64
	for name, n := range cmds1 {
		d := n - cmds0[name]
		if name == "info" || name == "monitor" {
			d-- // the measurement's own: the first INFO (counted once it had run), MONITOR
		}
		total += max(d, 0)
	}
	// Client side: the commands the worker sent, each a round trip.
	var sentTotal int64
	for _, n := range sent {
		sentTotal += n
	}
	perSec := float64(sentTotal) / elapsed.Seconds()
	t.Logf("idle worker over %.0f s (after %s of boot): CPU %.3f%% of one core (%d ticks at %d/s), max RSS %.1f MiB, RSS %.1f MiB, "+
		"%.2f commands/s sent (%d: %s), %.2f commands/s run by the server including inside scripts (%d)",
		elapsed.Seconds(), idleSettle, cpuPercent, cpu1-cpu0, ticks, float64(hwm)/1024, float64(rss)/1024,
		perSec, sentTotal, countsLine(sent), float64(total)/elapsed.Seconds(), total)

	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.exit(t, 30*time.Second); code != exitOK {
		t.Errorf("worker exit code %d after SIGTERM, want %d:\n%s", code, exitOK, p.stderr.String())
	}
	if cpuPercent > idleMaxCPUPercent {
		t.Errorf("idle CPU %.3f%% of one core > %.1f%%", cpuPercent, idleMaxCPUPercent)
	}
	if perSec > idleMaxCommandsPerSec {
		t.Errorf("idle worker sent %.2f commands/s > %.1f", perSec, idleMaxCommandsPerSec)
	}
	if sentTotal == 0 || total < sentTotal {
		t.Errorf("idle worker sent %d commands, the server ran %d: not beating, not consuming, or a miscount", sentTotal, total)
	}
}

// countsLine formats counts as "name=n ..." sorted by name.
func countsLine(counts map[string]int64) string {
	parts := make([]string, 0, len(counts))
	for name, n := range counts {
		parts = append(parts, fmt.Sprintf("%s=%d", name, n))
	}
	slices.Sort(parts)
	return strings.Join(parts, " ")
}

// monitorProcess is redis-cli MONITOR of the private server: it sees every
// command a client sends, and marks those a script runs as "[N lua]".
type monitorProcess struct {
	cmd *exec.Cmd
	out *logtest.Buffer
}

func startMonitor(t *testing.T, addr string) *monitorProcess {
	t.Helper()
	host, port, ok := strings.Cut(addr, ":")
	if !ok {
		t.Fatalf("server address %q", addr)
	}
	m := &monitorProcess{cmd: exec.Command("redis-cli", "-h", host, "-p", port, "monitor"), out: &logtest.Buffer{}}
	m.cmd.Stdout = m.out
	if err := m.cmd.Start(); err != nil {
		t.Fatalf("redis-cli monitor: %v", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for !strings.HasPrefix(m.out.String(), "OK") { // MONITOR is on
		if time.Now().After(deadline) {
			_ = m.cmd.Process.Kill()
			_ = m.cmd.Wait()
			t.Fatalf("redis-cli monitor did not start: %q", m.out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	return m
}

// stop ends the monitor and returns the commands clients sent while it ran,
// by name.
func (m *monitorProcess) stop(t *testing.T) map[string]int64 {
	t.Helper()
	_ = m.cmd.Process.Kill()
	_ = m.cmd.Wait()
	sent := map[string]int64{}
	for line := range strings.Lines(m.out.String()) {
		// 1700000000.123456 [0 127.0.0.1:41234] "evalsha" "..." ...
		_, rest, ok := strings.Cut(line, " [")
		if !ok {
			continue // the OK line
		}
		source, rest, ok := strings.Cut(rest, "] ")
		if !ok || strings.HasSuffix(source, " lua") {
			continue // run by a script, not sent
		}
		name, _, _ := strings.Cut(strings.TrimPrefix(rest, `"`), `"`)
		sent[strings.ToLower(name)]++
	}
	return sent
}

// clockTicks is the kernel's USER_HZ (getconf CLK_TCK), the unit of
// /proc/<pid>/stat's CPU times.
func clockTicks(t *testing.T) int64 {
	t.Helper()
	out, err := exec.Command("getconf", "CLK_TCK").Output()
	if err != nil {
		t.Fatalf("getconf CLK_TCK: %v", err)
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64)
	if err != nil || n <= 0 {
		t.Fatalf("getconf CLK_TCK: %q", out)
	}
	return n
}

// cpuTicks is the process's utime+stime, in clock ticks.
func cpuTicks(t *testing.T, pid int) int64 {
	t.Helper()
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	// The command name (field 2) may hold spaces; the fields after its
	// closing parenthesis start at field 3 (state).
	i := bytes.LastIndexByte(raw, ')')
	if i < 0 {
		t.Fatalf("/proc/%d/stat: %q", pid, raw)
	}
	f := strings.Fields(string(raw[i+1:]))
	if len(f) < 13 {
		t.Fatalf("/proc/%d/stat: %q", pid, raw)
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64) // field 14
	stime, err2 := strconv.ParseInt(f[12], 10, 64) // field 15
	if err1 != nil || err2 != nil {
		t.Fatalf("/proc/%d/stat utime/stime: %q %q", pid, f[11], f[12])
	}
	return utime + stime
}

// memoryKB reads one kB field (VmHWM, VmRSS) of /proc/<pid>/status.
func memoryKB(t *testing.T, pid int, field string) int64 {
	t.Helper()
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(raw)) {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatalf("%s: %q", field, line)
			}
			return n
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

// commandStats is INFO commandstats as calls per command (lower case, a
// subcommand as "client|setname").
func commandStats(t *testing.T, c *redis.Client) map[string]int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	info, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for line := range strings.Lines(info) {
		// cmdstat_evalsha:calls=12,usec=340,usec_per_call=28.33,...
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		name, isStat := strings.CutPrefix(name, "cmdstat_")
		if !ok || !isStat {
			continue
		}
		calls, _, _ := strings.Cut(strings.TrimPrefix(rest, "calls="), ",")
		n, err := strconv.ParseInt(calls, 10, 64)
		if err != nil {
			t.Fatalf("commandstats line %q", line)
		}
		out[name] = n
	}
	if len(out) == 0 {
		t.Fatalf("INFO commandstats without a cmdstat_ line: %q", info)
	}
	return out
}
