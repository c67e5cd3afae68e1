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

	"github.com/pidispatch/pidispatch/config"
	"github.com/pidispatch/pidispatch/enqueue"
	"github.com/pidispatch/pidispatch/jobs"
	"github.com/pidispatch/pidispatch/queue"
	"github.com/pidispatch/pidispatch/valkey"
)

func init() {
	register(command{name: "run", summary: "queue a job on a folder of this host (run <folder> --task TEXT --flow NAME)", help: runHelp, run: cmdRun})
}

// runEnqueueTimeout bounds the whole enqueue, so a dead Valkey is an error in
// seconds rather than a hang.
const runEnqueueTimeout = 5 * time.Second

const runUsage = `usage: pi-dispatch run <folder> (--task TEXT | --task - | --task-file PATH) [--flow NAME | --command CMD] [--image IMG] [--new] [--force] [--env-file PATH]

Queues one job that runs the agent in <folder>, on this host: onto this host's
own queue pi-jobs@<name> when PI_WORKER_NAME is declared (in the shell, or else
in the env file: $PI_ENV_FILE, else ./.env), else onto the shared queue. The folder must be a clean
git work tree: a folder with uncommitted changes, or one outside any git
repository, is refused unless --force. The job image runs the flow named by
--flow (default "` + defaultFlow + `") with the task, or the prompt command named by
--command; docs/flows.md says what each means. The same run asked for twice
within one minute is one job; --new queues another. Prints "queued <jobId>" on
stdout.
`

// defaultFlow is the flow of a run that names neither --flow nor --command:
// the job image's general "carry out the task" flow (docs/flows.md).
const defaultFlow = "default"

// runArgs is what the run command's arguments ask for.
type runArgs struct {
	folder       string // as given; made absolute by runFolder
	job          jobs.Job
	force        bool
	fresh        bool    // --new
	envFile      *string // --env-file
	envFileGiven bool
}

func cmdRun(ctx context.Context, e env, args []string) int {
	ra, code, ok := parseRunArgs(e, args)
	if !ok {
		return code
	}
	e, err := applyEnvFile(e, ra.envFileGiven, *ra.envFile)
	if err != nil {
		fmt.Fprintf(e.stderr, "pi-dispatch run: %v\n", err)
		return exitUsage
	}
	cfg, err := config.Load(e.getenv)
	if err != nil {
		printConfigErrors(e.stderr, "pi-dispatch run", err)
		return exitUsage
	}
	folder, code := runFolder(ctx, e, ra)
	if code != exitOK {
		return code
	}
	ra.job.Folder = folder
	warnFolderNotAllowed(e, cfg, folder)
	client, err := dialConfigValkey(cfg)
	if err != nil {
		fmt.Fprintf(e.stderr, "pi-dispatch run: %v\n", err)
		return exitUsage
	}
	defer client.Close()
	return queueRun(ctx, e, client, cfg, ra)
}

// warnFolderNotAllowed says before anything is queued that a worker of this configuration would refuse the job folder-not-allowed.
func warnFolderNotAllowed(e env, cfg config.Config, folder string) {
	// Only a warning: the worker that runs the job reads its own environment.
	if _, err := cfg.ResolveFolder(folder); err != nil {
		fmt.Fprintf(e.stderr, "pi-dispatch run: warning: a worker of this configuration refuses this job (folder-not-allowed): %v\n", err)
		if len(cfg.FolderRoots) > 0 {
			fmt.Fprintf(e.stderr, "  PI_FOLDER_ROOTS=%s; add a folder that holds %s to it\n", strings.Join(cfg.FolderRoots, ":"), folder)
		}
	}
}

