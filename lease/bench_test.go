package lease

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
)

// scriptCounter counts the commands that run one script (EVALSHA or EVAL of
// it): the round trips of the operation under test.
type scriptCounter struct {
	sha string
	n   atomic.Int64
}

func (h *scriptCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *scriptCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if args := cmd.Args(); len(args) > 1 && (cmd.Name() == "evalsha" && args[1] == h.sha || cmd.Name() == "eval") {
			h.n.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (h *scriptCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// BenchmarkAcquire takes the one free slot of 1, 8 and 64, where the free one
// is the last the probe reaches: the worst case, still one round trip.
func BenchmarkAcquire(b *testing.B) {
	for _, slots := range []int{1, 8, 64} {
		b.Run("slots="+strconv.Itoa(slots), func(b *testing.B) {
			db := livetest.Valkey(b)
			ctx := context.Background()
			const id = "gh-123456"
			start := startIndex(id, slots)
			last := (start + slots - 1) % slots
			for i := range slots {
				if i != last {
					if err := db.Client.Set(ctx, fleet.CheckSlotKey(i), "other#x", time.Hour).Err(); err != nil {
						b.Fatal(err)
					}
				}
			}
			c := redis.NewClient(&redis.Options{Addr: db.Client.Options().Addr, DB: db.DB})
			b.Cleanup(func() { _ = c.Close() })
			counter := &scriptCounter{sha: acquireScript.Hash()}
			c.AddHook(counter)
			l := New(c, "mini1", Config{})
			release := func(h *Handle) {
				if h == nil || h.Key() != fleet.CheckSlotKey(last) {
					b.Fatalf("acquired %v, want the last free slot %d", h, last)
				}
				if err := h.Release(ctx); err != nil {
					b.Fatal(err)
				}
			}
			h, err := l.Acquire(ctx, id, slots, time.Minute, fleet.CheckSlotKey) // loads the script
			if err != nil {
				b.Fatal(err)
			}
			release(h)
			counter.n.Store(0)
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				h, err := l.Acquire(ctx, id, slots, time.Minute, fleet.CheckSlotKey)
				if err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				release(h)
				b.StartTimer()
			}
			b.StopTimer()
			if got := counter.n.Load(); got != int64(b.N) {
				b.Fatalf("%d acquire commands for %d acquires: not one round trip each", got, b.N)
			}
			b.ReportMetric(float64(counter.n.Load())/float64(b.N), "roundtrips/op")
		})
	}
}

// setCounter counts SET commands: the round trips of the original's acquire.
type setCounter struct{ n atomic.Int64 }

func (h *setCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *setCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "set" {
			h.n.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (h *setCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// BenchmarkOriginalAcquire re-implements the original's fleet lease acquire
// (makeFleetLease in docs/benchmarks.md's reference) for a ratio with
// BenchmarkAcquire: the same slots held, the same start index, probed with one
// SET key holder PX ttl NX per slot, sequentially, until one succeeds. It is
// not the original (Node, ioredis) itself, only its commands from Go against
// the same server: with every slot but the last held, slots round trips.
func BenchmarkOriginalAcquire(b *testing.B) {
	for _, slots := range []int{1, 8, 64} {
		b.Run("slots="+strconv.Itoa(slots), func(b *testing.B) {
			db := livetest.Valkey(b)
			ctx := context.Background()
			const id = "gh-123456"
			holder := "mini1#" + id
			start := startIndex(id, slots)
			last := (start + slots - 1) % slots
			for i := range slots {
				if i != last {
					if err := db.Client.Set(ctx, fleet.CheckSlotKey(i), "other#x", time.Hour).Err(); err != nil {
						b.Fatal(err)
					}
				}
			}
			c := redis.NewClient(&redis.Options{Addr: db.Client.Options().Addr, DB: db.DB})
			b.Cleanup(func() { _ = c.Close() })
			counter := &setCounter{}
			c.AddHook(counter)
			acquire := func() string {
				for n := range slots {
					key := fleet.CheckSlotKey((start + n) % slots)
					ok, err := c.SetNX(ctx, key, holder, time.Minute).Result()
					if err != nil {
						b.Fatal(err)
					}
					if ok {
						return key
					}
				}
				return ""
			}
			release := func(key string) {
				if key != fleet.CheckSlotKey(last) {
					b.Fatalf("acquired %q, want the last free slot %d", key, last)
				}
				if err := db.Client.Del(ctx, key).Err(); err != nil {
					b.Fatal(err)
				}
			}
			release(acquire())
			counter.n.Store(0)
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				key := acquire()
				b.StopTimer()
				release(key)
				b.StartTimer()
			}
			b.StopTimer()
			if got := counter.n.Load(); got != int64(slots)*int64(b.N) {
				b.Fatalf("%d SETs for %d acquires, want %d each", got, b.N, slots)
			}
			b.ReportMetric(float64(counter.n.Load())/float64(b.N), "roundtrips/op")
		})
	}
}
