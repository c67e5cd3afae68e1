package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pidispatch/pidispatch/cronsync"
	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/enqueue"
	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/jobs"
	"github.com/pidispatch/pidispatch/queue"
)

// The job data cronsync gives every run is a job the worker accepts.
func TestCronJobDataParsesAsJob(t *testing.T) {
	tr, err := cronsync.ParseTriggers([]byte(`{"triggers":[{"on":{"type":"cron","id":"nightly","pattern":"0 3 * * *"},` +
		`"run":{"kind":"local","folder":"/srv/app","flow":"fix","task":"tidy","image":"pi-job:2","secretsProfile":"ci",` +
		`"model":"m-1","maxTurns":40,"models":["a/b"],"maxCostUsd":"2.50","packages":false,"excludeTools":["bash"],"skillsDir":"/srv/skills","github":true,"network":true}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	job, err := jobs.ParseJob(cronsync.JobData(tr.Cron[0]))
	if err != nil {
		t.Fatalf("the worker refuses cron job data: %v", err)
	}
	if job.Kind != jobs.KindCron || job.SchedulerID != "nightly" || job.Folder != "/srv/app" || job.MaxTurns != 40 || !job.Network {
		t.Fatalf("job %+v", job)
	}
}

// A cron trigger whose runs the worker would refuse (maxTurns past the job
// model's bound) refuses boot with exit 2, naming the trigger and the field,
// rather than installing a scheduler whose every run fails as invalid-job.
func TestTriggerTheWorkerWouldRefuseRefusesBoot(t *testing.T) {
	t.Parallel()
	db := livetest.Valkey(t)
	triggers := filepath.Join(t.TempDir(), "triggers.json")
	data := `{"triggers":[{"on":{"type":"cron","id":"nightly","pattern":"0 3 * * *"},` +
		`"run":{"kind":"local","folder":"/srv/app","flow":"fix","task":"tidy","maxTurns":10001}}]}`
	if err := os.WriteFile(triggers, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	code := run(context.Background(), nil, testEnv(t, db.URL, map[string]string{"PI_TRIGGERS_FILE": triggers}), io.Discard, &stderr)
	out := stderr.String()
	if code != exitConfig || !strings.Contains(out, "PI_TRIGGERS_FILE") || !strings.Contains(out, `(id "nightly")`) || !strings.Contains(out, "run.maxTurns") {
		t.Fatalf("exit %d, stderr %q; want 2 naming PI_TRIGGERS_FILE, the trigger and run.maxTurns", code, out)
	}
}

// A cron trigger with a seconds pattern fires and runs a real container
// through the Worker, once per tick, even with two workers draining the
// queue its scheduler lives on.
func TestCronFiresOncePerTickWithTwoWorkers(t *testing.T) {
	t.Parallel()
	ensureImage(t)
	db := livetest.Valkey(t)
	folder := t.TempDir()
	triggers := filepath.Join(t.TempDir(), "triggers.json")
	file := fmt.Sprintf(`{"triggers":[{"on":{"type":"cron","id":"tick","pattern":"*/2 * * * * *","tz":"UTC"},`+
		`"run":{"kind":"local","folder":%q,"flow":"fix","task":"JOB_PRINT_EXIT_LINE=1"}}]}`, folder)
	if err := os.WriteFile(triggers, []byte(file), 0o644); err != nil {
		t.Fatal(err)
	}
	// Undeclared workers: the scheduler lives on the shared queue, which both drain.
	w1 := bootWorker(t, testEnv(t, db.URL, map[string]string{"PI_TRIGGERS_FILE": triggers, "TEST_DEFAULT_NAME": uniqueName("cron-one", db)}), dispatch.Tuning{})
	w2 := bootWorker(t, testEnv(t, db.URL, map[string]string{"PI_TRIGGERS_FILE": triggers, "TEST_DEFAULT_NAME": uniqueName("cron-two", db)}), dispatch.Tuning{})

	time.Sleep(9 * time.Second)
	q, err := queue.New(db.Client, fleet.SharedQueue, queue.Config{})
	if err != nil {
		t.Fatal(err)
	}
	scheds, err := q.Schedulers(context.Background())
	if err != nil || len(scheds) != 1 || scheds[0].ID != "tick" {
		t.Fatalf("schedulers %+v %v", scheds, err)
	}

	// Every run id is repeat:tick:<millis>; each tick appears once across
	// both workers' records, and ticks are 2 s apart.
	seen := map[string]string{}
	for _, w := range []*bootedWorker{w1, w2} {
		entries, err := os.ReadDir(w.cfg.LogsDir)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if !strings.HasSuffix(e.Name(), ".json") {
				continue // a transcript beside the record
			}
			data, err := os.ReadFile(filepath.Join(w.cfg.LogsDir, e.Name()))
			if err != nil {
				t.Fatal(err)
			}
			var r jobs.Record
			if err := json.Unmarshal(data, &r); err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(r.JobID, "repeat:tick:") || r.Kind != jobs.KindCron {
				t.Fatalf("unexpected record %+v", r)
			}
			if other, dup := seen[r.JobID]; dup {
				t.Fatalf("tick %s ran twice (on %s and %s)", r.JobID, other, r.Host)
			}
			if r.Outcome != jobs.OutcomeCompleted {
				t.Fatalf("tick record %+v", r)
			}
			seen[r.JobID] = r.Host
		}
	}
	if len(seen) < 3 || len(seen) > 5 {
		t.Fatalf("%d ticks ran in 9 s of a 2 s schedule: %v", len(seen), seen)
	}
}

// A host whose cron set disagrees with a peer's refuses to install or prune,
// and still drains its queues: the refusal never stops the worker.
func TestCronDivergenceLeavesWorkerDraining(t *testing.T) {
	t.Parallel()
	ensureImage(t)
	db := livetest.Valkey(t)
	folder := t.TempDir()
	write := func(pattern string) string {
		p := filepath.Join(t.TempDir(), "triggers.json")
		file := fmt.Sprintf(`{"triggers":[{"on":{"type":"cron","id":"nightly","pattern":%q,"tz":"UTC"},`+
			`"run":{"kind":"local","folder":%q,"flow":"fix","task":"t"}}]}`, pattern, folder)
		if err := os.WriteFile(p, []byte(file), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	first, second := uniqueName("div-a", db), uniqueName("div-b", db)
	bootWorker(t, testEnv(t, db.URL, map[string]string{"PI_WORKER_NAME": first, "PI_TRIGGERS_FILE": write("0 3 * * *")}), dispatch.Tuning{})
	waitLive(t, db, first)
	b := bootWorker(t, testEnv(t, db.URL, map[string]string{"PI_WORKER_NAME": second, "PI_TRIGGERS_FILE": write("0 4 * * *")}), dispatch.Tuning{})

	deadline := time.Now().Add(20 * time.Second)
	for countEvents(t, b.logs.String(), "cron_divergence_refused", "") == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no cron_divergence_refused in:\n%s", b.logs.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	q, err := queue.New(db.Client, fleet.HostQueueName(second), queue.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if s, err := q.Schedulers(context.Background()); err != nil || len(s) != 0 {
		t.Fatalf("a refusing host installed schedulers: %+v %v", s, err)
	}
	p, err := enqueue.NewProducer(db.Client, enqueue.ProducerConfig{UnsignedQueues: []string{fleet.EveryQueue}, WorkerName: second, WorkerNameDeclared: true})
	if err != nil {
		t.Fatal(err)
	}
	e, err := p.EnqueueLocal(context.Background(), jobs.Job{Folder: t.TempDir(), Flow: "fix", Task: "t"})
	if err != nil {
		t.Fatal(err)
	}
	if rec := waitRecord(t, b.cfg.LogsDir, e.JobID, 60*time.Second); rec.Outcome != jobs.OutcomeCompleted {
		t.Fatalf("the refusing host did not drain its queue: %+v", rec)
	}
}

// tickScheduler is the scheduler a triggers file with one trigger id firing
// every `every` seconds on folder installs: what a host left in Valkey when it
// had cron on. Tests running at once use distinct ids: a run's container name
// derives from its job id, which is the same for the same id and instant.
func tickScheduler(t *testing.T, id, folder string, every int) (string, queue.Scheduler) {
	t.Helper()
	file := fmt.Sprintf(`{"triggers":[{"on":{"type":"cron","id":%q,"pattern":"*/%d * * * * *","tz":"UTC"},`+
		`"run":{"kind":"local","folder":%q,"flow":"fix","task":"JOB_PRINT_EXIT_LINE=1"}}]}`, id, every, folder)
	tr, err := cronsync.ParseTriggers([]byte(file))
	if err != nil {
		t.Fatal(err)
	}
	s, err := cronsync.Scheduler(tr.Cron[0], "UTC")
	if err != nil {
		t.Fatal(err)
	}
	return file, s
}

// records reads every run record in dir.
func records(t *testing.T, dir string) []jobs.Record {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []jobs.Record
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".json") {
			continue // a transcript beside the record
		}
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		var r jobs.Record
		if err := json.Unmarshal(data, &r); err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	return out
}

// A host without PI_TRIGGERS_FILE runs no cron job, whatever schedulers its
// queue still holds: each run is refused before anything is spent, with a
// record (cron-not-agreed), and the boot log names the resident schedulers.
// Declared, the runs are on its own queue; undeclared and alone, on the
// shared queue with no peer that could have agreed to them.
func TestCronOffRunsNoResidentScheduler(t *testing.T) {
	t.Parallel()
	ensureImage(t)
	for _, declared := range []bool{true, false} {
		t.Run(fmt.Sprintf("declared=%v", declared), func(t *testing.T) {
			t.Parallel()
			db := livetest.Valkey(t)
			name := uniqueName("cron-off", db)
			env := map[string]string{"TEST_DEFAULT_NAME": name}
			queueName := fleet.SharedQueue
			if declared {
				env["PI_WORKER_NAME"] = name
				queueName = fleet.HostQueueName(name)
			}
			id := fmt.Sprintf("off-%d", db.DB)
			_, s := tickScheduler(t, id, t.TempDir(), 2)
			q := testQueue(t, db, queueName)
			if _, err := q.UpsertScheduler(context.Background(), id, s); err != nil {
				t.Fatal(err)
			}
			w := bootWorker(t, testEnv(t, db.URL, env), dispatch.Tuning{})

			deadline := time.Now().Add(30 * time.Second)
			var recs []jobs.Record
			for len(recs) < 2 {
				if time.Now().After(deadline) {
					t.Fatalf("no refusal records after 30 s; log:\n%s", w.logs.String())
				}
				time.Sleep(200 * time.Millisecond)
				recs = records(t, w.cfg.LogsDir)
			}
			for _, r := range recs {
				if !strings.HasPrefix(r.JobID, "repeat:"+id+":") || r.Outcome != jobs.OutcomePolicy ||
					r.Reason != jobs.ReasonCronNotAgreed || r.ExitCode != nil {
					t.Fatalf("a host with cron off did not refuse a cron run: %+v", r)
				}
			}
			if n := countEvents(t, w.logs.String(), "cron_run_refused", ""); n < 2 {
				t.Fatalf("%d cron_run_refused lines for %d refusals", n, len(recs))
			}
			if n := countEvents(t, w.logs.String(), "cron_disabled_schedulers_resident", ""); n != 1 {
				t.Fatalf("%d cron_disabled_schedulers_resident lines, want 1; log:\n%s", n, w.logs.String())
			}
			if list, err := q.Schedulers(context.Background()); err != nil || len(list) != 1 {
				t.Fatalf("an abstaining host touched the schedulers: %+v %v", list, err)
			}
		})
	}
}

// On the shared queue a host with cron off leaves a scheduler's runs for the
// peer that agreed to them: every tick runs, and only on that peer.
func TestCronOffLeavesSharedRunsToAgreeingPeer(t *testing.T) {
	t.Parallel()
	ensureImage(t)
	db := livetest.Valkey(t)
	id := fmt.Sprintf("left-%d", db.DB)
	// Every 5 s: one folder runs one job at a time, and slower ticks keep the
	// agreeing host from falling behind on a loaded machine.
	file, _ := tickScheduler(t, id, t.TempDir(), 5)
	triggers := filepath.Join(t.TempDir(), "triggers.json")
	if err := os.WriteFile(triggers, []byte(file), 0o644); err != nil {
		t.Fatal(err)
	}
	onName, offName := uniqueName("cron-on", db), uniqueName("cron-off", db)
	on := bootWorker(t, testEnv(t, db.URL, map[string]string{"PI_TRIGGERS_FILE": triggers, "TEST_DEFAULT_NAME": onName}), dispatch.Tuning{})
	waitLive(t, db, onName)
	off := bootWorker(t, testEnv(t, db.URL, map[string]string{"TEST_DEFAULT_NAME": offName}), dispatch.Tuning{BusyDeferral: time.Second})

	deadline := time.Now().Add(60 * time.Second)
	for countEvents(t, off.logs.String(), "cron_run_left", "") < 2 || len(records(t, on.cfg.LogsDir)) < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("after 60 s: %d runs left by the abstaining host, %d records on the agreeing one",
				countEvents(t, off.logs.String(), "cron_run_left", ""), len(records(t, on.cfg.LogsDir)))
		}
		time.Sleep(200 * time.Millisecond)
	}
	if recs := records(t, off.cfg.LogsDir); len(recs) != 0 {
		t.Fatalf("the host with cron off ran or refused cron runs: %+v", recs)
	}
	for _, r := range records(t, on.cfg.LogsDir) {
		if !strings.HasPrefix(r.JobID, "repeat:"+id+":") || r.Outcome != jobs.OutcomeCompleted {
			t.Fatalf("tick record on the agreeing host %+v", r)
		}
	}
	// A run the abstaining host left is run by the peer, not lost.
	for _, e := range parseLog(t, off.logs.String()) {
		if e.Msg == "cron_run_left" {
			waitRecord(t, on.cfg.LogsDir, e.JobID, 60*time.Second)
			break
		}
	}
}

// Removing a trigger from the file removes its runs that have not started,
// including one a pause window deferred: after the reload nothing of it is
// left to run when the window ends.
func TestRemovedTriggerTakesItsDeferredRunAlong(t *testing.T) {
	t.Parallel()
	db := livetest.Valkey(t)
	name := uniqueName("cron-prune", db)
	id := fmt.Sprintf("gone-%d", db.DB)
	folder := t.TempDir()
	file, _ := tickScheduler(t, id, folder, 2)
	dir := t.TempDir()
	triggers, windows := filepath.Join(dir, "triggers.json"), filepath.Join(dir, "pause-windows.json")
	now := time.Now().UTC()
	pause := fmt.Sprintf(`{"windows":[{"scope":%q,"from":%q,"to":%q}]}`, folder,
		now.Add(-time.Hour).Format("15:04"), now.Add(2*time.Hour).Format("15:04"))
	for path, data := range map[string]string{triggers: file, windows: pause} {
		if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	w := bootWorker(t, testEnv(t, db.URL, map[string]string{
		"PI_WORKER_NAME": name, "PI_TRIGGERS_FILE": triggers, "PI_PAUSE_WINDOWS_FILE": windows,
	}), dispatch.Tuning{})

	var deferred string
	for deadline := time.Now().Add(30 * time.Second); deferred == ""; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no run was deferred by the pause window; log:\n%s", w.logs.String())
		}
		for _, e := range parseLog(t, w.logs.String()) {
			if e.Msg == "job_deferred" && e.Reason == "pause-window" {
				deferred = e.JobID
			}
		}
	}
	if err := os.WriteFile(triggers, []byte(`{"triggers":[]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); countEvents(t, w.logs.String(), "schedules_reloaded", "") == 0; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the edit was not reloaded; log:\n%s", w.logs.String())
		}
	}
	q := testQueue(t, db, fleet.HostQueueName(name))
	if j, err := q.Get(context.Background(), deferred); err == nil {
		t.Fatalf("the removed trigger's deferred run %s is still queued (%s)", deferred, j.State)
	}
	pending, err := q.PendingIDs(context.Background(), 1000)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pending {
		if strings.HasPrefix(p, "repeat:"+id+":") {
			t.Fatalf("a run of the removed trigger is still pending: %s (all: %v)", p, pending)
		}
	}
	// A run in flight when the file changed (taken between the reload and
	// the prune) is refused as the host no longer agrees to it; nothing of
	// the paused trigger may have run or been recorded otherwise.
	for _, rec := range records(t, w.cfg.LogsDir) {
		if rec.Reason != jobs.ReasonCronNotAgreed || !strings.HasPrefix(rec.JobID, "repeat:"+id+":") {
			t.Fatalf("record of a paused trigger: %+v", rec)
		}
	}
}
