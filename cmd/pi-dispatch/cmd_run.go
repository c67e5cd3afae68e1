package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pidispatch/pidispatch/dispatch"
)

func init() {
	register(command{name: "run", summary: "queue a job on a folder of this host (run <folder> --task TEXT --flow NAME)", run: cmdRun})
}

// runEnqueueTimeout bounds the whole enqueue, so a dead Valkey is an error in
// seconds rather than a hang.
const runEnqueueTimeout = 5 * time.Second

const runUsage = `usage: pi-dispatch run <folder> --task TEXT (--flow NAME | --command CMD) [--image IMG] [--force] [--env-file PATH]

Queues one job that runs the agent in <folder>, on this host: onto this host's
own queue pi-jobs@<name> when PI_WORKER_NAME is declared (in the shell, or in
the env file: $PI_ENV_FILE, else ./.env), else onto the shared queue. A folder
with uncommitted git changes is refused unless --force. Prints "queued <jobId>"
on stdout.
`

func cmdRun(ctx context.Context, e env, args []string) int {
	fset := flag.NewFlagSet("run", flag.ContinueOnError)
	fset.SetOutput(e.stderr)
	fset.Usage = func() { fmt.Fprint(e.stderr, runUsage); fset.PrintDefaults() }
	task := fset.String("task", "", "the instruction for the agent (required with --flow)")
	flow := fset.String("flow", "", "the agent flow to run")
	command := fset.String("command", "", "a prompt command to run instead of a flow")
	image := fset.String("image", "", "the job image for this run (default PI_JOB_IMAGE; never pulled)")
	force := fset.Bool("force", false, "queue even when the folder has uncommitted git changes")
	envFile := envFileFlag(fset)
	pos, err := parseInterleaved(fset, args)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err != nil {
		return exitUsage
	}
	if len(pos) != 1 {
		fmt.Fprintf(e.stderr, "pi-dispatch run: want exactly one folder, got %d argument(s)\n", len(pos))
		fset.Usage()
		return exitUsage
	}
	if (*flow == "") == (*command == "") {
		fmt.Fprintln(e.stderr, "pi-dispatch run: give exactly one of --flow NAME and --command CMD")
		return exitUsage
	}
	if *flow != "" && strings.TrimSpace(*task) == "" {
		fmt.Fprintln(e.stderr, "pi-dispatch run: --task is required with --flow")
		return exitUsage
	}

	e, err = applyEnvFileFlag(fset, e, *envFile)
	if err != nil {
		fmt.Fprintf(e.stderr, "pi-dispatch run: %v\n", err)
		return exitUsage
	}
	cfg, err := dispatch.LoadConfig(e.getenv)
	if err != nil {
		printConfigErrors(e.stderr, "pi-dispatch run", err)
		return exitUsage
	}

	folder, err := filepath.Abs(pos[0])
	if err != nil {
		fmt.Fprintf(e.stderr, "pi-dispatch run: folder %q: %v\n", pos[0], err)
		return exitUsage
	}
	folder = filepath.Clean(folder)
	switch fi, err := os.Stat(folder); {
	case errors.Is(err, fs.ErrNotExist):
		fmt.Fprintf(e.stderr, "pi-dispatch run: folder %s does not exist\n", folder)
		return exitUsage
	case err != nil:
		fmt.Fprintf(e.stderr, "pi-dispatch run: folder %s: %v\n", folder, err)
		return exitUsage
	case !fi.IsDir():
		fmt.Fprintf(e.stderr, "pi-dispatch run: %s is not a directory\n", folder)
		return exitUsage
	}

	switch state, detail := gitStatus(ctx, folder); state {
	case gitDirty:
		if !*force {
			fmt.Fprintf(e.stderr, "pi-dispatch run: %s has uncommitted changes (%s).\n  Commit or stash them, or pass --force: the agent works on the folder as it is and its changes would mix with yours.\n", folder, detail)
			return exitFailure
		}
		fmt.Fprintf(e.stderr, "pi-dispatch run: warning: %s has uncommitted changes; queued anyway (--force)\n", folder)
	case gitBroken:
		if !*force {
			fmt.Fprintf(e.stderr, "pi-dispatch run: git cannot read the repository at %s: %s\n  Fix the repository (git status must succeed there), or pass --force.\n", folder, detail)
			return exitFailure
		}
		fmt.Fprintf(e.stderr, "pi-dispatch run: warning: git cannot read %s (%s); queued anyway (--force)\n", folder, detail)
	case gitMissing:
		fmt.Fprintf(e.stderr, "pi-dispatch run: warning: git is not installed, so uncommitted changes in %s were not checked\n", folder)
	}

	client, err := dialConfigValkey(cfg)
	if err != nil {
		fmt.Fprintf(e.stderr, "pi-dispatch run: %v\n", err)
		return exitUsage
	}
	defer client.Close()
	producer, err := dispatch.NewProducer(client, dispatch.ProducerConfig{WorkerName: cfg.WorkerName, WorkerNameDeclared: cfg.WorkerNameDeclared})
	if err != nil {
		fmt.Fprintf(e.stderr, "pi-dispatch run: %v\n", err)
		return exitUsage
	}
	qctx, cancel := context.WithTimeout(ctx, runEnqueueTimeout)
	defer cancel()
	job := dispatch.Job{Kind: dispatch.KindLocal, Folder: folder, Flow: *flow, Command: *command, Task: *task, Image: *image}
	got, err := producer.EnqueueLocal(qctx, job)
	if errors.Is(err, dispatch.ErrInvalidJob) {
		fmt.Fprintf(e.stderr, "pi-dispatch run: %v\n", err)
		return exitUsage
	}
	if err != nil {
		fmt.Fprintf(e.stderr, "pi-dispatch run: could not reach Valkey at %s: %v\n  %s\n", dispatch.RedactURL(cfg.ValkeyURL), err, valkeyFix)
		return exitFailure
	}
	if got.Added {
		fmt.Fprintf(e.stdout, "queued %s\n", got.JobID)
	} else {
		fmt.Fprintf(e.stdout, "queued %s (already queued this minute)\n", got.JobID)
	}
	fmt.Fprintf(e.stderr, "queue %s, folder %s%s\n", got.Queue, folder, envFrom(e, "PI_WORKER_NAME", "VALKEY_URL"))
	noteHold(qctx, e, client, got.Queue)
	return exitOK
}

