package operator_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/operator"
	"github.com/pidispatch/pidispatch/queue"
	"github.com/pidispatch/pidispatch/registry"
)

// roundTripHook counts round trips while on: one per command and one per
// pipeline or transaction (MULTI/EXEC sent as one write).
type roundTripHook struct {
	on atomic.Bool
	n  atomic.Int64
}

var _ redis.Hook = (*roundTripHook)(nil)

func (h *roundTripHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *roundTripHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.on.Load() {
			h.n.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (h *roundTripHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if h.on.Load() {
			h.n.Add(1)
		}
		return next(ctx, cmds)
	}
}

// fleet200 builds a 200-host fleet in a database of its own: a routing
// registry row and a declared host queue per host. It returns a client of that
// database with a round-trip hook (off).
func fleet200(b *testing.B) (*redis.Client, *roundTripHook) {
	b.Helper()
	const hosts = 200
	db := livetest.Valkey(b)
	ctx := context.Background()
	for i := range hosts {
		name := fmt.Sprintf("host-%03d", i)
		r, err := registry.New(db.Client, name, registry.Facts{
			Routes:      registry.Value(true),
			Concurrency: registry.Value(3),
			TZ:          registry.Value("UTC"),
		}, registry.Config{})
		if err != nil {
			b.Fatal(err)
		}
		if err := r.Publish(ctx); err != nil {
			b.Fatal(err)
		}
		q, err := queue.New(db.Client, fleet.HostQueueName(name), queue.Config{})
		if err != nil {
			b.Fatal(err)
		}
		if err := q.Declare(ctx); err != nil {
			b.Fatal(err)
		}
	}
	opts := *db.Client.Options()
	c := redis.NewClient(&opts)
	b.Cleanup(func() { _ = c.Close() })
	hook := &roundTripHook{}
	c.AddHook(hook)
	set, err := operator.FleetQueues(ctx, c)
	if err != nil || set.Degraded() || len(set.Names) != hosts+1 {
		b.Fatalf("fleet of %d queues: %d found, %v %v %v", hosts+1, len(set.Names), err, set.RegistryErr, set.DiscoveryErr)
	}
	return c, hook
}

// killSwitch is one way of pausing or resuming every queue of the fleet.
type killSwitch func(ctx context.Context, c *redis.Client, paused bool) error

// ours reads the fleet (FleetQueues) and pauses or resumes it with Pause or
// Resume: one MULTI/EXEC over every queue and the flag, then the sweep.
func ours(ctx context.Context, c *redis.Client, paused bool) error {
	set, err := operator.FleetQueues(ctx, c)
	if err != nil {
		return err
	}
	var r operator.KillResult
	if paused {
		r, err = operator.Pause(ctx, c, set)
	} else {
		r, err = operator.Resume(ctx, c, set)
	}
	if err == nil && len(r.Changed) != len(set.Names) {
		err = fmt.Errorf("%s changed %d of %d queues", r.Verb, len(r.Changed), len(set.Names))
	}
	return err
}

// originalPattern re-implements the original's kill switch loop (its
// cli.mjs: `for (const q of queues) await q.pause()`): the same fleet read as
// ours, then one queue.Pause (Resume) call per queue, in sequence, each its
// own round trip, and no fleet flag. It is not the original itself, which
// also opened a connection per queue and read the registry with one HGETALL
// per host; neither is reproduced here.
func originalPattern(ctx context.Context, c *redis.Client, paused bool) error {
	set, err := operator.FleetQueues(ctx, c)
	if err != nil {
		return err
	}
	for _, name := range set.Names {
		q, err := queue.New(c, name, queue.Config{})
		if err != nil {
			return err
		}
		if paused {
			err = q.Pause(ctx)
		} else {
			err = q.Resume(ctx)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// BenchmarkPauseResume200 times the kill switch over a fleet of 200 host
// queues (plus the shared one) with their 200 registry rows: a pause (the
// fleet read plus the pause) and a resume, each timed on its own, ours against
// a re-implementation of the original's queue-by-queue loop. The opposite
// switch runs between iterations, untimed, so every timed op changes every
// queue. roundtrips/op counts the timed op's round trips.
func BenchmarkPauseResume200(b *testing.B) {
	for _, impl := range []struct {
		name string
		run  killSwitch
	}{{"ours", ours}, {"original-pattern", originalPattern}} {
		for _, paused := range []bool{true, false} {
			verb := "resume"
			if paused {
				verb = "pause"
			}
			b.Run(impl.name+"/"+verb, func(b *testing.B) {
				c, hook := fleet200(b)
				ctx := context.Background()
				do := func(p bool) {
					if err := impl.run(ctx, c, p); err != nil {
						b.Fatal(err)
					}
				}
				do(paused) // loads the scripts
				b.ResetTimer()
				for b.Loop() {
					b.StopTimer()
					do(!paused)
					hook.on.Store(true)
					b.StartTimer()
					do(paused)
					b.StopTimer()
					hook.on.Store(false)
					b.StartTimer()
				}
				b.StopTimer()
				b.ReportMetric(float64(hook.n.Load())/float64(b.N), "roundtrips/op")
			})
		}
	}
	// The fleet read alone, which both of the above include: what is left of
	// their time is the switch itself.
	b.Run("FleetQueues", func(b *testing.B) {
		c, hook := fleet200(b)
		ctx := context.Background()
		hook.on.Store(true)
		for b.Loop() {
			if _, err := operator.FleetQueues(ctx, c); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		b.ReportMetric(float64(hook.n.Load())/float64(b.N), "roundtrips/op")
	})
}
