package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/enqueue"
	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/fleetstate"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/internal/testkit/logtest"
	"github.com/pidispatch/pidispatch/jobs"
	"github.com/pidispatch/pidispatch/queue"
	"github.com/pidispatch/pidispatch/runner"
)

// A forge job that needs a secret profile is routed at enqueue to the one
// host that declares it, runs there with the secret in the container's
// environment, and the secret's value reaches no log line, no record file and
// no mirrored record.
func TestSecretJobRoutesToCapableHostAndStaysSecret(t *testing.T) {
	t.Parallel()
	ensureImage(t)
	db := livetest.Valkey(t)
	nameA, nameB := uniqueName("sec-a", db), uniqueName("sec-b", db)
	secret := "s3cr3t-" + randomHex(12)
	resolver := filepath.Join(t.TempDir(), "resolve-prod")
	if err := os.WriteFile(resolver, []byte("#!/bin/sh\necho SECRET_TOKEN="+secret+"\n"), 0o700); err != nil {
		t.Fatal(err)
	}

	a := bootWorker(t, testEnv(t, db.URL, map[string]string{"PI_WORKER_NAME": nameA}), dispatch.Tuning{})
	b := bootWorker(t, testEnv(t, db.URL, map[string]string{"PI_WORKER_NAME": nameB, "PI_SECRET_PROFILES": "prod:" + resolver}), dispatch.Tuning{})
	waitHosts(t, db.Client, map[string]string{nameA: "", nameB: "s:prod"}, nameA, nameB)

	var routerLogs logtest.Buffer
	p, err := enqueue.NewProducer(db.Client, enqueue.ProducerConfig{UnsignedQueues: []string{fleet.EveryQueue}, Logger: slog.New(slog.NewJSONHandler(&routerLogs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	jobID := uniqueName("gh-secret", db)
	job := forgeJob("acme/web", "JOB_REQUIRE_ENV=SECRET_TOKEN")
	job.SecretsProfile = "prod"
	e, err := enqueue.NewRouter(p, enqueue.RouterConfig{}).EnqueueForge(context.Background(), enqueue.ForgeDelivery{JobID: jobID, Job: job})
	if err != nil {
		t.Fatal(err)
	}
	if e.Queue != fleet.HostQueueName(nameB) || !e.Added {
		t.Fatalf("enqueued %+v, want a new job on %s", e, fleet.HostQueueName(nameB))
	}

	rec := waitRecord(t, b.cfg.LogsDir, jobID, 60*time.Second)
	if rec.Host != nameB || rec.Outcome != jobs.OutcomeCompleted || rec.Kind != jobs.KindForge || rec.Target != "acme/web" {
		t.Fatalf("record %+v", rec)
	}
	// Completed: JOB_REQUIRE_ENV exits 3 when the container lacks the secret.
	waitJobState(t, testQueue(t, db, fleet.HostQueueName(nameB)), jobID, queue.StateCompleted, 10*time.Second)
	if n := countEvents(t, b.logs.String(), "job_started", jobID); n != 1 {
		t.Fatalf("%d job_started lines on %s, want 1", n, nameB)
	}
	if n := countEvents(t, a.logs.String(), "job_started", jobID); n != 0 || len(recordFiles(t, a.cfg.LogsDir)) != 0 {
		t.Fatalf("%s, which has no profile prod, touched the job", nameA)
	}

	// Stop both so every log line and mirror write is in.
	a.stop(t)
	b.stop(t)
	for name, logs := range map[string]string{nameA: a.logs.String(), nameB: b.logs.String(), "router": routerLogs.String()} {
		if strings.Contains(logs, secret) {
			t.Errorf("the secret value is in the log of %s", name)
		}
		parseLog(t, logs) // every line is JSON
	}
	for _, dir := range []string{a.cfg.LogsDir, b.cfg.LogsDir} {
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, en := range entries {
			data, err := os.ReadFile(filepath.Join(dir, en.Name()))
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(string(data), secret) {
				t.Errorf("the secret value is in %s", en.Name())
			}
		}
	}
	mirrored, err := db.Client.Get(context.Background(), fleetstate.RunRecordKey(fleet.HostQueueName(nameB), jobID, 1)).Result()
	if err != nil {
		t.Fatalf("mirrored record of a named host: %v", err)
	}
	if strings.Contains(mirrored, secret) || !strings.Contains(mirrored, `"host":"`+nameB+`"`) {
		t.Errorf("mirrored record %s", mirrored)
	}
	// Nothing in the database holds it either (the job data names the profile only).
	keys, err := db.Client.Keys(context.Background(), "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if strings.Contains(keyContent(t, db.Client, k), secret) {
			t.Errorf("the secret value is stored in %s", k)
		}
	}
}

// A job needing a secret profile this single, unnamed host does not declare
// is refused once before anything is spent: one record, one refusal line, no
// container, the refusal as the job's result and no retry.
func TestUnknownSecretProfileRefusedOnce(t *testing.T) {
	t.Parallel()
	ensureImage(t)
	db := livetest.Valkey(t)
	// Undeclared, under a default name of its own: the hostname's would be
	// shared with other tests' unnamed workers (and their reapers).
	w := bootWorker(t, testEnv(t, db.URL, map[string]string{"TEST_DEFAULT_NAME": uniqueName("solo", db)}), dispatch.Tuning{})
	if w.cfg.WorkerNameDeclared {
		t.Fatal("the worker must run unnamed")
	}
	jobID := uniqueName("gh-unknown-profile", db)
	job := forgeJob("acme/web", "JOB_EXIT_CODE=0")
	job.SecretsProfile = "prod"
	e, err := newRouter(t, db).EnqueueForge(context.Background(), enqueue.ForgeDelivery{JobID: jobID, Job: job})
	if err != nil || e.Queue != fleet.SharedQueue {
		t.Fatalf("enqueue: %+v %v (nothing routes to an unnamed host)", e, err)
	}
	j := waitJobState(t, testQueue(t, db, fleet.SharedQueue), jobID, queue.StateCompleted, 30*time.Second)
	rec := waitRecord(t, w.cfg.LogsDir, jobID, 5*time.Second)
	if rec.Outcome != jobs.OutcomePolicy || rec.Reason != jobs.ReasonSecretProfileUnknown || rec.ExitCode != nil || rec.Attempt != 1 || rec.Host != w.cfg.WorkerName {
		t.Fatalf("record %+v", rec)
	}
	var result map[string]string
	if err := json.Unmarshal(j.ReturnValue, &result); err != nil || len(result) != 2 || result["outcome"] != "policy" || result["reason"] != "secret-profile-unknown" {
		t.Fatalf("return value %s (%v)", j.ReturnValue, err)
	}
	if j.AttemptsMade != 1 || j.AttemptsStarted != 1 {
		t.Fatalf("attempts made %d, started %d; want one of each", j.AttemptsMade, j.AttemptsStarted)
	}
	time.Sleep(500 * time.Millisecond) // a retry would show up by now
	w.stop(t)
	logs := w.logs.String()
	if n := countEvents(t, logs, "job_refused", jobID); n != 1 {
		t.Fatalf("%d job_refused lines, want 1", n)
	}
	if n := countEvents(t, logs, "job_started", jobID); n != 0 {
		t.Fatalf("a container was started for a refused job")
	}
	if files := recordFiles(t, w.cfg.LogsDir); len(files) != 1 {
		t.Fatalf("record files %v, want one", files)
	}
	// An unnamed host mirrors its records too: the fleet sees its runs.
	if n, err := db.Client.Exists(context.Background(), fleetstate.RunRecordKey(fleet.SharedQueue, jobID, 1)).Result(); err != nil || n != 1 {
		t.Fatalf("the unnamed host's record is not in the run mirror: %d %v", n, err)
	}
}

// A job whose data is JSON but not a job is refused invalid-job, once.
func TestInvalidJobDataRefusedOnce(t *testing.T) {
	t.Parallel()
	ensureImage(t)
	db := livetest.Valkey(t)
	name := uniqueName("invalid", db)
	w := bootWorker(t, testEnv(t, db.URL, map[string]string{"PI_WORKER_NAME": name}), dispatch.Tuning{})
	q := testQueue(t, db, fleet.SharedQueue)
	jobID := uniqueName("junk", db)
	if _, added, err := q.Add(context.Background(), enqueue.JobName, json.RawMessage(`{"kind":"nope","task":"JOB_EXIT_CODE=0"}`), queue.AddOptions{JobID: jobID, Attempts: 3}); err != nil || !added {
		t.Fatalf("add: %v %v", added, err)
	}
	j := waitJobState(t, q, jobID, queue.StateCompleted, 30*time.Second)
	rec := waitRecord(t, w.cfg.LogsDir, jobID, 5*time.Second)
	if rec.Outcome != jobs.OutcomePolicy || rec.Reason != jobs.ReasonInvalidJob || rec.Host != name || rec.Target != "-" || rec.ExitCode != nil {
		t.Fatalf("record %+v", rec)
	}
	if j.AttemptsMade != 1 || !strings.Contains(string(j.ReturnValue), `"invalid-job"`) {
		t.Fatalf("job %+v: want one attempt with the refusal as its result", j)
	}
	time.Sleep(300 * time.Millisecond)
	w.stop(t)
	logs := w.logs.String()
	if countEvents(t, logs, "job_refused", jobID) != 1 || countEvents(t, logs, "job_invalid", jobID) != 1 || countEvents(t, logs, "job_started", jobID) != 0 {
		t.Fatalf("want one job_invalid and one job_refused line and no start:\n%s", logs)
	}
}

// Exit 1 is an infrastructure failure: retried within attempts, then failed.
func TestExit1RetriedThenFailed(t *testing.T) {
	t.Parallel()
	ensureImage(t)
	db := livetest.Valkey(t)
	name := uniqueName("exit1", db)
	w := bootWorker(t, testEnv(t, db.URL, map[string]string{"PI_WORKER_NAME": name}), dispatch.Tuning{})
	p, err := enqueue.NewProducer(db.Client, enqueue.ProducerConfig{UnsignedQueues: []string{fleet.EveryQueue},
		WorkerName: name, WorkerNameDeclared: true,
		Attempts: 2, Backoff: queue.Backoff{Type: queue.BackoffFixed, Delay: 200 * time.Millisecond},
	})
	if err != nil {
		t.Fatal(err)
	}
	e, err := p.EnqueueLocal(context.Background(), jobs.Job{Folder: t.TempDir(), Flow: "fix", Task: "JOB_EXIT_CODE=1"})
	if err != nil {
		t.Fatal(err)
	}
	j := waitJobState(t, testQueue(t, db, e.Queue), e.JobID, queue.StateFailed, 60*time.Second)
	if j.FailedReason != string(jobs.ReasonExit1) || j.AttemptsMade != 2 {
		t.Fatalf("failed job: reason %q, attempts made %d", j.FailedReason, j.AttemptsMade)
	}
	rec := waitRecord(t, w.cfg.LogsDir, e.JobID, 5*time.Second)
	if rec.Outcome != jobs.OutcomeFailed || rec.Reason != jobs.ReasonExit1 || rec.Attempt != 2 || rec.ExitCode == nil || *rec.ExitCode != 1 {
		t.Fatalf("final record %+v", rec)
	}
	w.stop(t)
	logs := w.logs.String()
	if n := countEvents(t, logs, "job_started", e.JobID); n != 2 {
		t.Fatalf("%d starts, want 2 (attempts)", n)
	}
	if n := countEvents(t, logs, "job_failed", e.JobID); n != 2 {
		t.Fatalf("%d job_failed lines, want 2", n)
	}
}

// Exit 2 is the agent's policy refusal: recorded, never retried.
func TestExit2RecordedAsPolicy(t *testing.T) {
	t.Parallel()
	ensureImage(t)
	db := livetest.Valkey(t)
	name := uniqueName("exit2", db)
	w := bootWorker(t, testEnv(t, db.URL, map[string]string{"PI_WORKER_NAME": name}), dispatch.Tuning{})
	p, err := enqueue.NewProducer(db.Client, enqueue.ProducerConfig{UnsignedQueues: []string{fleet.EveryQueue},
		WorkerName: name, WorkerNameDeclared: true,
		Attempts: 3, Backoff: queue.Backoff{Type: queue.BackoffFixed, Delay: 100 * time.Millisecond},
	})
	if err != nil {
		t.Fatal(err)
	}
	e, err := p.EnqueueLocal(context.Background(), jobs.Job{Folder: t.TempDir(), Flow: "fix", Task: "JOB_EXIT_CODE=2"})
	if err != nil {
		t.Fatal(err)
	}
	j := waitJobState(t, testQueue(t, db, e.Queue), e.JobID, queue.StateCompleted, 60*time.Second)
	rec := waitRecord(t, w.cfg.LogsDir, e.JobID, 5*time.Second)
	if rec.Outcome != jobs.OutcomePolicy || rec.Reason != jobs.ReasonPolicy || rec.ExitCode == nil || *rec.ExitCode != 2 || rec.Attempt != 1 {
		t.Fatalf("record %+v", rec)
	}
	if j.AttemptsMade != 1 || !strings.Contains(string(j.ReturnValue), `"policy"`) {
		t.Fatalf("job %+v", j)
	}
	time.Sleep(500 * time.Millisecond) // a retry (100 ms backoff) would have started by now
	w.stop(t)
	if n := countEvents(t, w.logs.String(), "job_started", e.JobID); n != 1 {
		t.Fatalf("%d starts, want 1", n)
	}
}

// A job outliving PI_JOB_TIMEOUT is stopped, recorded as a policy outcome,
// and its container is gone.
func TestTimeoutStopsTheContainer(t *testing.T) {
	t.Parallel()
	ensureImage(t)
	dc := livetest.Docker(t)
	db := livetest.Valkey(t)
	name := uniqueName("timeout", db)
	w := bootWorker(t, testEnv(t, db.URL, map[string]string{"PI_WORKER_NAME": name, "PI_JOB_TIMEOUT": "2s"}), dispatch.Tuning{})
	p, err := enqueue.NewProducer(db.Client, enqueue.ProducerConfig{UnsignedQueues: []string{fleet.EveryQueue}, WorkerName: name, WorkerNameDeclared: true})
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	e, err := p.EnqueueLocal(context.Background(), jobs.Job{Folder: t.TempDir(), Flow: "fix", Task: "JOB_SLEEP=60s"})
	if err != nil {
		t.Fatal(err)
	}
	rec := waitRecord(t, w.cfg.LogsDir, e.JobID, 40*time.Second)
	if took := time.Since(began); took > 30*time.Second {
		t.Fatalf("the timeout took %s", took)
	}
	if rec.Outcome != jobs.OutcomePolicy || rec.Reason != jobs.ReasonTimeout {
		t.Fatalf("record %+v", rec)
	}
	j := waitJobState(t, testQueue(t, db, e.Queue), e.JobID, queue.StateCompleted, 10*time.Second)
	if j.AttemptsMade != 1 {
		t.Fatalf("attempts made %d", j.AttemptsMade)
	}
	if left := containersGone(t, dc, runner.LabelJob, e.JobID, 10*time.Second); len(left) != 0 {
		t.Fatalf("%d containers of the timed-out job are left", len(left))
	}
	if n := countEvents(t, w.logs.String(), "job_timed_out", ""); n != 1 {
		t.Fatalf("%d job_timed_out lines, want 1", n)
	}
}

// PI_CONCURRENCY bounds the machine across both of its queues, and the bound
// is also reached: two jobs run at once, never three.
func TestConcurrencyBoundsBothQueues(t *testing.T) {
	t.Parallel()
	ensureImage(t)
	dc := livetest.Docker(t)
	db := livetest.Valkey(t)
	name := uniqueName("conc", db)
	w := bootWorker(t, testEnv(t, db.URL, map[string]string{"PI_WORKER_NAME": name, "PI_CONCURRENCY": "2"}), dispatch.Tuning{})
	waitHosts(t, db.Client, nil, name)

	ctx := context.Background()
	var ids []string
	r := newRouter(t, db)
	for i := range 3 {
		e, err := r.EnqueueForge(ctx, enqueue.ForgeDelivery{
			JobID: fmt.Sprintf("gh-conc-%d-%d", db.DB, i),
			Job:   forgeJob(fmt.Sprintf("acme/conc%d", i), "JOB_SLEEP=1500ms"),
		})
		if err != nil || e.Queue != fleet.SharedQueue {
			t.Fatalf("enqueue: %+v %v", e, err)
		}
		ids = append(ids, e.JobID)
	}
	p, err := enqueue.NewProducer(db.Client, enqueue.ProducerConfig{UnsignedQueues: []string{fleet.EveryQueue}, WorkerName: name, WorkerNameDeclared: true})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		e, err := p.EnqueueLocal(ctx, jobs.Job{Folder: t.TempDir(), Flow: "fix", Task: "JOB_SLEEP=1500ms"})
		if err != nil || e.Queue != fleet.HostQueueName(name) {
			t.Fatalf("enqueue: %+v %v", e, err)
		}
		ids = append(ids, e.JobID)
	}
	dirs := []string{w.cfg.LogsDir}
	maxExisting, maxRunning := sample(t, dc, []string{name}, nil, 90*time.Second, func() bool {
		for _, id := range ids {
			if !recordExists(dirs, id) {
				return false
			}
		}
		return true
	})
	if maxExisting > 2 {
		t.Fatalf("%d containers at once with PI_CONCURRENCY=2", maxExisting)
	}
	if maxRunning < 2 {
		t.Fatalf("at most %d container(s) ran at once; PI_CONCURRENCY=2 should run two", maxRunning)
	}
	for _, id := range ids {
		if rec, _ := readRecord(t, dirs, id); rec.Outcome != jobs.OutcomeCompleted {
			t.Fatalf("record %+v", rec)
		}
	}
	w.stop(t)
	if n := countEvents(t, w.logs.String(), "job_started", ""); n != len(ids) {
		t.Fatalf("%d job_started lines, want %d (one per job)", n, len(ids))
	}
	if n := countEvents(t, w.logs.String(), "job_deferred", ""); n != 0 {
		t.Fatalf("%d deferrals: the host-wide bound is taken before the fetch, never a deferral", n)
	}
}

// A scope limited to one concurrent job holds across two named workers
// draining the shared queue: never two of its containers at once, and every
// job still runs.
func TestScopeConcurrencyAcrossWorkers(t *testing.T) {
	t.Parallel()
	ensureImage(t)
	dc := livetest.Docker(t)
	db := livetest.Valkey(t)
	limits := filepath.Join(t.TempDir(), "scoped-limits.json")
	if err := os.WriteFile(limits, []byte(`{"version":1,"limits":[{"scope":"acme/api","concurrent":1}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	tune := dispatch.Tuning{BusyDeferral: 300 * time.Millisecond}
	var workers []*bootedWorker
	var names, dirs []string
	for _, prefix := range []string{"scope-a", "scope-b"} {
		name := uniqueName(prefix, db)
		w := bootWorker(t, testEnv(t, db.URL, map[string]string{"PI_WORKER_NAME": name, "PI_SCOPED_LIMITS_FILE": limits}), tune)
		workers = append(workers, w)
		names, dirs = append(names, name), append(dirs, w.cfg.LogsDir)
	}
	waitHosts(t, db.Client, nil, names...)

	r := newRouter(t, db)
	seen := map[string]bool{}
	for i := range 4 {
		e, err := r.EnqueueForge(context.Background(), enqueue.ForgeDelivery{
			JobID: fmt.Sprintf("gh-scope-%d-%d", db.DB, i),
			Job:   forgeJob("acme/api", "JOB_SLEEP=1s"),
		})
		if err != nil || e.Queue != fleet.SharedQueue {
			t.Fatalf("enqueue: %+v %v", e, err)
		}
		seen[e.JobID] = true
	}
	maxExisting, maxRunning := sample(t, dc, names, seen, 90*time.Second, func() bool {
		for id := range seen {
			if !recordExists(dirs, id) {
				return false
			}
		}
		return true
	})
	if maxExisting > 1 {
		t.Fatalf("%d containers of scope acme/api at once; its limit is 1", maxExisting)
	}
	if maxRunning != 1 {
		t.Fatalf("no container of the scope was ever seen running")
	}
	for id := range seen {
		if rec, _ := readRecord(t, dirs, id); rec.Outcome != jobs.OutcomeCompleted || rec.Target != "acme/api" {
			t.Fatalf("record %+v", rec)
		}
	}
	deferred := 0
	for _, w := range workers {
		for _, e := range parseLog(t, w.logs.String()) {
			if e.Msg == "job_deferred" && e.Reason == "scope-busy" {
				deferred++
			}
		}
	}
	if deferred == 0 {
		t.Fatal("four seen of a scope of one on two workers of three slots: some must have been deferred")
	}
}

// PI_DAILY_CAP refuses the start past the cap (over-budget, a policy outcome)
// and the day's counter expires.
func TestDailyCapRefusesOverBudget(t *testing.T) {
	t.Parallel()
	ensureImage(t)
	db := livetest.Valkey(t)
	name := uniqueName("cap", db)
	w := bootWorker(t, testEnv(t, db.URL, map[string]string{"PI_WORKER_NAME": name, "PI_DAILY_CAP": "2"}), dispatch.Tuning{})
	p, err := enqueue.NewProducer(db.Client, enqueue.ProducerConfig{UnsignedQueues: []string{fleet.EveryQueue}, WorkerName: name, WorkerNameDeclared: true})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for range 3 {
		e, err := p.EnqueueLocal(context.Background(), jobs.Job{Folder: t.TempDir(), Flow: "fix", Task: "JOB_EXIT_CODE=0"})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, e.JobID)
	}
	outcomes := map[string]int{}
	for _, id := range ids {
		rec := waitRecord(t, w.cfg.LogsDir, id, 60*time.Second)
		outcomes[rec.Outcome+"/"+string(rec.Reason)]++
		if rec.Reason == jobs.ReasonOverBudget && rec.ExitCode != nil {
			t.Fatalf("an over-budget job ran: %+v", rec)
		}
	}
	if outcomes["completed/completed"] != 2 || outcomes["policy/over-budget"] != 1 {
		t.Fatalf("outcomes %v, want two completed and one over-budget", outcomes)
	}
	key := fleetstate.BudgetDayKey(time.Now())
	count, err := db.Client.Get(context.Background(), key).Int()
	if err != nil || count != 2 {
		t.Fatalf("%s = %d (%v), want 2 starts counted", key, count, err)
	}
	ttl, err := db.Client.TTL(context.Background(), key).Result()
	if err != nil || ttl <= 0 || ttl > 48*time.Hour {
		t.Fatalf("%s TTL %s (%v), want in (0, 48h]", key, ttl, err)
	}
	w.stop(t)
	if n := countEvents(t, w.logs.String(), "job_started", ""); n != 2 {
		t.Fatalf("%d containers started, want 2", n)
	}
}
