package fleetsim

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pidispatch/pidispatch/registry"
)

// Probe is the registry read measured on its own, once the fleet has
// stopped and its rows are still live: what one routing decision's read,
// and one cron gate's, costs Valkey with N rows, free of the other hosts'
// calls and of the simulator's CPU. Both are one call of the registry's
// read script (registry.ReadLive, LivePeers).
type Probe struct {
	Rows  int `json:"rows"`
	Calls int `json:"calls"`
	// CPU is the server's CPU time per call (INFO cpu over the calls).
	CPU time.Duration `json:"cpuPerCall"`
	// P50 and P99 are the server's time per call from the slow log
	// (a call under the log's threshold counts as below every logged one).
	P50 time.Duration `json:"p50"`
	P99 time.Duration `json:"p99"`
	Max time.Duration `json:"max"`
	// Client is the caller's p99, parsing the rows included.
	Client time.Duration `json:"clientP99"`
}

// probeThreshold is the slow log's threshold during the probe: above the
// commands the script runs, which the log would list too, and below the
// script itself from a handful of rows up.
const probeThreshold = 20 * time.Microsecond

// probeLogLen bounds the slow log during the probe.
const probeLogLen = 200_000

// probeRead times calls sequential registry reads on a quiet server.
func probeRead(ctx context.Context, c *redis.Client, calls int) (Probe, error) {
	prev, err := c.ConfigGet(ctx, "slowlog-*").Result()
	if err != nil {
		return Probe{}, fmt.Errorf("read slowlog settings: %w", err)
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		for k, v := range prev {
			_ = c.ConfigSet(rctx, k, v).Err()
		}
	}()
	// Room for the script's own commands that pass the threshold too.
	if err := c.ConfigSet(ctx, "slowlog-max-len", strconv.Itoa(probeLogLen)).Err(); err != nil {
		return Probe{}, err
	}
	if err := c.ConfigSet(ctx, "slowlog-log-slower-than", strconv.FormatInt(probeThreshold.Microseconds(), 10)).Err(); err != nil {
		return Probe{}, err
	}
	if err := c.Do(ctx, "SLOWLOG", "RESET").Err(); err != nil {
		return Probe{}, err
	}
	before, err := readServer(ctx, c)
	if err != nil {
		return Probe{}, err
	}
	p := Probe{Calls: calls}
	client := make([]time.Duration, 0, calls)
	for range calls {
		start := time.Now()
		hosts, err := registry.ReadLive(ctx, c, 30*time.Second)
		if err != nil {
			return p, err
		}
		client = append(client, time.Since(start))
		p.Rows = len(hosts)
	}
	after, err := readServer(ctx, c)
	if err != nil {
		return p, err
	}
	p.CPU = (after.cpu - before.cpu) / time.Duration(calls)
	if err := c.ConfigSet(ctx, "slowlog-log-slower-than", "-1").Err(); err != nil {
		return p, err
	}
	raw, err := c.Do(ctx, "SLOWLOG", "GET", "-1").Slice()
	if err != nil {
		return p, fmt.Errorf("slowlog get: %w", err)
	}
	var logged []time.Duration
	for _, e := range raw {
		f, ok := e.([]any)
		if !ok || len(f) < 4 {
			continue
		}
		us, _ := f[2].(int64)
		args, _ := f[3].([]any)
		if len(args) >= 4 && strings.EqualFold(fmt.Sprint(args[0]), "evalsha") && fmt.Sprint(args[3]) == registry.LiveKey {
			logged = append(logged, time.Duration(us)*time.Microsecond)
		}
	}
	// Calls under the threshold were not logged: they rank below all.
	all := make([]time.Duration, calls-min(len(logged), calls), calls)
	all = append(all, logged...)
	slices.Sort(all)
	p.P50, p.P99, p.Max = rank(all, 50), rank(all, 99), all[len(all)-1]
	slices.Sort(client)
	p.Client = rank(client, 99)
	return p, nil
}
