// Command queuebench compares our queue with BullMQ and asynq on one
// redis-server: throughput, pickup latency and the server's ceiling. Run it
// from bench/: go run ./cmd/queuebench (see bench/README.md).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"

	"github.com/pidispatch/pidispatch/test/bench/queuebench"
)

func main() {
	var cfg queuebench.Config
	var systems, profile string
	var asJSON bool
	flag.StringVar(&cfg.ValkeyURL, "valkey", "", "redis://host:port/db of an empty database to use (flushed between runs); empty: start a private redis-server")
	flag.IntVar(&cfg.Jobs, "jobs", queuebench.DefaultJobs, "no-op jobs each system drains")
	flag.IntVar(&cfg.Concurrency, "concurrency", queuebench.DefaultConcurrency, "jobs each system runs at once")
	flag.IntVar(&cfg.LatencyJobs, "latency-jobs", queuebench.DefaultLatencyJobs, "jobs added one at a time to an idle consumer")
	flag.DurationVar(&cfg.Spacing, "spacing", queuebench.DefaultSpacing, "pause between two latency jobs")
	flag.DurationVar(&cfg.CeilingDuration, "ceiling", queuebench.DefaultCeilingDuration, "how long each trivial EVALSHA rate measurement lasts (two per round)")
	flag.StringVar(&cfg.NodeDir, "node-dir", queuebench.DefaultNodeDir, "folder of BullMQ 5's node_modules")
	flag.StringVar(&cfg.Node6Dir, "node6-dir", queuebench.DefaultNode6Dir, "folder of BullMQ 6's node_modules")
	flag.StringVar(&cfg.Script, "script", queuebench.DefaultScript, "bench.js, run over either")
	flag.StringVar(&systems, "systems", "ours,bullmq,bullmq6,asynq", "systems to measure, comma-separated (bullmq is BullMQ 5)")
	flag.StringVar(&profile, "cpuprofile", "", "write a CPU profile of this process while ours drains to this file")
	flag.BoolVar(&cfg.AutoPipeline, "autopipeline", false, "experiment: ours' slots complete through go-redis's AutoPipeliner")
	flag.IntVar(&cfg.Rounds, "rounds", 3, "rounds of throughput measurements, systems taking turns; the median round is reported")
	flag.BoolVar(&asJSON, "json", false, "print the report as JSON instead of a table")
	flag.Parse()
	cfg.Systems = strings.Split(systems, ",")
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))

	if err := run(cfg, profile, asJSON); err != nil {
		fmt.Fprintln(os.Stderr, "queuebench:", err)
		os.Exit(1)
	}
}

func run(cfg queuebench.Config, profile string, asJSON bool) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if profile != "" {
		f, err := os.Create(profile)
		if err != nil {
			return err
		}
		defer f.Close()
		cfg.CPUProfile = f
	}
	rep, err := queuebench.Run(ctx, cfg)
	if err != nil {
		return err
	}
	if asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	return rep.WriteTable(os.Stdout)
}