// queueRun queues the job and reports it, with what will keep it from starting, all within one enqueue deadline.
func queueRun(ctx context.Context, e env, client *redis.Client, cfg config.Config, ra runArgs) int {
	producer, err := enqueue.NewProducer(client, enqueue.ProducerConfig{WorkerName: cfg.WorkerName, WorkerNameDeclared: cfg.WorkerNameDeclared, FleetKey: cfg.FleetKey,
		UnsignedQueues: cfg.UnsignedQueues, Queue: queue.Config{Layout: queue.Layout(cfg.BullMQLayout)}})
	if err != nil {
		fmt.Fprintf(e.stderr, "pi-dispatch run: %v\n", err)
		return exitUsage
	}
	qctx, cancel := context.WithTimeout(ctx, runEnqueueTimeout)
	defer cancel()
	add := producer.EnqueueLocal
	if ra.fresh {
		add = producer.EnqueueLocalNew
	}
	got, err := add(qctx, ra.job)
	if errors.Is(err, jobs.ErrInvalidJob) {
		fmt.Fprintf(e.stderr, "pi-dispatch run: %v\n", err)
		return exitUsage
	}
	if errors.Is(err, enqueue.ErrUnsigned) {
		fmt.Fprintf(e.stderr, "pi-dispatch run: not queued: %v%s\n", err, envFrom(e, "PI_FLEET_KEY_FILE", "PI_UNSIGNED_QUEUES"))
		return exitUsage
	}
	if errors.Is(err, valkey.ErrAuthRefused) {
		fmt.Fprintf(e.stderr, "pi-dispatch run: could not queue at %s: %v\n", config.RedactURL(cfg.ValkeyURL), err)
		return exitFailure
	}
	if err != nil {
		fmt.Fprintf(e.stderr, "pi-dispatch run: could not reach Valkey at %s: %v\n  %s\n", config.RedactURL(cfg.ValkeyURL), err, valkeyFix)
		return exitFailure
	}
	code := reportQueued(e, got)
	fmt.Fprintf(e.stderr, "queue %s, folder %s%s\n", got.Queue, ra.job.Folder, envFrom(e, "PI_WORKER_NAME", "VALKEY_URL"))
	noteHold(qctx, e, client, got.Queue)
	warnCannotStart(qctx, e, client, cfg, got.JobID, got.Queue)
	return code
}

// parseRunArgs reads the run command's arguments into the job to queue.
// ok is false when the command must end with code (a usage error, or help).
func parseRunArgs(e env, args []string) (ra runArgs, code int, ok bool) {
	fset := flag.NewFlagSet("run", flag.ContinueOnError)
	fset.SetOutput(e.stderr)
	fset.Usage = func() { fmt.Fprint(e.stderr, runUsage); fset.PrintDefaults() }
	task := fset.String("task", "", "the instruction for the agent (required with a flow); - reads it from stdin")
	taskFile := fset.String("task-file", "", "read the instruction from this file (for a long task)")
	flow := fset.String("flow", defaultFlow, "the agent flow to run")
	command := fset.String("command", "", "a prompt command to run instead of a flow")
	image := fset.String("image", "", "the job image for this run (default PI_JOB_IMAGE; never pulled)")
	fset.BoolVar(&ra.force, "force", false, "queue even when the folder has uncommitted git changes or is not in a git repository")
	fset.BoolVar(&ra.fresh, "new", false, "queue a new job even when the same run was queued this minute")
	ra.envFile = envFileFlag(fset)
	pos, err := parseInterleaved(fset, args)
	if errors.Is(err, flag.ErrHelp) {
		return ra, exitOK, false
	}
	if err != nil {
		return ra, exitUsage, false
	}
	fail := func(format string, args ...any) (runArgs, int, bool) {
		fmt.Fprintf(e.stderr, "pi-dispatch run: "+format+"\n", args...)
		return ra, exitUsage, false
	}
	if len(pos) != 1 {
		fmt.Fprintf(e.stderr, "pi-dispatch run: want exactly one folder, got %d argument(s)\n", len(pos))
		fset.Usage()
		return ra, exitUsage, false
	}
	ra.folder = pos[0]
	set := map[string]bool{}
	fset.Visit(func(f *flag.Flag) { set[f.Name] = true })
	ra.envFileGiven = set["env-file"]
	switch {
	case *command != "" && set["flow"]:
		return fail("give only one of --flow NAME and --command CMD")
	case *command != "":
		*flow = ""
	case *flow == "":
		return fail("--flow needs a flow name (leave it out for the default flow %q)", defaultFlow)
	}
	text, err := runTask(e, *task, *taskFile, set["task"])
	if err != nil {
		return fail("%v", err)
	}
	if *flow != "" && strings.TrimSpace(text) == "" {
		return fail("--task is required with a flow (or --task-file PATH, or --task - to read it from stdin)")
	}
	ra.job = jobs.Job{Kind: jobs.KindLocal, Flow: *flow, Command: *command, Task: text, Image: *image}
	return ra, exitOK, true
}

