//go:build unix

package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/fleetstate"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/jobs"
	"github.com/pidispatch/pidispatch/queue"
	"github.com/pidispatch/pidispatch/runner"
)

// The tests of this file are written as the attacker: a producer that can
// write to Valkey but holds no host's keys. It writes BullMQ's layout
// straight with go-redis (HSET the job hash, LPUSH its id, wake the
// consumers), as any client of the server could.

// rawJob writes job id on queue q as a keyless producer: data as given,
// attempts 1 unless fields say otherwise; fields are more hash fields.
func rawJob(t *testing.T, c redis.UniversalClient, q, id, data string, fields ...any) {
	t.Helper()
	livetest.RawJob(t, c, q, id, data, fields...)
}

func jobData(t *testing.T, j jobs.Job) string {
	t.Helper()
	b, err := json.Marshal(j)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// refusedOnce waits for jobID's one record on queue q and checks it says
// outcome/reason and that no container started for it.
func refusedOnce(t *testing.T, w *bootedWorker, jobID, outcome string, reason jobs.Reason) jobs.Record {
	t.Helper()
	rec := waitRecord(t, w.cfg.LogsDir, jobID, 30*time.Second)
	if rec.Outcome != outcome || rec.Reason != reason || rec.ExitCode != nil {
		t.Fatalf("record of %s: %+v, want %s/%s without a container", jobID, rec, outcome, reason)
	}
	if n := countEvents(t, w.logs.String(), "job_started", rec.JobID); n != 0 {
		t.Fatalf("%d containers started for %s", n, jobID)
	}
	return rec
}

// Item: folders. A keyless writer names folders no job may work in: a
// system folder owned by root, a symlink inside the root that leads out of
// it, a file, a folder a second local user owns outside the root, a root
// folder inside it; each is refused folder-not-allowed before anything
// starts. A folder of a second local user inside the roots, reached through
// a root that is itself a symlink, runs, as that user, mounted at the
// resolved path.
func TestFoldersOutsideRootsRefused(t *testing.T) {
	t.Parallel()
	ensureImage(t)
	db := livetest.Valkey(t)
	base := t.TempDir()
	root := filepath.Join(base, "projects")
	mkdir := func(p string, uid int) string {
		t.Helper()
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(p, uid, uid); err != nil {
			t.Fatal(err)
		}
		return p
	}
	mkdir(root, 0)
	const otherUser = 4242 // a second local user
	mine := mkdir(filepath.Join(root, "alice"), otherUser)
	outside := mkdir(filepath.Join(base, "elsewhere"), otherUser)
	rootOwned := mkdir(filepath.Join(root, "system"), 0)
	escape := filepath.Join(mine, "escape")
	if err := os.Symlink(outside, escape); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(mine, "single-file")
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	rootLink := filepath.Join(base, "projects-link")
	if err := os.Symlink(root, rootLink); err != nil {
		t.Fatal(err)
	}
	name := uniqueName("folders", db)
	// PI_CONTAINER_USER unset: a root-owned folder must be refused.
	w := bootWorker(t, testEnv(t, db.URL, map[string]string{"PI_WORKER_NAME": name, "PI_FOLDER_ROOTS": rootLink, "PI_CONTAINER_USER": ""}), dispatch.Tuning{})
	if w.cfg.ContainerUserExplicit {
		t.Fatal("PI_CONTAINER_USER must be unset")
	}
	for i, folder := range []string{"/var/run", escape, file, outside, rootOwned} {
		id := uniqueName("evil-folder-"+strconv.Itoa(i), db)
		rawJob(t, db.Client, fleet.SharedQueue, id, jobData(t, jobs.Job{Kind: jobs.KindLocal, Folder: folder, Flow: "fix", Task: "JOB_WRITE_FILE=pwned"}))
		refusedOnce(t, w, id, jobs.OutcomePolicy, jobs.ReasonFolderNotAllowed)
	}
	if _, err := os.Stat(filepath.Join(outside, "pwned")); err == nil {
		t.Fatal("a job wrote outside the roots")
	}

	id := uniqueName("alice", db)
	rawJob(t, db.Client, fleet.SharedQueue, id, jobData(t, jobs.Job{Kind: jobs.KindLocal, Folder: filepath.Join(rootLink, "alice"), Flow: "fix", Task: "JOB_WRITE_FILE=ok.txt"}))
	rec := waitRecord(t, w.cfg.LogsDir, id, 60*time.Second)
	if rec.Outcome != jobs.OutcomeCompleted {
		t.Fatalf("the folder inside the roots: %+v", rec)
	}
	fi, err := os.Stat(filepath.Join(mine, "ok.txt"))
	if err != nil {
		t.Fatalf("the job did not write its folder: %v", err)
	}
	if uid := fileUID(fi); uid != otherUser {
		t.Fatalf("the job ran as uid %d, want the folder's owner %d", uid, otherUser)
	}
	if !strings.Contains(w.logs.String(), "job_folder_not_allowed") {
		t.Fatal("no job_folder_not_allowed line")
	}
}

// Item: images. Job data naming an image the host did not allow is refused
// image-not-allowed; one PI_JOB_IMAGES lists runs.
func TestImageNotAllowedRefused(t *testing.T) {
	t.Parallel()
	ensureImage(t)
	db := livetest.Valkey(t)
	name := uniqueName("images", db)
	w := bootWorker(t, testEnv(t, db.URL, map[string]string{"PI_WORKER_NAME": name}), dispatch.Tuning{})
	job := forgeJob("acme/web", "JOB_EXIT_CODE=0")
	job.Image = "evil/root-shell:latest"
	id := uniqueName("evil-image", db)
	rawJob(t, db.Client, fleet.SharedQueue, id, jobData(t, job))
	rec := refusedOnce(t, w, id, jobs.OutcomePolicy, jobs.ReasonImageNotAllowed)
	if rec.Image != job.Image {
		t.Fatalf("record image %q", rec.Image)
	}
}

// Item: secrets. A hostile job prints its resolved secret in every string
// of its exit line, whole and inside other text. The record, the mirror and
// the queue's return value keep the documented, valid fields only, and never
// the secret. The job asked for a network; its profile did not opt in, so it
// had none.
func TestSecretNeverLeavesTheExitLine(t *testing.T) {
	t.Parallel()
	ensureImage(t)
	db := livetest.Valkey(t)
	name := uniqueName("leak", db)
	secret := "s3cr3t-" + randomHex(12)
	resolver := filepath.Join(t.TempDir(), "resolve-prod")
	if err := os.WriteFile(resolver, []byte("#!/bin/sh\necho SECRET_TOKEN="+secret+"\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	w := bootWorker(t, testEnv(t, db.URL, map[string]string{"PI_WORKER_NAME": name, "PI_SECRET_PROFILES": "prod:" + resolver}), dispatch.Tuning{})
	job := forgeJob("acme/web", `JOB_EXIT_LINE={"event":"exit","turns":2,"model":"${SECRET_TOKEN}","provider":"anthropic","reason":"x${SECRET_TOKEN}y","note":"${SECRET_TOKEN}","outcome":"completed"}`)
	job.SecretsProfile, job.Network = "prod", true
	id := uniqueName("leaky", db)
	q := fleet.HostQueueName(name)
	rawJob(t, db.Client, q, id, jobData(t, job))
	rec := waitRecord(t, w.cfg.LogsDir, id, 60*time.Second)
	if rec.Outcome != jobs.OutcomeCompleted || rec.Network != "none" {
		t.Fatalf("record %+v: want completed with no network", rec)
	}
	if string(rec.Telemetry) != `{"event":"exit","outcome":"completed","turns":2,"provider":"anthropic"}` {
		t.Fatalf("record telemetry %s", rec.Telemetry)
	}
	j := waitJobState(t, testQueue(t, db, q), id, queue.StateCompleted, 10*time.Second)
	w.stop(t)
	if strings.Contains(string(j.ReturnValue), secret) || !strings.Contains(string(j.ReturnValue), `"provider":"anthropic"`) {
		t.Fatalf("return value %s", j.ReturnValue)
	}
	keys, err := db.Client.Keys(context.Background(), "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if strings.Contains(keyContent(t, db.Client, k), secret) {
			t.Errorf("the secret is stored in %s", k)
		}
	}
	entries, _ := os.ReadDir(w.cfg.LogsDir)
	for _, e := range entries {
		data, _ := os.ReadFile(filepath.Join(w.cfg.LogsDir, e.Name()))
		if strings.Contains(string(data), secret) {
			t.Errorf("the secret is in %s", e.Name())
		}
	}
	if strings.Contains(w.logs.String(), secret) {
		t.Error("the secret is in the log")
	}
	if !strings.Contains(w.logs.String(), "job_network_withheld") {
		t.Error("no job_network_withheld line")
	}
}

// Item: counters. A keyless writer sets today's count to a large negative
// number, which used to lift the cap. The job is refused budget-corrupt with
// a loud line, and nothing starts.
func TestNegativeBudgetCounterRefusesJobs(t *testing.T) {
	t.Parallel()
	ensureImage(t)
	db := livetest.Valkey(t)
	ctx := context.Background()
	name := uniqueName("budget", db)
	w := bootWorker(t, testEnv(t, db.URL, map[string]string{"PI_WORKER_NAME": name, "PI_DAILY_CAP": "2"}), dispatch.Tuning{})
	now, err := db.Client.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	for i, junk := range []string{"-1000000", "lots", "99999999999"} {
		if err := db.Client.Set(ctx, fleetstate.BudgetDayKey(now), junk, 0).Err(); err != nil {
			t.Fatal(err)
		}
		id := uniqueName("spend-"+strconv.Itoa(i), db)
		rawJob(t, db.Client, fleet.SharedQueue, id, jobData(t, forgeJob("acme/web", "JOB_EXIT_CODE=0")))
		refusedOnce(t, w, id, jobs.OutcomePolicy, jobs.ReasonBudgetCorrupt)
	}
	if !strings.Contains(w.logs.String(), `"msg":"budget_corrupt"`) {
		t.Fatal("no budget_corrupt line")
	}
}

// Item: records and ids. The same id on the shared and the host queue keeps
// two records on disk and in the mirror; an id carrying a right-to-left
// override is failed invalid-job; a job whose attemptsMade is at or past its
// attempts (5 of 1; an absurd count) fails before its container starts; a
// wait entry without a hash is logged job_entry_dropped.
func TestKeylessQueueWritesCannotConfuseRecords(t *testing.T) {
	t.Parallel()
	ensureImage(t)
	db := livetest.Valkey(t)
	ctx := context.Background()
	name := uniqueName("ids", db)
	w := bootWorker(t, testEnv(t, db.URL, map[string]string{"PI_WORKER_NAME": name}), dispatch.Tuning{})
	host := fleet.HostQueueName(name)

	twin := uniqueName("twin", db)
	rawJob(t, db.Client, fleet.SharedQueue, twin, jobData(t, forgeJob("acme/web", "JOB_EXIT_CODE=0")))
	// One after the other: two containers of one id at once clash on the
	// container's name (see docs/security.md, what remains open).
	waitJobState(t, testQueue(t, db, fleet.SharedQueue), twin, queue.StateCompleted, 60*time.Second)
	if left := containersGone(t, livetest.Docker(t), runner.LabelJob, twin, 30*time.Second); len(left) != 0 {
		t.Fatalf("the first twin's container is still there: %v", left)
	}
	rawJob(t, db.Client, host, twin, jobData(t, forgeJob("acme/web", "JOB_EXIT_CODE=2")))
	deadline := time.Now().Add(60 * time.Second)
	var recs []jobs.Record
	for time.Now().Before(deadline) {
		recs, _ = jobs.ReadRecords(w.cfg.LogsDir, twin)
		if len(recs) == 2 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	byQueue := map[string]jobs.Reason{}
	for _, r := range recs {
		byQueue[r.Queue] = r.Reason
	}
	if byQueue[fleet.SharedQueue] != jobs.ReasonCompleted || byQueue[host] != jobs.ReasonPolicy {
		t.Fatalf("records of the twin id: %+v", recs)
	}

	rtl := "invoice-\u202egpj.exe"
	rawJob(t, db.Client, fleet.SharedQueue, rtl, jobData(t, forgeJob("acme/web", "JOB_EXIT_CODE=0")))
	spent := uniqueName("spent", db)
	rawJob(t, db.Client, fleet.SharedQueue, spent, jobData(t, forgeJob("acme/web", "JOB_EXIT_CODE=0")), "atm", "5", "attemptsMade", "5")
	absurd := uniqueName("absurd", db)
	rawJob(t, db.Client, fleet.SharedQueue, absurd, jobData(t, forgeJob("acme/web", "JOB_EXIT_CODE=0")),
		"atm", "9223372036854775807", "opts", `{"attempts":1e308}`)
	ghost := uniqueName("ghost", db)
	if err := db.Client.LPush(ctx, "bull:"+fleet.SharedQueue+":wait", ghost).Err(); err != nil {
		t.Fatal(err)
	}
	refusedOnce(t, w, spent, jobs.OutcomeFailed, jobs.ReasonInvalidJob)
	refusedOnce(t, w, absurd, jobs.OutcomeFailed, jobs.ReasonInvalidJob)
	sq := testQueue(t, db, fleet.SharedQueue)
	waitJobState(t, sq, rtl, queue.StateFailed, 30*time.Second)
	stand, quoted := jobs.RefusedJobID(rtl)
	rec := refusedOnce(t, w, stand, jobs.OutcomeFailed, jobs.ReasonInvalidJob)
	if rec.JobIDQuoted != quoted || strings.ContainsRune(rec.JobIDQuoted, '\u202e') {
		t.Fatalf("refused id record %+v", rec)
	}
	w.stop(t)
	for _, q := range []string{fleet.SharedQueue, host} {
		if n, err := db.Client.Exists(ctx, fleetstate.RunRecordKey(q, twin, 1)).Result(); err != nil || n != 1 {
			t.Errorf("mirror of %s on %s: %d %v", twin, q, n, err)
		}
	}
	if !strings.Contains(w.logs.String(), `"msg":"job_entry_dropped"`) || !strings.Contains(w.logs.String(), ghost) {
		t.Error("the ghost entry was dropped without a job_entry_dropped line")
	}
}

// fileUID is the uid owning the file fi describes.
func fileUID(fi os.FileInfo) int {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return int(st.Uid)
	}
	return -1
}
