package registry

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"
)

// logCapture is a slog handler target that counts events by message.
type logCapture struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (c *logCapture) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.buf.Write(p)
}

func (c *logCapture) logger() *slog.Logger {
	return slog.New(slog.NewJSONHandler(c, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// events returns every logged line whose message is msg, decoded.
func (c *logCapture) events(t testing.TB, msg string) []map[string]any {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(c.buf.String()), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line is not JSON: %q", line)
		}
		if m["msg"] == msg {
			out = append(out, m)
		}
	}
	return out
}

func (c *logCapture) count(t testing.TB, msg string) int { return len(c.events(t, msg)) }

func (c *logCapture) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.buf.String()
}

// everyLineHasHost fails the test when a logged line lacks a host attribute.
func (c *logCapture) everyLineHasHost(t testing.TB, host string) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, line := range strings.Split(strings.TrimSpace(c.buf.String()), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line is not JSON: %q", line)
		}
		if m["host"] != host {
			t.Fatalf("log line without host=%q: %s", host, line)
		}
	}
}

// countingHook counts commands sent through a client: one per round trip for
// single commands and scripts.
type countingHook struct{ n atomic.Int64 }

func (h *countingHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *countingHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmd)
	}
}

func (h *countingHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmds)
	}
}

// switchLimiter makes a client fail every command while down: an outage of one
// client against a live server.
type switchLimiter struct{ down atomic.Bool }

var errSwitchedDown = errors.New("test: client switched down")

func (l *switchLimiter) Allow() error {
	if l.down.Load() {
		return errSwitchedDown
	}
	return nil
}

func (l *switchLimiter) ReportResult(error) {}

// hungServer accepts connections and never answers: a Valkey that hangs.
func hungServer(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = l.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return l.Addr().String()
}

// clientOf returns a new client of the same database as c, with changes
// applied to its options, closed at the end of the test.
func clientOf(t testing.TB, c *redis.Client, change func(*redis.Options)) *redis.Client {
	t.Helper()
	opts := *c.Options()
	if change != nil {
		change(&opts)
	}
	nc := redis.NewClient(&opts)
	t.Cleanup(func() { _ = nc.Close() })
	return nc
}