// runTask returns the task text: --task's value, or the contents of
// --task-file, or stdin for "--task -". A file or stdin is read up to the job
// model's task limit, and its trailing line breaks are dropped.
func runTask(e env, task, file string, taskSet bool) (string, error) {
	var r io.Reader
	var from string
	switch {
	case file != "" && taskSet:
		return "", errors.New("give only one of --task and --task-file")
	case file != "":
		f, err := os.Open(file)
		if err != nil {
			return "", fmt.Errorf("--task-file: %w", err)
		}
		defer f.Close()
		r, from = f, file
	case task == "-":
		r, from = e.stdin, "stdin"
		if r == nil {
			r = os.Stdin
		}
	default:
		return task, nil
	}
	b, err := io.ReadAll(io.LimitReader(r, jobs.MaxTaskBytes+1))
	if err != nil {
		return "", fmt.Errorf("read the task from %s: %w", from, err)
	}
	if len(b) > jobs.MaxTaskBytes {
		return "", fmt.Errorf("the task in %s is longer than %d bytes, the limit of a job's task; shorten it", from, jobs.MaxTaskBytes)
	}
	text := strings.TrimRight(string(b), "\r\n")
	if strings.TrimSpace(text) == "" {
		return "", fmt.Errorf("the task in %s is empty", from)
	}
	return text, nil
}

// runFolder makes the folder absolute, checks the job before anything is
// asked of git, and refuses a folder that is missing, not a directory, dirty,
// or outside a git repository (the last two unless --force). It returns the
// clean absolute folder, or the exit code to end with.
func runFolder(ctx context.Context, e env, ra runArgs) (string, int) {
	folder, err := filepath.Abs(ra.folder)
	if err != nil {
		fmt.Fprintf(e.stderr, "pi-dispatch run: folder %q: %v\n", ra.folder, err)
		return "", exitUsage
	}
	folder = filepath.Clean(folder)
	switch fi, err := os.Stat(folder); {
	case errors.Is(err, fs.ErrNotExist):
		fmt.Fprintf(e.stderr, "pi-dispatch run: folder %s does not exist\n", folder)
		return "", exitUsage
	case err != nil:
		fmt.Fprintf(e.stderr, "pi-dispatch run: folder %s: %v\n", folder, err)
		return "", exitUsage
	case !fi.IsDir():
		fmt.Fprintf(e.stderr, "pi-dispatch run: %s is not a directory\n", folder)
		return "", exitUsage
	}
	job := ra.job
	job.Folder = folder
	if err := job.Validate(); err != nil {
		fmt.Fprintf(e.stderr, "pi-dispatch run: %v\n", err)
		return "", exitUsage
	}
	return folder, gitCheck(ctx, e, folder, ra.force)
}

