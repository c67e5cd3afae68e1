// Command fleetsim simulates fleets of N hosts on one redis-server and
// reports what each size costs it. Run it from test/bench:
// go run ./cmd/fleetsim -hosts 10,100,1000,3000 (see test/bench/README.md).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"

	"github.com/pidispatch/pidispatch/test/bench/fleetsim"
)

func main() {
	var cfg fleetsim.Config
	var hosts, jsonPath string
	flag.StringVar(&cfg.ValkeyURL, "valkey", "", "redis://host:port/db of an empty database to use (flushed after each size); empty: a private redis-server per size")
	flag.StringVar(&hosts, "hosts", "10,100,1000,3000", "fleet sizes to simulate, comma-separated, one after the other")
	flag.DurationVar(&cfg.Duration, "duration", fleetsim.DefaultDuration, "steady window each size is measured over")
	flag.DurationVar(&cfg.Warmup, "warmup", fleetsim.DefaultWarmup, "how long each fleet runs after boot before the window")
	flag.DurationVar(&cfg.ServerTimes, "server-times", fleetsim.DefaultServerTimes, "after the window, how long every call is logged in the slow log for the server's time per call (0: skip)")
	flag.Float64Var(&cfg.Rate, "rate", fleetsim.DefaultRate, "forge deliveries per second, spread over the receivers")
	flag.IntVar(&cfg.Receivers, "receivers", fleetsim.DefaultReceivers, "receivers, each with its inbox and router")
	flag.IntVar(&cfg.Concurrency, "concurrency", fleetsim.DefaultConcurrency, "job slots per host")
	flag.DurationVar(&cfg.JobTime, "job-time", fleetsim.DefaultJobTime, "how long a simulated job holds its slot")
	flag.StringVar(&jsonPath, "json", "", "also write the report as JSON to this file (- for stdout, instead of the table)")
	flag.Parse()
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	for f := range strings.SplitSeq(hosts, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			fmt.Fprintf(os.Stderr, "fleetsim: -hosts %q: %q is not a number (give sizes such as 10,100,1000)\n", hosts, f)
			os.Exit(2)
		}
		cfg.Hosts = append(cfg.Hosts, n)
	}
	if err := run(cfg, jsonPath); err != nil {
		fmt.Fprintln(os.Stderr, "fleetsim:", err)
		os.Exit(1)
	}
}

func run(cfg fleetsim.Config, jsonPath string) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	rep, err := fleetsim.Run(ctx, cfg)
	if rep != nil && len(rep.Runs) > 0 {
		if werr := write(rep, jsonPath); werr != nil {
			return werr
		}
	}
	return err
}

func write(rep *fleetsim.Report, jsonPath string) error {
	if jsonPath == "-" {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	if err := rep.WriteTable(os.Stdout); err != nil {
		return err
	}
	if jsonPath == "" {
		return nil
	}
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(jsonPath, append(b, '\n'), 0o644)
}
