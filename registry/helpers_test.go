package registry

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/pidispatch/pidispatch/internal/testkit/livetest"

	"github.com/redis/go-redis/v9"
)

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
	livetest.SkipShort(t) // a hung server is waited out: not for the short lane
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
