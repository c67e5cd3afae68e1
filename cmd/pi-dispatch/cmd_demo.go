package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/moby/moby/client"
	"github.com/redis/go-redis/v9"

	"github.com/pidispatch/pidispatch/config"
	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/enqueue"
	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/internal/image/agentimage"
	"github.com/pidispatch/pidispatch/internal/image/jobimage"
	"github.com/pidispatch/pidispatch/internal/testkit/fakeprovider"
	"github.com/pidispatch/pidispatch/jobs"
	"github.com/pidispatch/pidispatch/stack"
	"github.com/pidispatch/pidispatch/valkey"
)

func init() {
	register(command{name: "demo", summary: "run one job end to end on this machine (builds the test job image; nothing is pulled)", help: demoHelp, run: runDemo})
}

const demoUsage = `usage: pi-dispatch demo [--agent] [--keep] [--timeout 3m]

Runs one job end to end on this machine: builds the test job image from source
(nothing is pulled), starts a worker in this process, queues one job on a
temporary folder, waits for its run record and prints it, then stops the worker
and removes everything it created except the image.

Without VALKEY_URL it uses an embedded, in-memory Valkey-protocol store that
lives only as long as the demo. With VALKEY_URL it uses that Valkey, but only a
database holding no pidispatch keys (for example redis://127.0.0.1:6379/15), so
it can never touch a real fleet's queues.

With --agent the job is the real pi coding agent: the offline agent image is
assembled (pi installed by npm from agent/image/package-lock.json), and pi, with no
network, writes the file through a scripted fake provider on this machine.
`

// Settings of the demo job and its worker.
const (
	demoDefaultTimeout = 3 * time.Minute
	demoFile           = "hello.txt"
	demoFlow           = "default"
	// demoTask is the job's instruction. The test job program reads its
	// JOB_X=value lines: print the telemetry exit line, write a file.
	demoTask = "Say hello from a container and leave a file behind.\nJOB_PRINT_EXIT_LINE=1\nJOB_WRITE_FILE=" + demoFile
	// demoJobTimeout bounds the job container itself (PI_JOB_TIMEOUT).
	demoJobTimeout = 2 * time.Minute
	demoJobMemory  = int64(256) << 20
	demoJobCPUs    = 1.0
	// demoShutdownGrace bounds the worker's shutdown once the job is done.
	demoShutdownGrace = 10 * time.Second
	// demoCheckTimeout bounds the emptiness check of a given Valkey.
	demoCheckTimeout = 5 * time.Second
)

// demoKeyPrefixes is the pidispatch keyspace (every key a worker writes) as the
// demo sees it: a database holding any key with one of these prefixes belongs
// to a deployment, and the demo refuses it. After a run on a given Valkey the
// demo deletes the keys with these prefixes, which the check proved were all
// its own.
var demoKeyPrefixes = []string{"bull:pi-jobs", "host:", "budget:", "runs:", "pi:", "slot:", "wait:", "cancel:"}

// demoEmptyDBFix is the fix printed when the given database is not empty.
const demoEmptyDBFix = "point VALKEY_URL at an empty database, e.g. redis://host:6379/15 (or unset VALKEY_URL to use the embedded store)"

// errDemoNotEmpty refuses a Valkey database that holds pidispatch keys.
var errDemoNotEmpty = errors.New("the database holds pidispatch keys")

func runDemo(ctx context.Context, e env, args []string) int {
	fset := flag.NewFlagSet("demo", flag.ContinueOnError)
	fset.SetOutput(e.stderr)
	fset.Usage = func() { fmt.Fprint(e.stderr, demoUsage); fset.PrintDefaults() }
	keep := fset.Bool("keep", false, "keep the temporary folders (workspace, run records) and print where they are")
	timeout := fset.Duration("timeout", demoDefaultTimeout, "give up after this long (the image build included; 15m with --agent)")
	agent := fset.Bool("agent", false, "run the real pi agent against a fake provider instead of the test job")
	if err := fset.Parse(args); errors.Is(err, flag.ErrHelp) {
		return exitOK
	} else if err != nil {
		return exitUsage
	}
	if fset.NArg() > 0 {
		fmt.Fprintf(e.stderr, "pi-dispatch demo: unexpected argument %q\n", fset.Arg(0))
		fset.Usage()
		return exitUsage
	}
	if *timeout <= 0 {
		fmt.Fprintln(e.stderr, "pi-dispatch demo: --timeout must be positive")
		return exitUsage
	}
	d := &demo{e: e, keep: *keep, timeout: *timeout, task: demoTask, agent: *agent}
	if *agent && !flagSet(fset, "timeout") {
		d.timeout = demoAgentTimeout
	}
	return d.run(ctx)
}

