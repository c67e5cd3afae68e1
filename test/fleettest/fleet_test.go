package fleettest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/moby/moby/client"
	"github.com/redis/go-redis/v9"

	"github.com/pidispatch/pidispatch/enqueue"
	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/internal/image/jobimage"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/jobs"
	"github.com/pidispatch/pidispatch/operator"
	"github.com/pidispatch/pidispatch/queue"
	"github.com/pidispatch/pidispatch/registry"
	"github.com/pidispatch/pidispatch/runner"
)

// scenario is one independent fleet: its own Valkey database (or server),
// its workers, their files, and its share of the ledger.
type scenario struct {
	t      *testing.T
	tag    string
	db     int
	url    string
	client *redis.Client
	dir    string

	mu      sync.Mutex
	workers []*worker
}

// newScenario gives the test a fresh database of the suite's redis-server.
func newScenario(t *testing.T, tag string) *scenario {
	t.Helper()
	return newScenarioOn(t, tag, suite.redis)
}

// newScenarioOn builds a scenario on srv. The database number comes from the
// suite's counter either way: it is also the suffix of the worker names.
func newScenarioOn(t *testing.T, tag string, srv *redisServer) *scenario {
	t.Helper()
	requireFleet(t) // before srv is touched: without the suite it is nil
	return newScenarioAt(t, tag, srv.url, srv.client)
}

// newScenarioAt builds a scenario on the database whose URL and client url
// and client give (a Sentinel URL and a failover client, for one).
func newScenarioAt(t *testing.T, tag string, url func(db int) string, client func(db int) *redis.Client) *scenario {
	t.Helper()
	requireFleet(t)
	db := int(suite.nextDB.Add(1))
	if db >= redisDatabases {
		t.Fatalf("the suite ran out of databases (%d)", redisDatabases)
	}
	dir := filepath.Join(suite.dir, fmt.Sprintf("%s-%d", tag, db))
	if err := os.MkdirAll(dir, 0o750); err != nil {
		t.Fatal(err)
	}
	s := &scenario{t: t, tag: tag, db: db, url: url(db), client: client(db), dir: dir}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.client.FlushDB(ctx).Err(); err != nil {
		t.Fatalf("flush database %d: %v", db, err)
	}
	// Registered first, so it runs after every process's cleanup: no
	// container of this scenario's workers outlives it.
	t.Cleanup(func() {
		s.removeContainers()
		s.client.Close()
	})
	// Runs after the processes' own cleanups (cleanups run last-in first-
	// out): a failed scenario shows every process's last lines, shutdown
	// included.
	t.Cleanup(func() {
		if t.Failed() {
			t.Log("worker logs at the failure:\n" + s.logs())
		}
	})
	return s
}

// requireFleet skips without PIDISPATCH_FLEET=1 and fails when the suite
// could not be prepared (a missing service never skips a requested run).
func requireFleet(t *testing.T) {
	t.Helper()
	livetest.SkipShort(t)
	if os.Getenv(envFleet) != "1" {
		t.Skip("the fleet suite runs with " + envFleet + "=1 (.ci/run sets it)")
	}
	if suite.setupErr != nil {
		t.Fatalf("fleet suite setup: %v", suite.setupErr)
	}
}

// worker is one worker name of a scenario: its files and every process
// started under it, in order.
type worker struct {
	s       *scenario
	name    string
	home    string
	logsDir string
	env     map[string]string
	bin     string // the worker binary its processes run

	mu    sync.Mutex
	procs []*proc
}

// worker prepares (does not start) a worker named <role>-<suite id>-<db>
// with the suite's common environment plus extra.
func (s *scenario) worker(role string, extra map[string]string) *worker {
	s.t.Helper()
	name := fmt.Sprintf("%s-%s-%d", role, suite.id, s.db)
	if err := fleet.ValidateName(name); err != nil {
		s.t.Fatal(err)
	}
	home := filepath.Join(s.dir, name)
	w := &worker{s: s, name: name, home: home, logsDir: filepath.Join(home, "logs"), bin: suite.workerBin}
	for _, d := range []string{w.logsDir, filepath.Join(home, "tmp")} {
		if err := os.MkdirAll(d, 0o750); err != nil {
			s.t.Fatal(err)
		}
	}
	w.env = map[string]string{
		"VALKEY_URL": s.url, "PI_UNSIGNED_QUEUES": "*",
		"PI_WORKER_NAME": name,
		"PI_JOB_IMAGE":   jobimage.TestTag,
		"PI_LOGS_DIR":    w.logsDir,
		// Three workers and their containers share two cores.
		"PI_JOB_MEMORY":  "256m",
		"PI_JOB_CPUS":    "0.5",
		"PI_CONCURRENCY": "2",
		// The default cap (25 starts a day) is below what one scenario runs.
		"PI_DAILY_CAP": "1000",
		// Folder jobs work in the tests' temporary folders, owned by
		// whoever runs the tests (root in a container).
		"PI_FOLDER_ROOTS":   os.TempDir(),
		"PI_CONTAINER_USER": "owner",
		// The jobs dir (a restart must find its predecessor's) is under it.
		"TMPDIR": filepath.Join(home, "tmp"),
		"TZ":     "UTC",
	}
	for k, v := range extra {
		w.env[k] = v
	}
	suite.ledger.addDir(s.key(), w.logsDir)
	s.mu.Lock()
	s.workers = append(s.workers, w)
	s.mu.Unlock()
	return w
}

