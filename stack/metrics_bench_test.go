package stack_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/pidispatch/pidispatch/config"
	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/enqueue"
	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/jobs"
	"github.com/pidispatch/pidispatch/queue"
	"github.com/pidispatch/pidispatch/stack"
)

// benchBatch is how many jobs one iteration of BenchmarkWorkerThroughput
// enqueues and waits for.
const benchBatch = 100

// BenchmarkWorkerThroughput drains no-op jobs through the whole real
// worker (Valkey queues, budget, gates, run records; the container runtime
// is scripted, every job exits 0 at once) at concurrency 16, with metrics
// off and on. With metrics on, the Metrics observer sees every event and
// /metrics is scraped every second. The sub-benchmarks interleave under
// -count, so both see the same machine load. It reports jobs/s.
func BenchmarkWorkerThroughput(b *testing.B) {
	for _, on := range []bool{false, true} {
		b.Run("metrics="+map[bool]string{false: "off", true: "on"}[on], func(b *testing.B) { benchWorker(b, on) })
	}
}

func benchWorker(b *testing.B, metricsOn bool) {
	db := livetest.Valkey(b)
	name := fmt.Sprintf("bench-%d", db.DB)
	env := map[string]string{"VALKEY_URL": db.URL, "PI_UNSIGNED_QUEUES": "*", "PI_WORKER_NAME": name, "PI_LOGS_DIR": b.TempDir(),
		"PI_JOB_IMAGE": "never-pulled:1", "PI_CONCURRENCY": "16", "PI_DAILY_CAP": "1000000"}
	if metricsOn {
		env["PI_METRICS_ADDR"] = "127.0.0.1:0"
	}
	cfg, err := config.Load(func(k string) string { return env[k] })
	if err != nil {
		b.Fatal(err)
	}
	s, err := stack.Build(context.Background(), cfg, slog.New(slog.DiscardHandler), dispatch.Tuning{JobsDir: b.TempDir()},
		func(d *dispatch.Deps) { d.Runtime = &scriptedRuntime{} })
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	wg.Go(func() { _ = s.Worker.Run(ctx) })
	if metricsOn {
		srv, err := s.ListenMetrics()
		if err != nil {
			b.Fatal(err)
		}
		wg.Go(func() { _ = srv.Serve(ctx) })
		wg.Go(func() { scrapeEverySecond(ctx, "http://"+srv.Addr().String()+"/metrics") })
	}

	p, err := enqueue.NewProducer(db.Client, enqueue.ProducerConfig{UnsignedQueues: []string{fleet.EveryQueue}, WorkerName: name, WorkerNameDeclared: true})
	if err != nil {
		b.Fatal(err)
	}
	q, err := queue.New(db.Client, fleet.HostQueueName(name), queue.Config{})
	if err != nil {
		b.Fatal(err)
	}
	folder := b.TempDir()
	done := 0
	start := time.Now()
	for b.Loop() {
		for i := range benchBatch {
			// A folder of its own per job: jobs of one folder share a scope,
			// and a scope runs one job at a time.
			dir := filepath.Join(folder, strconv.Itoa(done+i))
			if err := os.Mkdir(dir, 0o755); err != nil {
				b.Fatal(err)
			}
			if _, err := p.EnqueueLocal(ctx, jobs.Job{Folder: dir, Flow: "fix", Task: "t"}); err != nil {
				b.Fatal(err)
			}
		}
		done += benchBatch
		waitCompleted(b, q, done)
	}
	b.ReportMetric(float64(done)/time.Since(start).Seconds(), "jobs/s")
}

// waitCompleted polls q until n jobs completed.
func waitCompleted(b *testing.B, q *queue.Queue, n int) {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		c, err := q.Counts(context.Background())
		if err == nil && c.Completed >= int64(n) {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d jobs completed (%v)", c.Completed, n, err)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func scrapeEverySecond(ctx context.Context, url string) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}
}
