package queuebench

import (
	"bufio"
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// commandCounter is a go-redis hook that counts the commands a client sends
// (each command of a pipeline counts), by lower-case name.
type commandCounter struct {
	mu     sync.Mutex
	byName map[string]int64
}

var _ redis.Hook = (*commandCounter)(nil)

func newCommandCounter() *commandCounter {
	return &commandCounter{byName: map[string]int64{}}
}

func (h *commandCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *commandCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.record(cmd)
		return next(ctx, cmd)
	}
}

func (h *commandCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.record(cmds...)
		return next(ctx, cmds)
	}
}

func (h *commandCounter) record(cmds ...redis.Cmder) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, c := range cmds {
		h.byName[c.Name()]++
	}
}

// take returns the counts so far and starts again from zero.
func (h *commandCounter) take() map[string]int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := h.byName
	h.byName = map[string]int64{}
	return out
}

func sum(m map[string]int64) int64 {
	var n int64
	for _, v := range m {
		n += v
	}
	return n
}

// formatCounts prints counts as "evalsha=20016 bzpopmin=2", largest first.
func formatCounts(m map[string]int64) string {
	names := slices.Collect(maps.Keys(m))
	slices.SortFunc(names, func(a, b string) int {
		if m[a] != m[b] {
			return int(m[b] - m[a])
		}
		return strings.Compare(a, b)
	})
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = fmt.Sprintf("%s=%d", n, m[n])
	}
	return strings.Join(parts, " ")
}

// cmdStat is one "cmdstat_<name>:calls=..,usec=.." line of INFO commandstats.
type cmdStat struct {
	Calls int64
	Usec  int64
}

// serverSnapshot is what the bench reads from INFO before and after a phase.
type serverSnapshot struct {
	Commands map[string]cmdStat
	CPU      time.Duration // used_cpu_user + used_cpu_sys
}

func readServer(ctx context.Context, c *redis.Client) (serverSnapshot, error) {
	raw, err := c.Info(ctx, "commandstats", "cpu").Result()
	if err != nil {
		return serverSnapshot{}, fmt.Errorf("info: %w", err)
	}
	return parseInfo(raw), nil
}

// parseInfo reads the commandstats and cpu sections of an INFO reply; lines
// it does not understand are ignored.
func parseInfo(raw string) serverSnapshot {
	s := serverSnapshot{Commands: map[string]cmdStat{}}
	sc := bufio.NewScanner(strings.NewReader(raw))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		key, val, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		switch {
		case strings.HasPrefix(key, "cmdstat_"):
			var st cmdStat
			for field := range strings.SplitSeq(val, ",") {
				k, v, _ := strings.Cut(field, "=")
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					continue
				}
				switch k {
				case "calls":
					st.Calls = n
				case "usec":
					st.Usec = n
				}
			}
			s.Commands[strings.TrimPrefix(key, "cmdstat_")] = st
		case key == "used_cpu_user" || key == "used_cpu_sys":
			if f, err := strconv.ParseFloat(val, 64); err == nil && f >= 0 && f < 1e12 {
				s.CPU += time.Duration(f * float64(time.Second))
			}
		}
	}
	return s
}

// ServerWork is what the server did during a drain, from INFO deltas
// (commands of other clients included, so it is exact on the private
// server only).
type ServerWork struct {
	// CPU is the server process's user+system CPU time.
	CPU time.Duration
	// Calls and Usec are per command (INFO commandstats), the commands
	// scripts run included; Usec is time inside each command.
	Calls map[string]int64
	Usec  map[string]int64
}

// Commands is the number of commands the server ran.
func (w ServerWork) Commands() int64 { return sum(w.Calls) }

// ScriptTime is the time the server spent inside script calls.
func (w ServerWork) ScriptTime() time.Duration {
	var us int64
	for _, name := range []string{"eval", "evalsha", "eval_ro", "evalsha_ro", "fcall", "fcall_ro"} {
		us += w.Usec[name]
	}
	return time.Duration(us) * time.Microsecond
}

// parseServerWork subtracts two raw INFO texts (commandstats and cpu).
func parseServerWork(before, after string) ServerWork {
	return deltaSince(parseInfo(before), parseInfo(after))
}

// deltaSince subtracts before from after, leaving out the INFO calls.
func deltaSince(before, after serverSnapshot) ServerWork {
	d := ServerWork{Calls: map[string]int64{}, Usec: map[string]int64{}, CPU: after.CPU - before.CPU}
	for name, a := range after.Commands {
		if name == "info" {
			continue
		}
		b := before.Commands[name]
		if n := a.Calls - b.Calls; n > 0 {
			d.Calls[name] = n
			d.Usec[name] = a.Usec - b.Usec
		}
	}
	return d
}

// Latency summarises pickup latencies (enqueue to handler start).
type Latency struct {
	Samples int
	P50     time.Duration
	P99     time.Duration
	Max     time.Duration
}

// summarize sorts samples and takes nearest-rank percentiles.
func summarize(samples []time.Duration) Latency {
	if len(samples) == 0 {
		return Latency{}
	}
	s := slices.Clone(samples)
	slices.Sort(s)
	return Latency{Samples: len(s), P50: rank(s, 50), P99: rank(s, 99), Max: s[len(s)-1]}
}

// rank is the nearest-rank p-th percentile of sorted s (non-empty).
func rank(s []time.Duration, p int) time.Duration {
	i := (len(s)*p + 99) / 100 // ceil(n*p/100)
	return s[max(i, 1)-1]
}