// demo is one run of the demo command. Only the goroutine running run
// writes to e.stdout.
type demo struct {
	e       env
	keep    bool
	timeout time.Duration
	// task is the demo job's task (demoTask; tests ask for other outcomes).
	task string
	// agent runs the real pi agent (the agent image) against a fake provider.
	agent bool
	// parent is the command's context, ctx the demo's (parent plus timeout).
	parent, ctx context.Context
	// errw is e.stderr shared by the demo and its worker's logger.
	errw *lockedWriter
	// undo is what run undoes when it returns (atReturn).
	undo []func()
}

// lockedWriter serialises writes from the demo and its worker's goroutines.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func (d *demo) say(format string, args ...any) { fmt.Fprintf(d.e.stdout, format+"\n", args...) }

// fail prints why the demo stopped and returns exitFailure. A failure that
// came from an interrupt or from the demo's own deadline says so first: the
// step that noticed is rarely the one that was slow.
func (d *demo) fail(format string, args ...any) int {
	msg := fmt.Sprintf(format, args...)
	switch {
	case d.parent != nil && d.parent.Err() != nil:
		msg = "interrupted: " + msg
	case d.ctx != nil && errors.Is(d.ctx.Err(), context.DeadlineExceeded):
		msg = fmt.Sprintf("gave up after %s (--timeout): %s", d.timeout, msg)
	}
	fmt.Fprintf(d.errw, "pi-dispatch demo: %s\n", msg)
	return exitFailure
}

// run is the demo's steps in order: the store, the image, the folders, the
// worker, the job, its record. A step that makes something registers its
// undoing with atReturn, so a step that fails ends the demo cleanly.
func (d *demo) run(parent context.Context) int {
	ctx, cancel := context.WithTimeout(parent, d.timeout)
	defer cancel()
	d.parent, d.ctx, d.errw = parent, ctx, &lockedWriter{w: d.e.stderr}
	defer d.unwind()
	valkeyURL, password, code := d.openStore(ctx)
	if code != exitOK {
		return code
	}
	image, code := d.prepareImage(ctx)
	if code != exitOK {
		return code
	}
	dirs, code := d.makeFolders()
	if code != exitOK {
		return code
	}
	cfg, job := d.workerConfig(valkeyURL, password, image, dirs)
	fp, code := d.startAgentProvider(&cfg, &job)
	if code != exitOK {
		return code
	}
	w, code := d.startWorker(ctx, cfg, dirs.jobs)
	if code != exitOK {
		return code
	}
	got, code := d.enqueueJob(ctx, w.stack.Valkey, cfg, job)
	if code != exitOK {
		return code
	}
	rec, code := d.awaitRecord(ctx, dirs.logs, got, w.done)
	if code != exitOK {
		return code
	}
	code = d.checkOutcome(rec, dirs.workspace, fp)
	w.stop()
	d.say("the job image %s is kept for next time (docker image rm %s removes it)", image, image)
	return code
}

// atReturn registers the undoing of what a step made, run (like defer) when run returns, so a failed step undoes only what was made.
func (d *demo) atReturn(f func()) { d.undo = append(d.undo, f) }

// unwind runs the functions atReturn registered, the last one first.
func (d *demo) unwind() {
	for i := len(d.undo) - 1; i >= 0; i-- {
		d.undo[i]()
	}
	d.undo = nil
}

// openStore is step 1: the embedded store unless VALKEY_URL names one, which must hold no pidispatch keys.
func (d *demo) openStore(ctx context.Context) (valkeyURL, password string, code int) {
	valkeyURL, password = d.e.getenv("VALKEY_URL"), d.e.getenv("VALKEY_PASSWORD")
	if valkeyURL != "" {
		code, cleanup := d.claimValkey(ctx, valkeyURL, password)
		if code != exitOK {
			return "", "", code
		}
		d.atReturn(cleanup)
		return valkeyURL, password, exitOK
	}
	mini, err := miniredis.Run()
	if err != nil {
		return "", "", d.fail("start the embedded store: %v", err)
	}
	d.atReturn(mini.Close)
	d.banner()
	return "redis://" + mini.Addr() + "/0", "", exitOK
}

