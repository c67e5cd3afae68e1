package queuebench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"
)

// ErrNoBullMQ means node or the bench's node_modules are missing.
var ErrNoBullMQ = errors.New("queuebench: node or bench/bullmq/node_modules or bench/bullmq6/node_modules missing (run npm ci in each)")

// checkBullMQ verifies node is on PATH and bullmq is installed in dir.
func checkBullMQ(dir string) error {
	if _, err := exec.LookPath("node"); err != nil {
		return fmt.Errorf("%w: %v", ErrNoBullMQ, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "bullmq", "package.json")); err != nil {
		return fmt.Errorf("%w: %v", ErrNoBullMQ, err)
	}
	return nil
}

// runNode runs bench.js over the node_modules of dir in mode and decodes
// its JSON output into out.
func runNode(ctx context.Context, cfg Config, dir, mode, url string, args map[string]any, out any) error {
	raw, err := json.Marshal(args)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.PhaseTimeout+30*time.Second)
	defer cancel()
	modules, err := filepath.Abs(filepath.Join(dir, "node_modules"))
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, "node", cfg.Script, mode, url, string(raw))
	cmd.Env = append(os.Environ(), "NODE_PATH="+modules)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("node bench.js %s: %w: %s", mode, err, bytes.TrimSpace(stderr.Bytes()))
	}
	if err := json.Unmarshal(stdout.Bytes(), out); err != nil {
		return fmt.Errorf("node bench.js %s: output %q: %w", mode, stdout.String(), err)
	}
	return nil
}

// bullmqThroughput has the Node program add cfg.Jobs jobs with addBulk and
// process them with a Worker of concurrency cfg.Concurrency; the timing is
// the program's own (Worker.run() to the last "completed" event).
func bullmqThroughput(ctx context.Context, url string, cfg Config, dir string) (Throughput, error) {
	var out struct {
		Jobs      int     `json:"jobs"`
		EnqueueMs float64 `json:"enqueueMs"`
		DrainMs   float64 `json:"drainMs"`
		// INFO commandstats and cpu around the drain.
		InfoBefore string `json:"infoBefore"`
		InfoAfter  string `json:"infoAfter"`
	}
	err := runNode(ctx, cfg, dir, "throughput", url, map[string]any{
		"queue": bullmqQueue, "jobs": cfg.Jobs, "concurrency": cfg.Concurrency,
		"timeoutMs": cfg.PhaseTimeout.Milliseconds(),
	}, &out)
	if err != nil {
		return Throughput{}, err
	}
	if out.Jobs != cfg.Jobs || out.DrainMs <= 0 {
		return Throughput{}, fmt.Errorf("node bench.js throughput: implausible result %+v", out)
	}
	return Throughput{
		Jobs:    out.Jobs,
		Enqueue: msToDuration(out.EnqueueMs),
		Drain:   msToDuration(out.DrainMs),
		Server:  parseServerWork(out.InfoBefore, out.InfoAfter),
	}, nil
}

// bullmqLatency has the Node program measure pickup latency with an idle
// Worker and a producer thread.
func bullmqLatency(ctx context.Context, url string, cfg Config, dir string) ([]time.Duration, error) {
	var out struct {
		LatenciesUs []float64 `json:"latenciesUs"`
	}
	err := runNode(ctx, cfg, dir, "latency", url, map[string]any{
		"queue": bullmqQueue, "jobs": cfg.LatencyJobs, "concurrency": cfg.Concurrency,
		"spacingMs": float64(cfg.Spacing) / float64(time.Millisecond),
		"timeoutMs": cfg.PhaseTimeout.Milliseconds(),
	}, &out)
	if err != nil {
		return nil, err
	}
	if len(out.LatenciesUs) != cfg.LatencyJobs {
		return nil, fmt.Errorf("node bench.js latency: %d samples, want %d", len(out.LatenciesUs), cfg.LatencyJobs)
	}
	lat := make([]time.Duration, len(out.LatenciesUs))
	for i, us := range out.LatenciesUs {
		lat[i] = time.Duration(us * float64(time.Microsecond))
	}
	return lat, nil
}

func msToDuration(ms float64) time.Duration { return time.Duration(ms * float64(time.Millisecond)) }
