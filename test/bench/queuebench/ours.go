package queuebench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"runtime/pprof"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pidispatch/pidispatch/queue"
)

// runOurWorker takes jobs from q the way a pidispatch host does: ONE
// Consumer (one blocking wait on the marker when idle) feeding a fixed
// number of handler slots. A slot runs its job, then completes it and takes
// the next ready job in the same script call (CompleteAndFetch), and only
// goes back to the Consumer when the queue is empty. So a busy slot costs
// one round trip per job and an idle worker one BZPOPMIN.
//
// handle runs each job; done is called after its completion was recorded.
// The Consumer waits through q's client; slots complete through slotQ, the
// same queue on a client of their own choosing (q itself, or an
// autopipelining client). It returns nil when ctx ends, or the first queue
// error.
func runOurWorker(ctx context.Context, q, slotQ *queue.Queue, slots int, handle, done func(*queue.Job)) error {
	c, err := queue.NewConsumer([]*queue.Queue{q}, queue.ConsumerConfig{})
	if err != nil {
		return err
	}
	defer c.Close()
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var wg sync.WaitGroup
	defer wg.Wait() // runs before cancel and Close
	sem := make(chan struct{}, slots)
	for {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return handlerErr(ctx)
		}
		_, job, err := c.Next(ctx, queue.NewToken())
		if err != nil {
			<-sem
			if ctx.Err() != nil {
				return handlerErr(ctx)
			}
			return err
		}
		wg.Go(func() {
			defer func() { <-sem }()
			for job != nil {
				handle(job)
				next, err := slotQ.CompleteAndFetch(ctx, job.ID, job.Token, nil, queue.NewToken())
				if err != nil {
					cancel(err)
					return
				}
				done(job)
				job = next
			}
		})
	}
}

// handlerErr is the error a handler slot recorded, or nil when ctx simply
// ended.
func handlerErr(ctx context.Context) error {
	err := context.Cause(ctx)
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return nil
	}
	return err
}

func newClient(url string, poolSize int) (*redis.Client, error) {
	opts, err := redis.ParseURL(url)
	if err != nil {
		return nil, err
	}
	opts.PoolSize = poolSize
	return redis.NewClient(opts), nil
}

// payload is every job's data: a sequence number, and for pickup latency
// the wall-clock time of the enqueue in Unix nanoseconds.
type payload struct {
	I int   `json:"i"`
	T int64 `json:"t,omitempty"`
}

// ourResult is the throughput of our queue plus what explains it.
type ourResult struct {
	Throughput
	// Calls are the commands the worker's client sent while draining (the
	// go-redis hook), by name.
	Calls map[string]int64
	// ClientCPU is this process's CPU time while draining.
	ClientCPU time.Duration
}

// oursThroughput adds cfg.Jobs jobs, then drains them with runOurWorker,
// timing from the first fetch to the last completion. With profile set, the
// drain is CPU-profiled into it.
func oursThroughput(ctx context.Context, url string, cfg Config, profile io.Writer) (ourResult, error) {
	var res ourResult
	client, err := newClient(url, cfg.Concurrency+4)
	if err != nil {
		return res, err
	}
	defer client.Close()
	counter := newCommandCounter()
	client.AddHook(counter)
	q, err := queue.New(client, ourQueue, queue.Config{})
	if err != nil {
		return res, err
	}
	slotQ := q
	if cfg.AutoPipeline {
		ap, err := client.AutoPipeline()
		if err != nil {
			return res, err
		}
		defer ap.Close()
		if slotQ, err = queue.New(ap, ourQueue, queue.Config{}); err != nil {
			return res, err
		}
	}

	start := time.Now()
	err = parallel(ctx, cfg.Jobs, 2*cfg.Concurrency, func(ctx context.Context, i int) error {
		_, _, err := q.Add(ctx, "noop", encodePayload(payload{I: i}), queue.AddOptions{})
		return err
	})
	if err != nil {
		return res, fmt.Errorf("add: %w", err)
	}
	res.Enqueue = time.Since(start)

	before, err := readServer(ctx, client)
	if err != nil {
		return res, err
	}
	counter.take()
	if profile != nil {
		if err := pprof.StartCPUProfile(profile); err != nil {
			return res, err
		}
	}
	cpu0 := processCPU()

	wctx, cancel := context.WithTimeout(ctx, cfg.PhaseTimeout)
	defer cancel()
	var completed atomic.Int64
	var last atomic.Int64
	t0 := time.Now()
	err = runOurWorker(wctx, q, slotQ, cfg.Concurrency, func(*queue.Job) {}, func(*queue.Job) {
		if completed.Add(1) == int64(cfg.Jobs) {
			last.Store(int64(time.Since(t0)))
			cancel()
		}
	})
	res.ClientCPU = processCPU() - cpu0
	if profile != nil {
		pprof.StopCPUProfile()
	}
	res.Calls = counter.take()
	if err != nil {
		return res, err
	}
	res.Jobs = int(completed.Load())
	if res.Jobs < cfg.Jobs {
		return res, fmt.Errorf("drained %d of %d jobs within %v", res.Jobs, cfg.Jobs, cfg.PhaseTimeout)
	}
	res.Drain = time.Duration(last.Load())
	after, err := readServer(ctx, client)
	if err != nil {
		return res, err
	}
	res.Server = deltaSince(before, after)
	return res, nil
}