// prepareImage is step 2: a Docker daemon that answers and the job's image, built from source (the agent image with --agent).
func (d *demo) prepareImage(ctx context.Context) (string, int) {
	dc, err := client.New(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		return "", d.fail("docker client: %v\n  the demo runs its job in a Docker container; install Docker or set DOCKER_HOST", err)
	}
	d.atReturn(func() { _ = dc.Close() })
	pctx, pcancel := context.WithTimeout(ctx, 5*time.Second)
	_, err = dc.Ping(pctx, client.PingOptions{NegotiateAPIVersion: true})
	pcancel()
	if err != nil {
		return "", d.fail("no Docker daemon answers: %s\n  start Docker (or set DOCKER_HOST) and run the demo again", err)
	}
	image := jobimage.TestTag
	if d.agent {
		image = agentimage.Tag
		if err := d.ensureAgentImage(ctx, dc); err != nil {
			return "", d.fail("assembling the agent image failed: %s", err)
		}
	} else if err := d.ensureImage(ctx, dc, jobimage.TestTag); err != nil {
		return "", d.fail("building the job image failed: %s", err)
	}
	return image, exitOK
}

// demoDirs are the demo's temporary folders.
type demoDirs struct {
	workspace string // the job's folder
	logs      string // the run records
	jobs      string // the worker's jobs dir
}

// makeFolders is step 3: the job's workspace, the run records and the jobs dir, removed when run returns unless --keep.
func (d *demo) makeFolders() (demoDirs, int) {
	root, err := os.MkdirTemp("", "pidispatch-demo-")
	if err == nil {
		root, err = filepath.Abs(root)
	}
	if err != nil {
		return demoDirs{}, d.fail("temporary folder: %v", err)
	}
	d.atReturn(func() { d.leaveFolders(root) })
	dirs := demoDirs{workspace: filepath.Join(root, "workspace"), logs: filepath.Join(root, "logs"), jobs: filepath.Join(root, "jobs")}
	for _, dir := range []string{dirs.workspace, dirs.logs, dirs.jobs} {
		if err := os.Mkdir(dir, 0o700); err != nil {
			return demoDirs{}, d.fail("temporary folder: %v", err)
		}
	}
	// The job runs as the image's root user without capabilities, so it can
	// write only to a folder open to everyone (this one is temporary).
	if err := os.Chmod(dirs.workspace, 0o777); err != nil {
		return demoDirs{}, d.fail("temporary folder: %v", err)
	}
	d.say("workspace: %s", dirs.workspace)
	return dirs, exitOK
}

// leaveFolders removes the demo's folders, or with --keep says where they are.
func (d *demo) leaveFolders(root string) {
	if d.keep {
		d.say("kept the demo's folders (--keep): %s", root)
		return
	}
	if err := os.RemoveAll(root); err != nil {
		fmt.Fprintf(d.errw, "pi-dispatch demo: could not remove %s: %v\n", root, err)
	}
}

// workerConfig configures the demo worker (one job at a time, in the demo's folders only) and the job it runs.
func (d *demo) workerConfig(valkeyURL, password, image string, dirs demoDirs) (config.Config, jobs.Job) {
	cfg := config.Default()
	cfg.ValkeyURL, cfg.ValkeyPassword = valkeyURL, password
	cfg.WorkerName, cfg.WorkerNameDeclared = demoWorkerName(fleet.DefaultName(), os.Getpid()), true
	cfg.JobImage = image
	cfg.LogsDir = dirs.logs
	cfg.Concurrency = 1
	cfg.JobTimeout = demoJobTimeout
	cfg.JobMemory, cfg.JobCPUs = demoJobMemory, demoJobCPUs
	// The demo's job works in its own temporary folder and nowhere else.
	// Run as root, that folder is root's: the demo says so explicitly, as
	// an operator would with PI_CONTAINER_USER.
	cfg.FolderRoots = []string{dirs.workspace}
	cfg.ContainerUserExplicit = os.Geteuid() == 0
	// A fleet key of the demo's own, as init writes one: its job is signed
	// and checked like any other.
	cfg.FleetKey = demoFleetKey()
	job := jobs.Job{Kind: jobs.KindLocal, Folder: dirs.workspace, Flow: demoFlow, Task: d.task}
	return cfg, job
}

