package main

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/moby/moby/client"
	"github.com/redis/go-redis/v9"

	"github.com/pidispatch/pidispatch/config"
)

// redisRepeat is how long one kind of go-redis message is held back after it
// was logged: a dead Valkey makes the client say the same thing every few
// hundred milliseconds, and the worker's own lines (queue_fetch_failed,
// host_registry_unreachable) already say what it could not do.
const redisRepeat = time.Minute

// redisLog routes go-redis's own messages, which it otherwise prints as
// plain text on stderr, into the worker's JSON log as valkey_client lines.
// go-redis's logger is process-wide, so the binary installs it (run), never
// a library.
type redisLog struct {
	log *slog.Logger
	now func() time.Time

	mu   sync.Mutex
	last map[string]time.Time // by format: when it was last logged
	held map[string]int       // by format: messages held back since
}

func newRedisLog(log *slog.Logger) *redisLog {
	return &redisLog{log: log, now: time.Now, last: map[string]time.Time{}, held: map[string]int{}}
}

func (r *redisLog) Printf(_ context.Context, format string, v ...any) {
	r.mu.Lock()
	now := r.now()
	if at, ok := r.last[format]; ok && now.Sub(at) < redisRepeat {
		r.held[format]++
		r.mu.Unlock()
		return
	}
	r.last[format] = now
	held := r.held[format]
	delete(r.held, format)
	r.mu.Unlock()
	attrs := []any{"detail", strings.TrimPrefix(fmt.Sprintf(format, v...), "redis: ")}
	if held > 0 {
		attrs = append(attrs, "repeats", held)
	}
	r.log.Warn("valkey_client", attrs...)
}

// probeTimeout bounds the boot check of Valkey and Docker.
const probeTimeout = 2 * time.Second

// reportDown logs one services_down line when Valkey or Docker does not
// answer at boot. The worker still boots: it retries both on its own, and
// until they answer no job is taken (Valkey) or started (Docker: a job taken
// is deferred, docker-unreachable), so queued jobs wait.
func reportDown(ctx context.Context, log *slog.Logger, cfg config.Config, vk *redis.Client, dc *client.Client) {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	var vErr, dErr error
	var wg sync.WaitGroup
	wg.Go(func() { vErr = vk.Ping(ctx).Err() })
	wg.Go(func() { _, dErr = dc.Ping(ctx, client.PingOptions{}) })
	wg.Wait()
	var down, errs []string
	if vErr != nil {
		down = append(down, "valkey")
		errs = append(errs, fmt.Sprintf("valkey at %s: %v", config.RedactURL(cfg.ValkeyURL), vErr))
	}
	if dErr != nil {
		down = append(down, "docker")
		errs = append(errs, fmt.Sprintf("docker: %v", dErr))
	}
	if len(down) == 0 {
		return
	}
	verb := " answers"
	if len(down) > 1 {
		verb = " answer"
	}
	log.Warn("services_down",
		"down", down,
		"effect", "jobs wait in their queues until "+strings.Join(down, " and ")+verb+"; the worker keeps retrying (pi-dispatch doctor says more)",
		"err", strings.Join(errs, "; "))
}