// valkeyFix is the one-line fix for a Valkey the command could not reach.
const valkeyFix = "Is it running? Start it (docker compose -f deploy/docker-compose.yml up -d valkey) or point VALKEY_URL at it."

// parseInterleaved parses flags that may come before, between or after the
// positional arguments (`run ./app --task x` and `run --task x ./app`), which
// the flag package alone stops at the first positional. Everything after "--"
// is positional.
func parseInterleaved(fset *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fset.Parse(args); err != nil {
			return nil, err
		}
		rest := fset.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		// flag.Parse consumed a "--" if it stopped there: the args before rest
		// end with it.
		if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// dialConfigValkey builds a fail-fast client of cfg's Valkey: a one-shot
// command must report a dead server in seconds, never queue behind it.
func dialConfigValkey(cfg dispatch.Config) (*redis.Client, error) {
	opts, err := redis.ParseURL(cfg.ValkeyURL)
	if err != nil {
		return nil, &dispatch.ConfigError{Var: "VALKEY_URL", Value: dispatch.RedactURL(cfg.ValkeyURL), Rule: err.Error()}
	}
	if opts.Password == "" && cfg.ValkeyPassword != "" {
		opts.Password = cfg.ValkeyPassword
	}
	// go-redis logs every failed dial to stderr; the command prints one clean
	// message instead (quietRedis is shared with the kill switch's client).
	quietRedis.Do(func() { redis.SetLogger(discardRedisLog{}) })
	opts.DialTimeout = 2 * time.Second
	opts.DialerRetries = 1 // the default retries a dead address five times
	opts.ReadTimeout = 2 * time.Second
	opts.WriteTimeout = 2 * time.Second
	opts.MaxRetries = -1 // the first failure is the answer (0 would mean 3)
	opts.ContextTimeoutEnabled = true
	opts.DisableIdentity = true // no CLIENT SETINFO round trip
	return redis.NewClient(opts), nil
}

// printConfigErrors writes one line per invalid variable.
func printConfigErrors(w io.Writer, prefix string, err error) {
	fmt.Fprintf(w, "%s: invalid configuration:\n", prefix)
	var errs dispatch.ConfigErrors
	if errors.As(err, &errs) {
		for _, ce := range errs {
			fmt.Fprintf(w, "  %v\n", ce)
		}
		return
	}
	fmt.Fprintf(w, "  %v\n", err)
}