// demoWorker is the demo's worker, running in the background.
type demoWorker struct {
	d       *demo
	stack   *stack.Stack
	done    chan error // Worker.Run's result
	cancel  context.CancelFunc
	stopped bool
}

// startWorker is step 4: the worker, booted through the same wiring as cmd/worker, running until stopped or run returns.
func (d *demo) startWorker(ctx context.Context, cfg config.Config, jobDirs string) (*demoWorker, int) {
	// The worker's own events: warnings and errors only, so a problem shows.
	logger := slog.New(slog.NewTextHandler(d.errw, &slog.HandlerOptions{Level: slog.LevelWarn}))
	s, err := stack.Build(ctx, cfg, logger, dispatch.Tuning{
		Version: "demo", JobsDir: jobDirs, ShutdownGrace: demoShutdownGrace, Logger: logger,
	})
	if err != nil {
		return nil, d.fail("boot the demo worker: %v", err)
	}
	d.atReturn(s.Close)
	workerCtx, stopWorker := context.WithCancel(context.WithoutCancel(ctx))
	w := &demoWorker{d: d, stack: s, done: make(chan error, 1), cancel: stopWorker}
	go func() { w.done <- s.Worker.Run(workerCtx) }()
	d.atReturn(w.stop)
	d.say("started worker %s (queues pi-jobs and pi-jobs@%s)", cfg.WorkerName, cfg.WorkerName)
	return w, exitOK
}

// stop stops the worker and waits for it, once: run stops it before its last words, an early return on the way out.
func (w *demoWorker) stop() {
	if w.stopped {
		return
	}
	w.stopped = true
	w.cancel()
	w.d.say("stopping the demo worker...")
	if err := <-w.done; err != nil {
		fmt.Fprintf(w.d.errw, "pi-dispatch demo: worker: %v\n", err)
	}
}

// demoFleetKey is a fresh random key, held in memory for the demo's run.
func demoFleetKey() fleet.Key {
	b := make([]byte, 48)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24)
	k, _ := fleet.NewKey(b)
	return k
}

// enqueueJob is step 5: one local job on the workspace.
func (d *demo) enqueueJob(ctx context.Context, vk *redis.Client, cfg config.Config, job jobs.Job) (enqueue.Enqueued, int) {
	producer, err := enqueue.NewProducer(vk, enqueue.ProducerConfig{
		WorkerName: cfg.WorkerName, WorkerNameDeclared: true, Attempts: 1, FleetKey: cfg.FleetKey,
	})
	if err != nil {
		return enqueue.Enqueued{}, d.fail("producer: %v", err)
	}
	qctx, qcancel := context.WithTimeout(ctx, 5*time.Second)
	got, err := producer.EnqueueLocal(qctx, job)
	qcancel()
	if err != nil {
		return enqueue.Enqueued{}, d.fail("enqueue the demo job: %s", err)
	}
	d.say("queued job %s on %s", got.JobID, got.Queue)
	return got, exitOK
}

// awaitRecord is step 6: it waits for the job's run record and prints it, indented, so the operator sees what a worker records.
func (d *demo) awaitRecord(ctx context.Context, logs string, got enqueue.Enqueued, workerDone <-chan error) (jobs.Record, int) {
	rec, raw, err := d.waitRecord(ctx, logs, got.Queue, got.JobID, workerDone)
	if err != nil {
		return rec, d.fail("%v", err)
	}
	var pretty bytes.Buffer
	if json.Indent(&pretty, bytes.TrimSpace(raw), "", "  ") != nil {
		pretty.Reset()
		pretty.Write(raw)
	}
	d.say("\nrun record (%s):\n%s", filepath.Join(logs, jobs.RecordName(got.Queue, got.JobID, 1)), pretty.String())
	return rec, exitOK
}

