package main

import (
	"bufio"
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
	"github.com/pidispatch/pidispatch/valkey"
)

func init() {
	register(command{name: "run", summary: "queue a job on a folder of this host (run <folder> --task TEXT --flow NAME)", run: cmdRun})
}

// runEnqueueTimeout bounds the whole enqueue, so a dead Valkey is an error in
// seconds rather than a hang.
const runEnqueueTimeout = 5 * time.Second

const runUsage = `usage: pi-dispatch run <folder> --task TEXT (--flow NAME | --command CMD) [--image IMG] [--force] [--env-file PATH]

Queues one job that runs the agent in <folder>, on this host: onto this host's
own queue pi-jobs@<name> when PI_WORKER_NAME is declared (in the shell, or else
in the deployment .env), else onto the shared queue. A folder with uncommitted
git changes is refused unless --force. Prints "queued <jobId>" on stdout.
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
	envFile := fset.String("env-file", ".env", "the deployment .env read for PI_WORKER_NAME when the shell does not set it (\"\" to skip)")
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

	name, from, err := resolveWorkerName(e.getenv, *envFile)
	if err != nil {
		fmt.Fprintf(e.stderr, "pi-dispatch run: %v\n", err)
		return exitUsage
	}
	getenv := func(k string) string {
		if k == "PI_WORKER_NAME" {
			return name
		}
		return e.getenv(k)
	}
	cfg, err := dispatch.LoadConfig(getenv)
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
	fmt.Fprintf(e.stderr, "queue %s, folder %s%s\n", got.Queue, folder, from)
	return exitOK
}

// valkeyFix is the one-line fix for a Valkey the command could not reach.
const valkeyFix = "Is it running? Start it (docker compose -f deploy/docker-compose.yml up -d valkey) or point VALKEY_URL at it."

// resolveWorkerName returns this host's PI_WORKER_NAME as `run` must use it:
// the shell's value, else the deployment .env's, so a manual run lands on the
// queue the worker started from that .env drains. It refuses when the two
// disagree, and when the .env cannot be read and the shell says nothing (the
// job would silently go to the shared queue). from says where the name came
// from, for the message.
func resolveWorkerName(getenv func(string) string, envFile string) (name, from string, err error) {
	shell := getenv("PI_WORKER_NAME")
	if envFile == "" {
		return shell, "", nil
	}
	file, found, err := envFileValue(envFile, "PI_WORKER_NAME")
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return shell, "", nil
	case err != nil && shell == "":
		return "", "", fmt.Errorf("cannot read %s to learn PI_WORKER_NAME: %w\n  fix the file's permissions, set PI_WORKER_NAME in the shell, or pass --env-file \"\"", envFile, err)
	case err != nil:
		return shell, "", nil
	case shell != "" && found && file != "" && file != shell:
		return "", "", fmt.Errorf("PI_WORKER_NAME is %q in the shell but %q in %s\n  the job would go to a queue the worker from that .env does not drain; make them agree", shell, file, envFile)
	case shell == "" && file != "":
		return file, " (PI_WORKER_NAME from " + envFile + ")", nil
	}
	return shell, "", nil
}

// maxEnvFileBytes bounds the read of a .env: configuration, not data.
const maxEnvFileBytes = 1 << 20

// envFileValue reads key's value from a .env file as systemd and docker
// compose read it: KEY=VALUE lines, '#' comment lines, an optional "export ",
// optional quotes; an unquoted value ends at " #". The last assignment wins.
func envFileValue(path, key string) (value string, found bool, err error) {
	f, err := os.Open(path)
	if err != nil {
		return "", false, err
	}
	defer f.Close()
	sc := bufio.NewScanner(io.LimitReader(f, maxEnvFileBytes))
	sc.Buffer(make([]byte, 0, 64<<10), maxEnvFileBytes)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' || line[0] == ';' {
			continue
		}
		line = strings.TrimPrefix(line, "export ")
		k, v, ok := strings.Cut(line, "=")
		if !ok || strings.TrimSpace(k) != key {
			continue
		}
		v = strings.TrimSpace(v)
		switch {
		case len(v) >= 2 && (v[0] == '"' || v[0] == '\'') && v[len(v)-1] == v[0]:
			v = v[1 : len(v)-1]
		default:
			if i := strings.Index(v, " #"); i >= 0 {
				v = v[:i]
			}
			if i := strings.Index(v, "\t#"); i >= 0 {
				v = v[:i]
			}
			v = strings.TrimSpace(v)
		}
		value, found = v, true
	}
	if err := sc.Err(); err != nil {
		return "", false, fmt.Errorf("read %s: %w", path, err)
	}
	return value, found, nil
}

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
	// go-redis logs every failed dial to stderr; the command prints one clean
	// message instead (quietRedis is shared with the kill switch's client).
	quietRedis.Do(func() { redis.SetLogger(discardRedisLog{}) })
	client, err := valkey.NewClient(cfg.ValkeyURL, valkey.Options{Password: cfg.ValkeyPassword, OneShot: true})
	if err != nil {
		return nil, &dispatch.ConfigError{Var: "VALKEY_URL", Value: dispatch.RedactURL(cfg.ValkeyURL), Rule: err.Error()}
	}
	return client, nil
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
