// Command scriptcost prints the instructions a redis-server runs per job
// while our queue drains (under valgrind's callgrind): a figure that does
// not swing with the machine's load, for comparing script changes. Run it
// from bench/: go run ./cmd/scriptcost (see bench/README.md).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"

	"github.com/pidispatch/pidispatch/test/bench/scriptcost"
)

func main() {
	var cfg scriptcost.Config
	runs := flag.Int("runs", 3, "measurements to make")
	flag.IntVar(&cfg.Jobs, "jobs", scriptcost.DefaultJobs, "no-op jobs drained per measurement")
	flag.IntVar(&cfg.Slots, "slots", scriptcost.DefaultSlots, "slots completing jobs with CompleteAndFetch")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, cfg, *runs); err != nil {
		fmt.Fprintln(os.Stderr, "scriptcost:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, cfg scriptcost.Config, runs int) error {
	for i := range runs {
		rep, err := scriptcost.Run(ctx, cfg)
		if err != nil {
			return err
		}
		fmt.Printf("run %d: %d jobs drained: %.0f server instructions per job; %.3f script calls and %.1f commands per job\n",
			i+1, rep.Jobs, rep.PerJob(), float64(rep.ScriptCalls)/float64(rep.Jobs), float64(rep.Commands)/float64(rep.Jobs))
	}
	return nil
}