// checkOutcome decides the exit code: the job must have completed and left its file, and then the demo says what to try next.
func (d *demo) checkOutcome(rec jobs.Record, workspace string, fp *fakeprovider.Server) int {
	if rec.Outcome != jobs.OutcomeCompleted {
		return d.fail("the job did not complete: outcome %s, reason %s (see the worker's messages above)", rec.Outcome, rec.Reason)
	}
	written, err := os.ReadFile(filepath.Join(workspace, demoFile))
	if err != nil {
		return d.fail("the job completed but its file is missing: %v", err)
	}
	d.say("\nthe job wrote %s in the workspace:\n  %s", demoFile, strings.TrimSpace(string(written)))
	if fp != nil {
		d.agentSummary(rec, fp)
	} else {
		d.say("(the test job reports made-up telemetry: no agent ran and nothing was spent)")
	}
	d.nextSteps()
	return exitOK
}

// ensureImage builds the job image when it is missing or stale, printing
// the elapsed time every few seconds while it builds.
func (d *demo) ensureImage(ctx context.Context, dc *client.Client, tag string) error {
	img, err := dc.ImageInspect(ctx, tag)
	if err == nil && img.Config != nil && img.Config.Labels[jobimage.SourceLabel] == jobimage.SourceDigest() {
		d.say("job image %s is ready (built earlier)", tag)
		return nil
	}
	d.say("building the demo job image %s (nothing is pulled)...", tag)
	start := time.Now()
	done := make(chan error, 1)
	go func() { done <- jobimage.Ensure(ctx, dc, tag) }()
	tick := time.NewTicker(5 * time.Second)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			if err == nil {
				d.say("built %s in %ds", tag, int(time.Since(start).Seconds()))
			}
			return err
		case <-tick.C:
			d.say("  still building (%ds)", int(time.Since(start).Seconds()))
		}
	}
}

// banner says loudly that the embedded store is not a Valkey.
func (d *demo) banner() {
	line := strings.Repeat("=", 76)
	d.say("%s", line)
	d.say("  VALKEY_URL is not set: using an EMBEDDED IN-MEMORY store for this demo.")
	d.say("  Nothing is durable: it disappears when the demo ends. It backs the demo")
	d.say("  only, never a worker in production. To run the demo on a real Valkey:")
	d.say("    VALKEY_URL=redis://127.0.0.1:6379/15 go run ./cmd/pi-dispatch demo")
	d.say("  (an empty database: the demo refuses one holding pidispatch keys)")
	d.say("%s", line)
}

// claimValkey checks that the given Valkey's database holds no pidispatch
// key and returns a cleanup that deletes the keys the demo leaves there. It
// prints why and returns a non-zero code when the demo must not use it.
func (d *demo) claimValkey(ctx context.Context, rawURL, password string) (int, func()) {
	shown := config.RedactURL(rawURL)
	rc, err := valkey.NewClient(rawURL, valkey.Options{Password: password, OneShot: true})
	if err != nil {
		fmt.Fprintf(d.errw, "pi-dispatch demo: VALKEY_URL=%s is %v\n", shown, err)
		return exitUsage, nil
	}
	quietRedis.Do(func() { redis.SetLogger(discardRedisLog{}) })
	opts := rc.Options()

	cctx, cancel := context.WithTimeout(ctx, demoCheckTimeout)
	found, err := pidispatchKeys(cctx, rc, 1)
	cancel()
	switch {
	case errors.Is(err, errDemoNotEmpty):
		_ = rc.Close()
		fmt.Fprintf(d.errw, "pi-dispatch demo: refusing database %d of %s: it holds pidispatch keys (%s), so it may be a deployment's.\n  %s\n",
			opts.DB, shown, strings.Join(found, ", "), demoEmptyDBFix)
		return exitUsage, nil
	case err != nil:
		_ = rc.Close()
		return d.fail("could not check database %d of %s: %v\n  %s", opts.DB, shown, err, valkeyFix), nil
	}
	d.say("using database %d of %s (it holds no pidispatch keys; the demo removes the ones it creates)", opts.DB, shown)
	return exitOK, func() {
		defer rc.Close()
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), demoCheckTimeout)
		defer cancel()
		keys, err := pidispatchKeys(cctx, rc, -1)
		if err == nil && len(keys) > 0 {
			err = rc.Del(cctx, keys...).Err()
		}
		if err != nil {
			fmt.Fprintf(d.errw, "pi-dispatch demo: could not remove the demo's keys from database %d of %s: %v\n", opts.DB, shown, err)
		}
	}
}