// gitCheck refuses a folder the agent should not change in place: one with
// uncommitted changes (they would mix with the agent's) and one outside any
// git repository (nothing would show or undo what the agent did), unless
// force. Without git it warns and lets the run go.
func gitCheck(ctx context.Context, e env, folder string, force bool) int {
	state, detail := gitStatus(ctx, folder)
	var refusal, warning string
	switch state {
	case gitDirty:
		refusal = fmt.Sprintf("%s has uncommitted changes (%s).\n  Commit or stash them, or pass --force: the agent works on the folder as it is and its changes would mix with yours.", folder, detail)
		warning = fmt.Sprintf("%s has uncommitted changes; queued anyway (--force)", folder)
	case gitNotRepo:
		refusal = fmt.Sprintf("%s is not in a git repository.\n  The agent changes the folder in place, and without git nothing shows or undoes what it did. Run git init and commit the folder, or pass --force.", folder)
		warning = fmt.Sprintf("%s is not in a git repository; queued anyway (--force)", folder)
	case gitBroken:
		refusal = fmt.Sprintf("git cannot read the repository at %s: %s\n  Fix the repository (git status must succeed there), or pass --force.", folder, detail)
		warning = fmt.Sprintf("git cannot read %s (%s); queued anyway (--force)", folder, detail)
	case gitUnsafe:
		refusal = fmt.Sprintf("the git configuration of %s sets %s, which makes git run a program: pidispatch runs no git there.\n  A job may have written it: inspect the repository's .git/config (git config --file .git/config --list), remove the key, or pass --force.", folder, detail)
		warning = fmt.Sprintf("the git configuration of %s sets %s; not checked, queued anyway (--force)", folder, detail)
	case gitMissing:
		fmt.Fprintf(e.stderr, "pi-dispatch run: warning: git is not installed, so uncommitted changes in %s were not checked\n", folder)
		return exitOK
	default:
		return exitOK
	}
	if !force {
		fmt.Fprintf(e.stderr, "pi-dispatch run: %s\n", refusal)
		return exitFailure
	}
	fmt.Fprintf(e.stderr, "pi-dispatch run: warning: %s\n", warning)
	return exitOK
}

// reportQueued prints what the enqueue did. A duplicate names the existing
// job and its state: one still to run (or running) satisfies the request,
// exit 0; one that already finished means nothing will run, exit 1, with
// the flag that queues another.
func reportQueued(e env, got enqueue.Enqueued) int {
	switch got.State {
	case "":
		if got.Added {
			fmt.Fprintf(e.stdout, "queued %s\n", got.JobID)
		} else {
			fmt.Fprintf(e.stdout, "queued %s (already queued this minute)\n", got.JobID)
		}
		return exitOK
	case queue.StateCompleted, queue.StateFailed:
		fmt.Fprintf(e.stderr, "pi-dispatch run: the same run was already queued this minute as %s, which is %s; nothing new was queued.\n  Pass --new to run it again.\n", got.JobID, got.State)
		return exitFailure
	}
	fmt.Fprintf(e.stdout, "queued %s (already queued this minute, %s)\n", got.JobID, got.State)
	fmt.Fprintf(e.stderr, "pi-dispatch run: the same run was already queued this minute as %s (%s); pass --new for another run\n", got.JobID, got.State)
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
func dialConfigValkey(cfg config.Config) (*redis.Client, error) {
	// go-redis logs every failed dial to stderr; the command prints one clean
	// message instead (quietRedis is shared with the kill switch's client).
	quietRedis.Do(func() { redis.SetLogger(discardRedisLog{}) })
	client, err := valkey.NewClient(cfg.ValkeyURL, valkey.Options{Password: cfg.ValkeyPassword, OneShot: true})
	if err != nil {
		return nil, &config.ConfigError{Var: "VALKEY_URL", Value: config.RedactURL(cfg.ValkeyURL), Rule: err.Error()}
	}
	return client, nil
}

// printConfigErrors writes one line per invalid variable.
func printConfigErrors(w io.Writer, prefix string, err error) {
	fmt.Fprintf(w, "%s: invalid configuration:\n", prefix)
	var errs config.ConfigErrors
	if errors.As(err, &errs) {
		for _, ce := range errs {
			fmt.Fprintf(w, "  %v\n", ce)
		}
		return
	}
	fmt.Fprintf(w, "  %v\n", err)
}