// key is the scenario's name in the ledger.
func (s *scenario) key() string { return s.tag + "-" + fmt.Sprint(s.db) }

// environ is a child's environment: PATH, HOME and Docker settings of the
// test, then vars.
func environ(vars map[string]string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if k == "PATH" || k == "HOME" || strings.HasPrefix(k, "DOCKER_") {
			env = append(env, kv)
		}
	}
	for k, v := range vars {
		env = append(env, k+"="+v)
	}
	return env
}

// proc is one worker process. Its stdout and stderr go to a file of its own.
type proc struct {
	w       *worker
	n       int
	cmd     *exec.Cmd
	errPath string
	done    chan struct{}
	err     error // Wait's result, once done is closed
}

// start starts a new process of the worker; the test's end stops it
// (SIGTERM, then SIGKILL after 10 s).
func (w *worker) start() *proc {
	t := w.s.t
	t.Helper()
	w.mu.Lock()
	n := len(w.procs) + 1
	w.mu.Unlock()
	path := filepath.Join(w.home, fmt.Sprintf("stderr.%d.log", n))
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close() // the child holds its own descriptor
	cmd := exec.Command(w.bin)
	cmd.Env = environ(w.env)
	cmd.Dir = w.home
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = childAttr()
	if err := cmd.Start(); err != nil {
		t.Fatalf("start worker %s: %v", w.name, err)
	}
	p := &proc{w: w, n: n, cmd: cmd, errPath: path, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(p.shutdown)
	w.mu.Lock()
	w.procs = append(w.procs, p)
	w.mu.Unlock()
	return p
}

// last is the worker's latest process.
func (w *worker) last() *proc {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.procs[len(w.procs)-1]
}

func (w *worker) allProcs() []*proc {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.procs)
}

func (w *worker) hostQueue() string { return fleet.HostQueueName(w.name) }

// shutdown stops the process if it still runs: SIGCONT (it may be stopped),
// SIGTERM, then SIGKILL after 10 s.
func (p *proc) shutdown() {
	if p.exited() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGCONT)
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *proc) signal(sig syscall.Signal) {
	p.w.s.t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		p.w.s.t.Fatalf("signal %v to %s: %v", sig, p, err)
	}
	if sig == syscall.SIGSTOP {
		p.waitStopped()
	}
}

// waitStopped returns once every thread of the process is stopped. The kill
// returns before a busy thread has stopped, and on a loaded machine such a
// thread can still take a job added right after the SIGSTOP.
func (p *proc) waitStopped() {
	p.w.s.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		stats, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", p.cmd.Process.Pid))
		running := len(stats) == 0
		for _, st := range stats {
			b, err := os.ReadFile(st)
			// The state follows the ")" that closes the command name.
			if i := bytes.LastIndexByte(b, ')'); err == nil && i >= 0 && i+2 < len(b) && b[i+2] != 'T' && b[i+2] != 't' {
				running = true
			}
		}
		if !running {
			return
		}
		if time.Now().After(deadline) {
			p.w.s.t.Fatalf("%s did not stop within 10s of SIGSTOP", p)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (p *proc) String() string {
	return fmt.Sprintf("%s#%d (pid %d)", p.w.name, p.n, p.cmd.Process.Pid)
}

// exitCode waits for the process to end and returns its exit code (-1 when
// a signal ended it).
func (p *proc) exitCode(timeout time.Duration) int {
	t := p.w.s.t
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(timeout):
		t.Fatalf("%s still running after %s:\n%s", p, timeout, p.tail(40))
	}
	var ee *exec.ExitError
	switch {
	case p.err == nil:
		return 0
	case errors.As(p.err, &ee):
		return ee.ExitCode()
	}
	t.Fatalf("wait %s: %v", p, p.err)
	return -1
}

// stop ends the process with SIGTERM and requires a clean exit (code 0).
func (p *proc) stop(timeout time.Duration) {
	p.w.s.t.Helper()
	p.signal(syscall.SIGTERM)
	if code := p.exitCode(timeout); code != 0 {
		p.w.s.t.Fatalf("%s exited %d after SIGTERM, want 0:\n%s", p, code, p.tail(40))
	}
}

// raw is everything the process wrote so far.
func (p *proc) raw() string {
	b, err := os.ReadFile(p.errPath)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", p.errPath, err)
	}
	return string(b)
}