// oursLatency runs an idle worker, adds cfg.LatencyJobs jobs one at a time
// cfg.Spacing apart from a separate client (a producer is another process
// in production), and records handler start minus enqueue time.
func oursLatency(ctx context.Context, url string, cfg Config) ([]time.Duration, error) {
	client, err := newClient(url, cfg.Concurrency+4)
	if err != nil {
		return nil, err
	}
	defer client.Close()
	producer, err := newClient(url, 4)
	if err != nil {
		return nil, err
	}
	defer producer.Close()
	q, err := queue.New(client, ourQueue, queue.Config{})
	if err != nil {
		return nil, err
	}
	pq, err := queue.New(producer, ourQueue, queue.Config{})
	if err != nil {
		return nil, err
	}

	rec := newRecorder(cfg.LatencyJobs)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	werr := make(chan error, 1)
	go func() {
		werr <- runOurWorker(wctx, q, q, cfg.Concurrency, func(j *queue.Job) {
			rec.record(time.Now(), j.Data)
		}, func(*queue.Job) {})
	}()
	stop := func() error { cancel(); return <-werr }

	if err := sleep(ctx, idleSettle); err != nil {
		return nil, errors.Join(err, stop())
	}
	err = paced(ctx, cfg.LatencyJobs, cfg.Spacing, func(ctx context.Context, i int) error {
		_, _, err := pq.Add(ctx, "noop", encodePayload(payload{I: i, T: time.Now().UnixNano()}), queue.AddOptions{})
		return err
	})
	if err == nil {
		err = rec.wait(ctx, cfg.PhaseTimeout)
	}
	return rec.samples(), errors.Join(err, stop())
}

// idleSettle is how long a worker is left alone before latency probes, so
// that it is asleep on its wait and not still busy starting.
const idleSettle = 300 * time.Millisecond

// recorder collects pickup latencies from handlers.
type recorder struct {
	mu   sync.Mutex
	lat  []time.Duration
	bad  int
	want int
	full chan struct{}
}

func newRecorder(want int) *recorder {
	return &recorder{want: want, lat: make([]time.Duration, 0, want), full: make(chan struct{})}
}

// record notes now minus the enqueue time carried in data.
func (r *recorder) record(now time.Time, data []byte) {
	var p payload
	err := json.Unmarshal(data, &p)
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil || p.T == 0 {
		r.bad++
	} else {
		r.lat = append(r.lat, now.Sub(time.Unix(0, p.T)))
	}
	if len(r.lat)+r.bad == r.want {
		close(r.full)
	}
}

func (r *recorder) wait(ctx context.Context, timeout time.Duration) error {
	select {
	case <-r.full:
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(timeout):
		return fmt.Errorf("handled %d of %d latency probes within %v", len(r.samples()), r.want, timeout)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.bad > 0 {
		return fmt.Errorf("%d latency probes carried no timestamp", r.bad)
	}
	return nil
}

func (r *recorder) samples() []time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]time.Duration(nil), r.lat...)
}

// parallel runs fn for i in [0, n) on workers goroutines and returns the
// first error.
func parallel(ctx context.Context, n, workers int, fn func(context.Context, int) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n || ctx.Err() != nil {
					return
				}
				if err := fn(ctx, i); err != nil {
					cancel(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err := context.Cause(ctx); err != nil {
		return err
	}
	return nil
}

// paced runs fn n times, one at a time, sleeping spacing after each.
func paced(ctx context.Context, n int, spacing time.Duration, fn func(context.Context, int) error) error {
	for i := range n {
		if err := fn(ctx, i); err != nil {
			return err
		}
		if err := sleep(ctx, spacing); err != nil {
			return err
		}
	}
	return nil
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// encodePayload is json.Marshal(p) without its reflection, which would
// otherwise show up in the client's profile.
func encodePayload(p payload) []byte {
	return []byte(`{"i":` + strconv.Itoa(p.I) + tField(p.T) + `}`)
}

func tField(t int64) string {
	if t == 0 {
		return ""
	}
	return `,"t":` + strconv.FormatInt(t, 10)
}

// processCPU is this process's user+system CPU time so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
