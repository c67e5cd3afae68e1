package stack_test

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pidispatch/pidispatch/config"
	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/enqueue"
	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/internal/image/jobimage"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/internal/testkit/recordtest"
	"github.com/pidispatch/pidispatch/internal/testkit/stacktest"
	"github.com/pidispatch/pidispatch/jobs"
	"github.com/pidispatch/pidispatch/queue"
	"github.com/pidispatch/pidispatch/stack"
)

// TestLiveUnsignedJobsAreRefused runs a real worker that holds the fleet
// key. Jobs an attacker writes straight into BullMQ's keys (HSET of the job
// hash, LPUSH onto wait) are refused job-unsigned with a run record, and so
// is a signed job copied to another id or to another queue; the job the
// CLI's producer signed runs.
func TestLiveUnsignedJobsAreRefused(t *testing.T) {
	db := livetest.Valkey(t)
	dc := livetest.Docker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := jobimage.Ensure(ctx, dc, jobimage.TestTag); err != nil {
		t.Fatal(err)
	}
	keyFile := filepath.Join(t.TempDir(), "fleet.key")
	if err := os.WriteFile(keyFile, []byte(strings.Repeat("k3y-", 10)), 0o600); err != nil {
		t.Fatal(err)
	}
	name, logs := "trust-worker-1", t.TempDir()
	env := map[string]string{
		"VALKEY_URL": db.URL, "PI_WORKER_NAME": name, "PI_JOB_IMAGE": jobimage.TestTag,
		"PI_LOGS_DIR": logs, "PI_JOB_MEMORY": "256m", "PI_JOB_CPUS": "0.5", "PI_FLEET_KEY_FILE": keyFile, "PI_FOLDER_ROOTS": os.TempDir(), "PI_CONTAINER_USER": "root",
	}
	cfg, err := config.Load(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.FleetKey.IsSet() {
		t.Fatal("config.Load did not read the key")
	}
	s, err := stack.Build(ctx, cfg, slog.New(slog.NewJSONHandler(io.Discard, nil)), dispatch.Tuning{JobsDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	stacktest.Run(t, s)

	// The producer the CLI builds: it signs.
	p, err := enqueue.NewProducer(db.Client, enqueue.ProducerConfig{WorkerName: name, WorkerNameDeclared: true, FleetKey: cfg.FleetKey})
	if err != nil {
		t.Fatal(err)
	}
	signed, err := p.EnqueueLocal(ctx, jobs.Job{Folder: t.TempDir(), Flow: "fix", Task: "JOB_PRINT_EXIT_LINE=1"})
	if err != nil {
		t.Fatal(err)
	}
	hostQueue := fleet.HostQueueName(name)
	orig, err := db.Client.HGetAll(ctx, "bull:"+hostQueue+":"+signed.JobID).Result()
	if err != nil || orig["opts"] == "" {
		t.Fatalf("signed job hash: %v %v", orig, err)
	}

	// The attacker's writes, as raw BullMQ keys.
	rawAdd := func(queueName, id, data, opts string) {
		t.Helper()
		livetest.RawJob(t, db.Client, queueName, id, data, "opts", opts)
	}
	rawAdd(hostQueue, "evil-unsigned", `{"kind":"forge","repo":"acme/widgets","flow":"fix","task":"JOB_PRINT_EXIT_LINE=1"}`, `{"attempts":1}`)
	rawAdd(fleet.SharedQueue, "evil-unsigned-shared", `{"kind":"forge","repo":"acme/widgets","flow":"fix","task":"t"}`, `{"attempts":1,"pisig":"`+strings.Repeat("0", 64)+`"}`)
	rawAdd(hostQueue, "evil-copied-id", orig["data"], orig["opts"])

	record := func(id string) jobs.Record {
		t.Helper()
		return recordtest.Wait(t, logs, id, 90*time.Second)
	}
	for _, id := range []string{"evil-unsigned", "evil-unsigned-shared", "evil-copied-id"} {
		if r := record(id); r.Outcome != jobs.OutcomePolicy || r.Reason != jobs.ReasonJobUnsigned {
			t.Errorf("%s: %s/%s, want policy/job-unsigned", id, r.Outcome, r.Reason)
		}
	}
	// The signed job ran. Then its copy on the shared queue (same id, so
	// its attempt's record is the original's) is refused: its result says so.
	if r := record(signed.JobID); r.Reason != jobs.ReasonCompleted {
		t.Errorf("signed job: %s/%s, want completed", r.Outcome, r.Reason)
	}
	rawAdd(fleet.SharedQueue, signed.JobID, orig["data"], orig["opts"])
	shared, err := queue.New(db.Client, fleet.SharedQueue, queue.Config{})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(90 * time.Second)
	for {
		j, err := shared.Get(ctx, signed.JobID)
		if err == nil && j.State == queue.StateCompleted {
			if !strings.Contains(string(j.ReturnValue), string(jobs.ReasonJobUnsigned)) {
				t.Fatalf("the copy on %s finished with %s, want refused job-unsigned", fleet.SharedQueue, j.ReturnValue)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the copy on %s never finished: %+v %v", fleet.SharedQueue, j, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// A host that re-homes a signed job (a dead host's waiting work) signs it
// for its new queue; an unsigned job it moves stays unsigned there.
func TestLiveRehomedJobIsResigned(t *testing.T) {
	db := livetest.Valkey(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	keyFile := filepath.Join(t.TempDir(), "fleet.key")
	if err := os.WriteFile(keyFile, []byte(strings.Repeat("k3y-", 10)), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(func(k string) string { return map[string]string{"PI_FLEET_KEY_FILE": keyFile}[k] })
	if err != nil {
		t.Fatal(err)
	}
	gone := fleet.HostQueueName("gone-host")
	p, err := enqueue.NewProducer(db.Client, enqueue.ProducerConfig{WorkerName: "gone-host", WorkerNameDeclared: true, FleetKey: cfg.FleetKey})
	if err != nil {
		t.Fatal(err)
	}
	e, err := p.EnqueueLocal(ctx, jobs.Job{Folder: t.TempDir(), Flow: "fix", Task: "t"})
	if err != nil {
		t.Fatal(err)
	}
	dir, err := queue.NewDirectory(db.Client, queue.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := stack.SigningDirectory(dir, cfg.FleetKey).Move(ctx, gone, fleet.SharedQueue, e.JobID); err != nil {
		t.Fatal(err)
	}
	shared, _ := dir.Queue(fleet.SharedQueue)
	j, err := shared.Get(ctx, e.JobID)
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.FleetKey.VerifyJob(fleet.SharedQueue, j.ID, j.Data, j.Signature) {
		t.Fatalf("re-homed job not signed for %s", fleet.SharedQueue)
	}
	if cfg.FleetKey.VerifyJob(gone, j.ID, j.Data, j.Signature) {
		t.Fatal("the old queue's signature still verifies")
	}
}