// tail is the process's last n lines, headed by its name, for failure
// messages.
func (p *proc) tail(n int) string {
	lines := strings.Split(strings.TrimRight(p.raw(), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return fmt.Sprintf("--- %s, last %d lines of %s\n%s", p, len(lines), p.errPath, strings.Join(lines, "\n"))
}

// event is one JSON log line.
type event map[string]any

func (e event) msg() string { return e.str("msg") }

// str renders a field as text ("" when absent).
func (e event) str(key string) string {
	switch v := e[key].(type) {
	case nil:
		return ""
	case string:
		return v
	default:
		b, _ := json.Marshal(v)
		return string(b)
	}
}

// events parses the process's JSON log lines. Lines that are not JSON (the
// binary's own boot-refusal message) are skipped.
func (p *proc) events() []event {
	var out []event
	sc := bufio.NewScanner(strings.NewReader(p.raw()))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 || line[0] != '{' {
			continue
		}
		var e event
		if json.Unmarshal(line, &e) == nil {
			out = append(out, e)
		}
	}
	return out
}

// find returns the process's events with message msg that match (nil
// matches every one).
func (p *proc) find(msg string, match func(event) bool) []event {
	var out []event
	for _, e := range p.events() {
		if e.msg() == msg && (match == nil || match(e)) {
			out = append(out, e)
		}
	}
	return out
}

// waitEvent waits until the process logged msg (matching match) and returns
// the first such event. It fails at once when the process exits first.
func (p *proc) waitEvent(msg string, timeout time.Duration, match func(event) bool) event {
	t := p.w.s.t
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if got := p.find(msg, match); len(got) > 0 {
			return got[0]
		}
		if p.exited() {
			if got := p.find(msg, match); len(got) > 0 {
				return got[0]
			}
			t.Fatalf("%s exited (%v) before logging %s:\n%s", p, p.err, msg, p.tail(40))
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not log %s within %s:\n%s", p, msg, timeout, p.tail(40))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// jobIs matches events about one job.
func jobIs(id string) func(event) bool {
	return func(e event) bool { return e.str("jobId") == id }
}

// procs lists every process of the scenario.
func (s *scenario) procs() []*proc {
	s.mu.Lock()
	ws := slices.Clone(s.workers)
	s.mu.Unlock()
	var out []*proc
	for _, w := range ws {
		out = append(out, w.allProcs()...)
	}
	return out
}

// count counts the events msg about job id ("" for any) across procs.
func count(procs []*proc, msg, id string) int {
	n := 0
	for _, p := range procs {
		for _, e := range p.events() {
			if e.msg() == msg && (id == "" || e.str("jobId") == id) {
				n++
			}
		}
	}
	return n
}

// logs is the tail of every process of the scenario, for failure messages.
func (s *scenario) logs() string {
	var b strings.Builder
	for _, p := range s.procs() {
		b.WriteString(p.tail(25))
		b.WriteString("\n")
	}
	return b.String()
}

// waitLive waits until every worker has a live registry row that routes.
func (s *scenario) waitLive(ws ...*worker) {
	s.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		hosts, err := registry.ReadLive(ctx, s.client, 2*time.Second)
		cancel()
		seen := 0
		for _, w := range ws {
			for _, h := range hosts {
				if h.Name == w.name && h.AgeKnown && h.Routes {
					seen++
				}
			}
		}
		if err == nil && seen == len(ws) {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("registry rows not all live after 30 s (%v): %+v", err, hosts)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// producer is an undeclared front-end's producer over the scenario's
// database.
func (s *scenario) producer() *enqueue.Producer {
	s.t.Helper()
	p, err := enqueue.NewProducer(s.client, enqueue.ProducerConfig{UnsignedQueues: []string{fleet.EveryQueue}})
	if err != nil {
		s.t.Fatal(err)
	}
	return p
}

// forgeJob is a forge job of repo whose task carries the job program's
// settings (JOB_SLEEP=..., one per line).
func forgeJob(repo, profile, task string) jobs.Job {
	return jobs.Job{Kind: jobs.KindForge, Repo: repo, Ref: "main", Flow: "review", Task: task, SecretsProfile: profile}
}

// enqueueForge routes and enqueues a forge delivery and enters it in the
// ledger.
func (s *scenario) enqueueForge(r *enqueue.Router, id string, job jobs.Job) enqueue.Enqueued {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	e, err := r.EnqueueForge(ctx, enqueue.ForgeDelivery{JobID: id, Job: job})
	if err != nil {
		s.t.Fatalf("enqueue %s: %v", id, err)
	}
	if !e.Added {
		s.t.Fatalf("enqueue %s: not added (a duplicate id?)", id)
	}
	suite.ledger.enqueued(s.key(), id)
	return e
}

// addTo adds a job straight onto a named queue with the forge retry policy,
// as a front-end that routed it earlier would have, and enters it in the
// ledger.
func (s *scenario) addTo(queueName, id string, job jobs.Job) {
	s.t.Helper()
	q, err := queue.New(s.client, queueName, queue.Config{})
	if err != nil {
		s.t.Fatal(err)
	}
	data, err := json.Marshal(job)
	if err != nil {
		s.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, added, err := q.Add(ctx, enqueue.JobName, data, queue.AddOptions{JobID: id, Attempts: enqueue.DefaultAttempts}); err != nil || !added {
		s.t.Fatalf("add %s to %s: added %v, %v", id, queueName, added, err)
	}
	suite.ledger.enqueued(s.key(), id)
}

// queue is a handle on one of the scenario's queues.
func (s *scenario) queue(name string) *queue.Queue {
	s.t.Helper()
	q, err := queue.New(s.client, name, queue.Config{})
	if err != nil {
		s.t.Fatal(err)
	}
	return q
}

// placedRecord is a run record and the logs dir it was found in.
type placedRecord struct {
	jobs.Record
	dir string
}

// records returns every record of job id across the scenario's logs dirs.
func (s *scenario) records(id string) []placedRecord {
	s.t.Helper()
	s.mu.Lock()
	ws := slices.Clone(s.workers)
	s.mu.Unlock()
	var out []placedRecord
	for _, w := range ws {
		recs, err := jobs.ReadRecords(w.logsDir, id)
		if err != nil {
			s.t.Fatalf("records of %s in %s: %v", id, w.logsDir, err)
		}
		if len(recs) > 0 {
			// The latest attempt's, as the job's final state reflects it.
			out = append(out, placedRecord{recs[len(recs)-1], w.logsDir})
		}
	}
	return out
}

// waitRecord waits until job id has a record in one of the scenario's logs
// dirs and returns it; more than one fails.
func (s *scenario) waitRecord(id string, timeout time.Duration) placedRecord {
	s.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		recs := s.records(id)
		switch {
		case len(recs) == 1:
			return recs[0]
		case len(recs) > 1:
			s.t.Fatalf("job %s has %d records: %+v", id, len(recs), recs)
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("no record of %s after %s", id, timeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// settle waits until every job the scenario enqueued is finished (completed
// or failed for good) on whatever queue it ended up, enters its final state
// in the ledger, and checks that none was started twice: job_started at most
// once per attempt the queue counted, across every process of the scenario.
func (s *scenario) settle(timeout time.Duration) {
	s.t.Helper()
	dir, err := queue.NewDirectory(s.client, queue.Config{})
	if err != nil {
		s.t.Fatal(err)
	}
	deadline := time.Now().Add(timeout)
	procs := s.procs()
	for _, e := range suite.ledger.of(s.key()) {
		attempts := 1
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_, job, err := dir.Find(ctx, e.jobID)
			cancel()
			if err == nil && (job.State == queue.StateCompleted || job.State == queue.StateFailed) {
				suite.ledger.settled(e, job.State)
				attempts = max(job.AttemptsMade, 1)
				break
			}
			if time.Now().After(deadline) {
				state := "absent"
				if job != nil {
					state = string(job.State)
				}
				s.t.Fatalf("job %s not finished after %s (state %s, %v)", e.jobID, timeout, state, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
		if n := count(procs, "job_started", e.jobID); n > attempts {
			s.t.Errorf("job %s started %d times across the fleet in %d attempts", e.jobID, n, attempts)
		}
	}
}

// cli runs the pi-dispatch binary with env (plus PATH and HOME) and returns
// its stdout, stderr and exit code.
func (s *scenario) cli(env map[string]string, args ...string) (stdout, stderr string, code int) {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, suite.cliBin, args...)
	cmd.Env = environ(env)
	cmd.Dir = s.dir
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		code = ee.ExitCode()
	default:
		s.t.Fatalf("pi-dispatch %v: %v", args, err)
	}
	return out.String(), errOut.String(), code
}

// mustCLI runs pi-dispatch against the scenario's database and requires exit
// code 0.
func (s *scenario) mustCLI(args ...string) string {
	s.t.Helper()
	out, errOut, code := s.cli(map[string]string{"VALKEY_URL": s.url, "PI_UNSIGNED_QUEUES": "*"}, args...)
	if code != 0 {
		s.t.Fatalf("pi-dispatch %v: exit %d\nstdout: %s\nstderr: %s", args, code, out, errOut)
	}
	return out
}

// status is `pi-dispatch status`, decoded.
func (s *scenario) status() operator.StatusReport {
	s.t.Helper()
	out := s.mustCLI("status", "--json")
	var rep operator.StatusReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		s.t.Fatalf("status is not one JSON line: %q: %v", out, err)
	}
	return rep
}

// hostView is the part of one `pi-dispatch hosts --json` entry the
// scenarios read.
type hostView struct {
	Name      string `json:"name"`
	Routes    bool   `json:"routes"`
	Caps      string `json:"caps"`
	Pid       int    `json:"pid"`
	FPCron    string `json:"fpCron"`
	CronCount int    `json:"cronCount"`
}

// hosts is `pi-dispatch hosts --json`, by name.
func (s *scenario) hosts() map[string]hostView {
	s.t.Helper()
	out := s.mustCLI("hosts", "--json")
	var list []hostView
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		s.t.Fatalf("hosts --json: %q: %v", out, err)
	}
	m := map[string]hostView{}
	for _, h := range list {
		m[h.Name] = h
	}
	return m
}

// containersOf lists every container (any state) of a worker name.
func containersOf(name string) ([]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := suite.docker.ContainerList(ctx, client.ContainerListOptions{All: true,
		Filters: make(client.Filters).Add("label", runner.LabelWorker+"="+name)})
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, c := range res.Items {
		ids = append(ids, c.ID)
	}
	return ids, nil
}

// removeContainers removes whatever container of the scenario's workers is
// left (a test that failed midway).
func (s *scenario) removeContainers() {
	s.mu.Lock()
	ws := slices.Clone(s.workers)
	s.mu.Unlock()
	for _, w := range ws {
		ids, err := containersOf(w.name)
		if err != nil {
			s.t.Logf("list containers of %s: %v", w.name, err)
			continue
		}
		for _, id := range ids {
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			if _, err := suite.docker.ContainerRemove(ctx, id, client.ContainerRemoveOptions{Force: true}); err != nil {
				s.t.Logf("remove leftover container %s of %s: %v", id, w.name, err)
			}
			cancel()
		}
	}
}

// script writes an executable shell script into the scenario's dir.
func (s *scenario) script(name, body string) string {
	s.t.Helper()
	path := filepath.Join(s.dir, name)
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
		s.t.Fatal(err)
	}
	return path
}

// jobID is a job id unique to the suite run and the scenario.
func (s *scenario) jobID(prefix string, i int) string {
	return fmt.Sprintf("gh-%s-%s-%d-%d", prefix, suite.id, s.db, i)
}

// eventually retries check (each call bounded by 5 s) until it returns nil,
// and fails the test with its last error after timeout.
func (s *scenario) eventually(timeout time.Duration, check func(ctx context.Context) error) {
	s.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := check(ctx)
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("after %s: %v", timeout, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// trail is every log line of every process of the scenario about job id.
func (s *scenario) trail(id string) string {
	var b strings.Builder
	for _, p := range s.procs() {
		for _, line := range strings.Split(p.raw(), "\n") {
			if strings.Contains(line, `"`+id+`"`) {
				b.WriteString(line)
				b.WriteString("\n")
			}
		}
	}
	return b.String()
}

// runRecordKey is the run mirror key of attempt 1 of job id on whichever
// queue ran it ("" when there is none yet): the key names the queue.
func runRecordKey(ctx context.Context, c *redis.Client, id string) (string, error) {
	keys, err := c.Keys(ctx, "runs:rec:*+"+jobs.SanitizeJobID(id)+".attempt-1").Result()
	if err != nil || len(keys) == 0 {
		return "", err
	}
	return keys[0], nil
}
