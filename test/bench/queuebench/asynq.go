package queuebench

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
)

// asynqThroughput enqueues cfg.Jobs tasks, then times a Server with
// Concurrency cfg.Concurrency from its start until the last task is
// acknowledged (asynq has no completion callback: after the last handler
// returns, the pending and active lists are polled until both are empty).
// asynq's defaults are kept (completed tasks are deleted at once).
func asynqThroughput(ctx context.Context, url string, cfg Config) (Throughput, error) {
	var res Throughput
	rdb, err := newClient(url, cfg.Concurrency+4)
	if err != nil {
		return res, err
	}
	defer rdb.Close()
	client := asynq.NewClientFromRedisClient(rdb)
	defer client.Close()

	start := time.Now()
	err = parallel(ctx, cfg.Jobs, 2*cfg.Concurrency, func(ctx context.Context, i int) error {
		_, err := client.EnqueueContext(ctx, asynq.NewTask(asynqTask, encodePayload(payload{I: i})), asynq.Queue(asynqQueue))
		return err
	})
	if err != nil {
		return res, fmt.Errorf("enqueue: %w", err)
	}
	res.Enqueue = time.Since(start)

	var handled atomic.Int64
	all := make(chan struct{})
	handler := asynq.HandlerFunc(func(context.Context, *asynq.Task) error {
		if handled.Add(1) == int64(cfg.Jobs) {
			close(all)
		}
		return nil
	})
	before, err := readServer(ctx, rdb)
	if err != nil {
		return res, err
	}
	t0 := time.Now()
	stop, err := startAsynq(url, cfg, handler)
	if err != nil {
		return res, err
	}
	defer stop()
	select {
	case <-all:
	case <-ctx.Done():
		return res, ctx.Err()
	case <-time.After(cfg.PhaseTimeout):
		return res, fmt.Errorf("asynq handled %d of %d tasks within %v", handled.Load(), cfg.Jobs, cfg.PhaseTimeout)
	}
	if err := waitEmpty(ctx, rdb, cfg.PhaseTimeout); err != nil {
		return res, err
	}
	res.Drain = time.Since(t0)
	res.Jobs = int(handled.Load())
	after, err := readServer(ctx, rdb)
	if err != nil {
		return res, err
	}
	res.Server = deltaSince(before, after)
	return res, nil
}

// waitEmpty polls asynq's pending and active lists until both are empty.
func waitEmpty(ctx context.Context, rdb *redis.Client, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		var pending, active *redis.IntCmd
		_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			pending = p.LLen(ctx, asynqPendingKey(asynqQueue))
			active = p.LLen(ctx, asynqActiveKey(asynqQueue))
			return nil
		})
		if err != nil {
			return fmt.Errorf("asynq queue lengths: %w", err)
		}
		if pending.Val() == 0 && active.Val() == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("asynq still has %d pending and %d active tasks after %v", pending.Val(), active.Val(), timeout)
		}
		if err := sleep(ctx, 200*time.Microsecond); err != nil {
			return err
		}
	}
}

// asynqLatency runs an idle Server and enqueues cfg.LatencyJobs tasks one at
// a time, cfg.Spacing apart, from a separate client.
func asynqLatency(ctx context.Context, url string, cfg Config) ([]time.Duration, error) {
	rdb, err := newClient(url, 4)
	if err != nil {
		return nil, err
	}
	defer rdb.Close()
	client := asynq.NewClientFromRedisClient(rdb)
	defer client.Close()

	rec := newRecorder(cfg.LatencyJobs)
	stop, err := startAsynq(url, cfg, asynq.HandlerFunc(func(_ context.Context, t *asynq.Task) error {
		rec.record(time.Now(), t.Payload())
		return nil
	}))
	if err != nil {
		return nil, err
	}
	defer stop()
	if err := sleep(ctx, idleSettle); err != nil {
		return nil, err
	}
	err = paced(ctx, cfg.LatencyJobs, cfg.Spacing, func(ctx context.Context, i int) error {
		t := asynq.NewTask(asynqTask, encodePayload(payload{I: i, T: time.Now().UnixNano()}))
		_, err := client.EnqueueContext(ctx, t, asynq.Queue(asynqQueue))
		return err
	})
	if err == nil {
		err = rec.wait(ctx, cfg.PhaseTimeout)
	}
	return rec.samples(), err
}

// startAsynq starts an asynq Server with its default settings except
// Concurrency and a silent logger, on a client of its own; stop shuts both
// down.
func startAsynq(url string, cfg Config, h asynq.Handler) (stop func(), err error) {
	rdb, err := newClient(url, cfg.Concurrency+8)
	if err != nil {
		return nil, err
	}
	srv := asynq.NewServerFromRedisClient(rdb, asynq.Config{
		Concurrency: cfg.Concurrency,
		Queues:      map[string]int{asynqQueue: 1},
		Logger:      silentLogger{},
		LogLevel:    asynq.FatalLevel,
	})
	if err := srv.Start(h); err != nil {
		_ = rdb.Close()
		return nil, fmt.Errorf("start asynq server: %w", err)
	}
	return func() {
		srv.Shutdown()
		_ = rdb.Close()
	}, nil
}

// silentLogger drops asynq's logs (its Fatal does not exit through here).
type silentLogger struct{}

var _ asynq.Logger = silentLogger{}

func (silentLogger) Debug(...any) {}
func (silentLogger) Info(...any)  {}
func (silentLogger) Warn(...any)  {}
func (silentLogger) Error(...any) {}
func (silentLogger) Fatal(...any) {}
