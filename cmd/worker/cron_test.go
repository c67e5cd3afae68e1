package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pidispatch/pidispatch/cronsync"
	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/internal/livetest"
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
	job, err := dispatch.ParseJob(cronsync.JobData(tr.Cron[0]))
	if err != nil {
		t.Fatalf("the worker refuses cron job data: %v", err)
	}
	if job.Kind != dispatch.KindCron || job.SchedulerID != "nightly" || job.Folder != "/srv/app" || job.MaxTurns != 40 || !job.Network {
		t.Fatalf("job %+v", job)
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
	q, err := queue.New(db.Client, queue.SharedQueue, queue.Config{})
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
			data, err := os.ReadFile(filepath.Join(w.cfg.LogsDir, e.Name()))
			if err != nil {
				t.Fatal(err)
			}
			var r dispatch.Record
			if err := json.Unmarshal(data, &r); err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(r.JobID, "repeat:tick:") || r.Kind != dispatch.KindCron {
				t.Fatalf("unexpected record %+v", r)
			}
			if other, dup := seen[r.JobID]; dup {
				t.Fatalf("tick %s ran twice (on %s and %s)", r.JobID, other, r.Host)
			}
			if r.Outcome != dispatch.OutcomeCompleted {
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
	q, err := queue.New(db.Client, queue.HostQueueName(second), queue.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if s, err := q.Schedulers(context.Background()); err != nil || len(s) != 0 {
		t.Fatalf("a refusing host installed schedulers: %+v %v", s, err)
	}
	p, err := dispatch.NewProducer(db.Client, dispatch.ProducerConfig{WorkerName: second, WorkerNameDeclared: true})
	if err != nil {
		t.Fatal(err)
	}
	e, err := p.EnqueueLocal(context.Background(), dispatch.Job{Folder: t.TempDir(), Flow: "fix", Task: "t"})
	if err != nil {
		t.Fatal(err)
	}
	if rec := waitRecord(t, b.cfg.LogsDir, e.JobID, 60*time.Second); rec.Outcome != dispatch.OutcomeCompleted {
		t.Fatalf("the refusing host did not drain its queue: %+v", rec)
	}
}