// pidispatchKeys scans the client's database for keys in the pidispatch
// keyspace. With limit > 0 it stops at limit keys and returns them with
// errDemoNotEmpty; with limit < 0 it returns every one. A scan that cannot
// finish (a huge database, a deadline) is an error, never a partial answer.
func pidispatchKeys(ctx context.Context, rc *redis.Client, limit int) ([]string, error) {
	size, err := rc.DBSize(ctx).Result()
	if err != nil {
		return nil, err
	}
	if size == 0 {
		return nil, nil
	}
	var found []string
	var cursor uint64
	for {
		keys, next, err := rc.Scan(ctx, cursor, "*", 1000).Result()
		if err != nil {
			return nil, fmt.Errorf("scan: %w", err)
		}
		for _, k := range keys {
			for _, p := range demoKeyPrefixes {
				if strings.HasPrefix(k, p) {
					found = append(found, k)
					break
				}
			}
			if limit > 0 && len(found) >= limit {
				return found, errDemoNotEmpty
			}
		}
		if cursor = next; cursor == 0 {
			return found, nil
		}
	}
}

// waitRecord polls the logs folder for the job's run record, printing
// progress every second. It returns early when the worker stops.
func (d *demo) waitRecord(ctx context.Context, logs, queue, jobID string, workerDone <-chan error) (jobs.Record, []byte, error) {
	path := filepath.Join(logs, jobs.RecordName(queue, jobID, 1)) // the demo job runs once
	start := time.Now()
	poll := time.NewTicker(200 * time.Millisecond)
	defer poll.Stop()
	lastShown := 0
	for {
		raw, err := os.ReadFile(path)
		if err == nil {
			var rec jobs.Record
			if err := json.Unmarshal(raw, &rec); err != nil {
				return rec, raw, fmt.Errorf("run record %s: %w", path, err)
			}
			return rec, raw, nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return jobs.Record{}, nil, fmt.Errorf("run record: %w", err)
		}
		if n := int(time.Since(start).Seconds()); n > lastShown {
			lastShown = n
			d.say("job %s running (%ds)", jobID, n)
		}
		select {
		case <-ctx.Done():
			return jobs.Record{}, nil, fmt.Errorf("no run record for job %s yet: %w", jobID, ctx.Err())
		case err := <-workerDone:
			if err == nil {
				err = errors.New("it stopped")
			}
			return jobs.Record{}, nil, fmt.Errorf("the demo worker ended before the job did: %w", err)
		case <-poll.C:
		}
	}
}

func (d *demo) nextSteps() {
	d.say(`
what to try next:
  go run ./cmd/pi-dispatch init      scaffold .env, triggers.json and scoped-limits.json here (never overwrites)
  set -a; . ./.env; set +a; go run ./cmd/worker
                                     run a worker on your Valkey with that configuration
  go run ./cmd/pi-dispatch run <folder> --flow NAME --task TEXT
                                     queue a job on a folder of this host
  go run ./cmd/pi-dispatch status    pause state and job counts of every queue
  go run ./cmd/pi-dispatch doctor    check this host: Valkey, Docker, the job image, the configuration
  docs: docs/configuration.md, docs/fleet.md, docs/container-contract.md, examples/README.md`)
}

// demoWorkerName is a declared worker name no real host uses:
// demo-<hostname>-<pid>, the hostname cut so the name fits 64 characters.
func demoWorkerName(host string, pid int) string {
	suffix := "-" + strconv.Itoa(pid)
	room := 64 - len("demo-") - len(suffix)
	host = strings.Trim(host, ".-_")
	if len(host) > room {
		host = strings.TrimRight(host[:room], ".-_")
	}
	name := "demo-" + host + suffix
	if host == "" || fleet.ValidateName(name) != nil {
		name = "demo" + suffix
	}
	return name
}

// flagSet reports whether the command line set the named flag.
func flagSet(fset *flag.FlagSet, name string) bool {
	set := false
	fset.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}
