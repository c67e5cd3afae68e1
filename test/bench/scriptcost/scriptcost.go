// Package scriptcost counts the instructions a redis-server runs per job
// while our queue drains, by running the server under valgrind's callgrind.
//
// Timed benchmarks on a shared machine swing by 10 to 30 % from run to run,
// which hides the few-percent changes a script edit makes. Instruction
// counts do not swing: two runs of the same code agree within about 1 %.
// They count the server's user-space work only (the kernel's socket work is
// not in them), so read them next to queuebench's timed figures, not
// instead of them. cmd/scriptcost runs it.
package scriptcost

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/queue"
	"github.com/pidispatch/pidispatch/test/bench/queuebench"
)

// Defaults of Config.
const (
	DefaultJobs  = 2000
	DefaultSlots = 16
)

// ErrNoTools means valgrind, callgrind_control or redis-server is not on
// PATH (Debian: apt-get install valgrind redis-server).
var ErrNoTools = errors.New("scriptcost: needs valgrind, callgrind_control and redis-server on PATH")

// Config tunes Run. The zero value is usable.
type Config struct {
	// Jobs is the number of no-op jobs added and then drained. Default 2000.
	Jobs int
	// Slots is the number of goroutines completing jobs with
	// CompleteAndFetch on one Queue, as the bench's worker does. Default 16.
	Slots int
}

// Report is what the server did while the jobs drained.
type Report struct {
	Jobs int
	// Instructions is callgrind's count of the server's user-space
	// instructions from the first take to the last completion.
	Instructions int64
	// ScriptCalls and Commands are from INFO commandstats over the same
	// span (Commands counts those scripts ran, and the script calls).
	ScriptCalls int64
	Commands    int64
}

// PerJob is Instructions over Jobs.
func (r Report) PerJob() float64 { return float64(r.Instructions) / float64(r.Jobs) }

// Run starts redis-server under callgrind on a free loopback port, adds
// cfg.Jobs jobs, drains them with cfg.Slots slots, and reports the
// server's instructions over the drain. It stops the server before it
// returns.
func Run(ctx context.Context, cfg Config) (Report, error) {
	if cfg.Jobs == 0 {
		cfg.Jobs = DefaultJobs
	}
	if cfg.Slots == 0 {
		cfg.Slots = DefaultSlots
	}
	if cfg.Jobs < 1 || cfg.Slots < 1 || cfg.Slots > 1024 {
		return Report{}, errors.New("scriptcost: Jobs must be at least 1 and Slots within 1..1024")
	}
	srv, err := startServer(ctx)
	if err != nil {
		return Report{}, err
	}
	defer srv.Close()

	client := redis.NewClient(&redis.Options{Addr: srv.Addr(), PoolSize: cfg.Slots + 2, ReadTimeout: time.Minute})
	defer client.Close()
	q, err := queue.New(client, fleet.SharedQueue, queue.Config{})
	if err != nil {
		return Report{}, err
	}
	for i := range cfg.Jobs {
		if _, _, err := q.Add(ctx, "noop", []byte(`{"i":`+strconv.Itoa(i)+`}`), queue.AddOptions{}); err != nil {
			return Report{}, fmt.Errorf("add: %w", err)
		}
	}
	if err := client.ConfigResetStat(ctx).Err(); err != nil {
		return Report{}, err
	}
	if err := control(ctx, srv, "-z"); err != nil {
		return Report{}, err
	}
	if err := drain(ctx, q, cfg); err != nil {
		return Report{}, err
	}
	if err := control(ctx, srv, "-d"); err != nil {
		return Report{}, err
	}
	rep := Report{Jobs: cfg.Jobs}
	if rep.Instructions, err = dumpedTotal(srv); err != nil {
		return Report{}, err
	}
	stats, err := client.Info(ctx, "commandstats").Result()
	if err != nil {
		return Report{}, err
	}
	rep.ScriptCalls, rep.Commands = countCommands(stats)
	return rep, nil
}

// drain runs cfg.Slots slots, each taking a job and then completing each
// job with CompleteAndFetch until the queue is empty.
func drain(ctx context.Context, q *queue.Queue, cfg Config) error {
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	done := 0
	for range cfg.Slots {
		wg.Go(func() {
			n := 0
			job, err := q.Fetch(ctx, queue.NewToken())
			for err == nil && job != nil {
				job, err = q.CompleteAndFetch(ctx, job.ID, job.Token, nil, queue.NewToken())
				n++
			}
			mu.Lock()
			defer mu.Unlock()
			done += n
			if err != nil && firstErr == nil {
				firstErr = err
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		return fmt.Errorf("drain: %w", firstErr)
	}
	if done != cfg.Jobs {
		return fmt.Errorf("drain: completed %d of %d jobs", done, cfg.Jobs)
	}
	return nil
}

// countCommands sums INFO commandstats: script calls, and all commands.
func countCommands(info string) (scripts, all int64) {
	for line := range strings.SplitSeq(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		calls, _, _ := strings.Cut(strings.TrimPrefix(rest, "calls="), ",")
		n, err := strconv.ParseInt(calls, 10, 64)
		if err != nil {
			continue
		}
		switch name = strings.TrimPrefix(name, "cmdstat_"); name {
		case "config|resetstat", "info":
			continue
		case "evalsha", "eval":
			scripts += n
		}
		all += n
	}
	return scripts, all
}

// startServer starts redis-server under callgrind (queuebench's private
// server, wrapped). Its dumps go to the server's directory.
func startServer(ctx context.Context) (*queuebench.Server, error) {
	valgrind, err1 := exec.LookPath("valgrind")
	_, err2 := exec.LookPath("callgrind_control")
	_, err3 := exec.LookPath("redis-server")
	if err := errors.Join(err1, err2, err3); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoTools, err)
	}
	return queuebench.StartServerWith(ctx, queuebench.ServerOptions{
		Wrapper:      []string{valgrind, "--tool=callgrind", "--callgrind-out-file=callgrind.out.%p"},
		ReadyTimeout: time.Minute, // valgrind starts the server slowly
	})
}

// control runs callgrind_control with arg (-z zero the counts, -d dump
// them) on the server.
func control(ctx context.Context, srv *queuebench.Server, arg string) error {
	out, err := exec.CommandContext(ctx, "callgrind_control", arg, strconv.Itoa(srv.Pid())).CombinedOutput()
	if err != nil {
		return fmt.Errorf("callgrind_control %s: %w: %s", arg, err, out)
	}
	return nil
}

// dumpedTotal reads the instruction total of the server's last dump.
func dumpedTotal(srv *queuebench.Server) (int64, error) {
	files, err := filepath.Glob(filepath.Join(srv.Dir(), "callgrind.out.*.*"))
	if err != nil || len(files) == 0 {
		return 0, fmt.Errorf("no callgrind dump in %s (%v)", srv.Dir(), err)
	}
	slices.Sort(files)
	return readTotal(files[len(files)-1])
}

// readTotal returns the "totals:" (or "summary:") count of a callgrind
// output file.
func readTotal(path string) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		for _, prefix := range []string{"totals:", "summary:"} {
			if rest, ok := strings.CutPrefix(line, prefix); ok {
				fields := strings.Fields(rest)
				if len(fields) > 0 {
					return strconv.ParseInt(fields[0], 10, 64)
				}
			}
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("%s: no totals line", path)
}
