package main

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/enqueue"
	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/fleetstate"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/jobs"
	"github.com/pidispatch/pidispatch/operator"
	"github.com/pidispatch/pidispatch/queue"
)

// gateScript is a wait check for the tests. Its args: a state directory, a tag
// naming the job, the run at which it passes (0: never, unless the directory
// holds a file "pass"), the exit code of a run that does not pass, and an
// optional nap in seconds. Every run appends a line to <dir>/runs-<tag>. A
// directory lock (mkdir) catches two runs at once: the second records itself
// in <dir>/overlap and faults.
const gateScript = `#!/bin/sh
dir="$1"; tag="$2"; passAt="$3"; notYet="$4"; nap="$5"
if ! mkdir "$dir/lock" 2>/dev/null; then echo "$tag" >> "$dir/overlap"; exit 3; fi
echo x >> "$dir/runs-$tag"
n=$(wc -l < "$dir/runs-$tag")
if [ -n "$nap" ]; then sleep "$nap"; fi
rmdir "$dir/lock"
if [ -e "$dir/pass" ]; then exit 0; fi
if [ "$passAt" -gt 0 ] && [ "$n" -ge "$passAt" ]; then exit 0; fi
exit "$notYet"
`

// waitFixture is one test's check: its script, state directory and profile.
type waitFixture struct {
	dir     string
	profile string // PI_WAIT_PROFILES value
}

func newWaitFixture(t *testing.T) waitFixture {
	t.Helper()
	root := t.TempDir()
	script := filepath.Join(root, "gate")
	if err := os.WriteFile(script, []byte(gateScript), 0o700); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, "state")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	return waitFixture{dir: dir, profile: "gate:" + script}
}

// runs counts the check's runs for tag.
func (f waitFixture) runs(t *testing.T, tag string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(f.dir, "runs-"+tag))
	if errors.Is(err, os.ErrNotExist) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), "\n")
}

// condition is a waitFor entry running the gate for tag.
func (f waitFixture) condition(tag string, passAt, notYet int, nap string) jobs.WaitCondition {
	args := []string{f.dir, tag, strconv.Itoa(passAt), strconv.Itoa(notYet)}
	if nap != "" {
		args = append(args, nap)
	}
	return jobs.WaitCondition{Profile: "gate", Args: args}
}

// fastWait holds jobs for milliseconds rather than minutes.
func fastWait() dispatch.Tuning {
	return dispatch.Tuning{WaitIntervalOverride: 300 * time.Millisecond, WaitThrottleFloor: 100 * time.Millisecond}
}

// addWaitJob adds a forge job with the given conditions to queue name.
func addWaitJob(t *testing.T, db *livetest.ValkeyDB, name, id string, dedup *queue.Dedup, conds ...jobs.WaitCondition) {
	t.Helper()
	job := forgeJob("acme/web", "JOB_EXIT_CODE=0")
	job.WaitFor = conds
	data, err := json.Marshal(job)
	if err != nil {
		t.Fatal(err)
	}
	if _, added, err := testQueue(t, db, name).Add(context.Background(), enqueue.JobName, data, queue.AddOptions{JobID: id, Dedup: dedup}); err != nil || !added {
		t.Fatalf("add %s: added %v, %v", id, added, err)
	}
}

// budgetToday is today's global count of container starts.
func budgetToday(t *testing.T, c redis.UniversalClient) int {
	t.Helper()
	n, err := c.Get(context.Background(), fleetstate.BudgetDayKey(time.Now())).Int()
	if errors.Is(err, redis.Nil) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// waitHoldGone waits until the job's hold state is deleted and no hold is
// counted.
func waitHoldGone(t *testing.T, db *livetest.ValkeyDB, id string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		n, err := fleetstate.HeldCount(context.Background(), db.Client)
		exists := db.Client.Exists(context.Background(), fleetstate.WaitJobKey(id)).Val()
		if err == nil && n == 0 && exists == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("hold of %s not ended: held %d (%v), state exists %d", id, n, err, exists)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// events returns the log lines with message msg about job jobID.
func events(t *testing.T, logs, msg, jobID string) []logEvent {
	t.Helper()
	var out []logEvent
	for _, e := range parseLog(t, logs) {
		if e.Msg == msg && (jobID == "" || e.JobID == jobID) {
			out = append(out, e)
		}
	}
	return out
}

// attr reads one attribute of a JSON log line.
func attr(t *testing.T, e logEvent, name string) any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(e.raw), &m); err != nil {
		t.Fatal(err)
	}
	return m[name]
}

// A job whose check passes on the third try runs once, after three checks,
// and spends nothing while it is held.
func TestWaitCheckPassesOnThirdTry(t *testing.T) {
	t.Parallel()
	ensureImage(t)
	db := livetest.Valkey(t)
	fx := newWaitFixture(t)
	name := uniqueName("wait3", db)
	w := bootWorker(t, testEnv(t, db.URL, map[string]string{"PI_WORKER_NAME": name, "PI_WAIT_PROFILES": fx.profile}), fastWait())

	id := uniqueName("gh-wait3", db)
	addWaitJob(t, db, fleet.SharedQueue, id, nil, fx.condition("j", 3, 1, ""))
	path := filepath.Join(w.cfg.LogsDir, jobs.RecordName(fleet.SharedQueue, id, 1))
	sawHeld := false
	deadline := time.Now().Add(60 * time.Second)
	for {
		if _, err := os.Stat(path); err == nil {
			break
		}
		// Read the count first: a budget of 1 seen after fewer than three runs
		// would be a start before the condition was met.
		runs := fx.runs(t, "j")
		if b := budgetToday(t, db.Client); b != 0 && runs < 3 {
			t.Fatalf("budget %d after %d checks: spent before release", b, runs)
		}
		if runs > 0 && runs < 3 {
			if n, err := fleetstate.HeldCount(context.Background(), db.Client); err == nil && n == 1 {
				sawHeld = true
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no record after 60s (%d checks)", runs)
		}
		time.Sleep(20 * time.Millisecond)
	}
	rec := waitRecord(t, w.cfg.LogsDir, id, time.Second)
	if rec.Outcome != jobs.OutcomeCompleted || rec.Host != name {
		t.Fatalf("record %+v", rec)
	}
	if !sawHeld {
		t.Error("the job was never counted as held while it waited")
	}
	if n := fx.runs(t, "j"); n != 3 {
		t.Fatalf("%d checks, want 3", n)
	}
	if b := budgetToday(t, db.Client); b != 1 {
		t.Fatalf("budget %d, want the one start", b)
	}
	waitJobState(t, testQueue(t, db, fleet.SharedQueue), id, queue.StateCompleted, 10*time.Second)
	waitHoldGone(t, db, id)
	w.stop(t)
	logs := w.logs.String()
	if n := countEvents(t, logs, "job_started", id); n != 1 {
		t.Fatalf("%d job_started lines, want 1", n)
	}
	if n := countEvents(t, logs, "wait_checked", id); n != 3 {
		t.Fatalf("%d wait_checked lines, want 3", n)
	}
	deferred := 0
	for _, e := range events(t, logs, "job_deferred", id) {
		if e.Reason != "wait-check" {
			t.Fatalf("deferred for %s", e.raw)
		}
		deferred++
	}
	if deferred != 2 {
		t.Fatalf("%d deferrals, want 2 (after the first and second checks)", deferred)
	}
}

// With PI_WAIT_CHECK_SLOTS=1, two named hosts holding ten jobs never run two
// checks at once, fleet-wide; every job still runs once its check passes.
func TestWaitChecksShareOneFleetSlot(t *testing.T) {
	t.Parallel()
	ensureImage(t)
	db := livetest.Valkey(t)
	fx := newWaitFixture(t)
	var workers []*bootedWorker
	for _, n := range []string{"slot-a", "slot-b"} {
		workers = append(workers, bootWorker(t, testEnv(t, db.URL, map[string]string{
			"PI_WORKER_NAME": uniqueName(n, db), "PI_WAIT_PROFILES": fx.profile, "PI_WAIT_CHECK_SLOTS": "1",
		}), fastWait()))
	}
	waitHosts(t, db.Client, nil, workers[0].cfg.WorkerName, workers[1].cfg.WorkerName)

	var ids []string
	for i := range 10 {
		id := uniqueName("gh-slot"+strconv.Itoa(i), db)
		ids = append(ids, id)
		addWaitJob(t, db, fleet.SharedQueue, id, nil, fx.condition("j"+strconv.Itoa(i), 2, 1, "0.1"))
	}
	dirs := []string{workers[0].cfg.LogsDir, workers[1].cfg.LogsDir}
	deadline := time.Now().Add(90 * time.Second)
	for _, id := range ids {
		for !recordExists(dirs, id) {
			if time.Now().After(deadline) {
				t.Fatalf("job %s has no record", id)
			}
			time.Sleep(50 * time.Millisecond)
		}
		if rec, _ := readRecord(t, dirs, id); rec.Outcome != jobs.OutcomeCompleted {
			t.Fatalf("record %+v", rec)
		}
	}
	if b, err := os.ReadFile(filepath.Join(fx.dir, "overlap")); err == nil {
		t.Fatalf("two checks ran at once (jobs %q)", b)
	}
	for i := range 10 {
		if n := fx.runs(t, "j"+strconv.Itoa(i)); n != 2 {
			t.Fatalf("job %d: %d checks, want 2", i, n)
		}
	}
	workers[0].stop(t)
	workers[1].stop(t)
	started, fleetDenied := 0, 0
	for _, w := range workers {
		logs := w.logs.String()
		started += countEvents(t, logs, "job_started", "")
		for _, e := range events(t, logs, "wait_check_throttled", "") {
			if attr(t, e, "where") == "fleet" {
				fleetDenied++
			}
		}
	}
	if started != 10 {
		t.Fatalf("%d containers, want 10", started)
	}
	if fleetDenied == 0 {
		t.Fatal("no check was ever denied the fleet slot: the test did not contend")
	}
	if keys := db.Client.Keys(context.Background(), "wait:check:*").Val(); len(keys) != 0 {
		t.Fatalf("check slots left held: %v", keys)
	}
}

// A hold that never passes is refused with its reason and a record, never
// retried and never spending: by timeout, by the number of checks, by faults.
func TestWaitRefusals(t *testing.T) {
	t.Parallel()
	ensureImage(t)
	tests := []struct {
		name   string
		tune   func(*dispatch.Tuning)
		notYet int
		reason jobs.Reason
		runs   func(n int) bool
	}{
		{"Timeout", func(tu *dispatch.Tuning) { tu.WaitMaxOverride = 1500 * time.Millisecond }, 1, jobs.ReasonWaitTimeout, func(n int) bool { return n >= 2 && n <= 6 }},
		{"MaxChecks", func(tu *dispatch.Tuning) { tu.WaitMaxChecks = 3 }, 1, jobs.ReasonWaitMaxChecks, func(n int) bool { return n == 3 }},
		{"Faults", func(*dispatch.Tuning) {}, 3, jobs.ReasonWaitFaults, func(n int) bool { return n == dispatch.DefaultWaitMaxFaults }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			db := livetest.Valkey(t)
			fx := newWaitFixture(t)
			tune := fastWait()
			tt.tune(&tune)
			w := bootWorker(t, testEnv(t, db.URL, map[string]string{"TEST_DEFAULT_NAME": uniqueName("refuse", db), "PI_WAIT_PROFILES": fx.profile}), tune)
			id := uniqueName("gh-refuse", db)
			addWaitJob(t, db, fleet.SharedQueue, id, nil, fx.condition("j", 0, tt.notYet, ""))
			j := waitJobState(t, testQueue(t, db, fleet.SharedQueue), id, queue.StateCompleted, 30*time.Second)
			rec := waitRecord(t, w.cfg.LogsDir, id, 5*time.Second)
			if rec.Outcome != jobs.OutcomePolicy || rec.Reason != tt.reason || rec.ExitCode != nil || rec.Attempt != 1 {
				t.Fatalf("record %+v, want policy/%s", rec, tt.reason)
			}
			if !strings.Contains(string(j.ReturnValue), `"reason":"`+string(tt.reason)+`"`) || j.AttemptsMade != 1 {
				t.Fatalf("job result %s after %d attempts", j.ReturnValue, j.AttemptsMade)
			}
			if n := fx.runs(t, "j"); !tt.runs(n) {
				t.Fatalf("%d checks", n)
			}
			waitHoldGone(t, db, id)
			time.Sleep(400 * time.Millisecond) // a retry or a stray check would show by now
			n := fx.runs(t, "j")
			w.stop(t)
			if fx.runs(t, "j") != n {
				t.Fatal("checked again after the refusal")
			}
			logs := w.logs.String()
			if countEvents(t, logs, "job_started", id) != 0 || budgetToday(t, db.Client) != 0 {
				t.Fatal("a refused hold spent")
			}
			if countEvents(t, logs, "job_refused", id) != 1 {
				t.Fatal("want one refusal")
			}
			if tt.reason == jobs.ReasonWaitFaults {
				faults := events(t, logs, "wait_check_fault", id)
				if len(faults) != dispatch.DefaultWaitMaxFaults || faults[0].Reason != "exited with code 3" {
					t.Fatalf("fault lines %v", faults)
				}
			}
		})
	}
}

// A host stopped between checks: another host picks the job up and continues
// the hold from the stored state instead of starting over.
func TestWaitHoldContinuesOnAnotherHost(t *testing.T) {
	t.Parallel()
	ensureImage(t)
	db := livetest.Valkey(t)
	fx := newWaitFixture(t)
	env := func(n string) func(string) string {
		return testEnv(t, db.URL, map[string]string{"PI_WORKER_NAME": uniqueName(n, db), "PI_WAIT_PROFILES": fx.profile})
	}
	a := bootWorker(t, env("cont-a"), fastWait())
	id := uniqueName("gh-cont", db)
	addWaitJob(t, db, fleet.SharedQueue, id, nil, fx.condition("j", 0, 1, ""))

	ctx := context.Background()
	deadline := time.Now().Add(30 * time.Second)
	for {
		n, _ := db.Client.HGet(ctx, fleetstate.WaitJobKey(id), "checks").Int()
		if n >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never checked twice", a.cfg.WorkerName)
		}
		time.Sleep(20 * time.Millisecond)
	}
	a.stop(t)
	state := db.Client.HGetAll(ctx, fleetstate.WaitJobKey(id)).Val()
	checks, err := strconv.Atoi(state["checks"])
	if err != nil || checks < 2 || state["since"] == "" {
		t.Fatalf("state after %s stopped: %v", a.cfg.WorkerName, state)
	}
	if fx.runs(t, "j") != checks {
		t.Fatalf("%d runs, state says %d checks", fx.runs(t, "j"), checks)
	}
	if err := os.WriteFile(filepath.Join(fx.dir, "pass"), nil, 0o600); err != nil {
		t.Fatal(err)
	}

	b := bootWorker(t, env("cont-b"), fastWait())
	rec := waitRecord(t, b.cfg.LogsDir, id, 60*time.Second)
	if rec.Outcome != jobs.OutcomeCompleted || rec.Host != b.cfg.WorkerName {
		t.Fatalf("record %+v", rec)
	}
	if n := fx.runs(t, "j"); n != checks+1 {
		t.Fatalf("%d runs, want %d: one more check on %s", n, checks+1, b.cfg.WorkerName)
	}
	waitHoldGone(t, db, id)
	b.stop(t)
	logs := b.logs.String()
	checked := events(t, logs, "wait_checked", id)
	if len(checked) != 1 || attr(t, checked[0], "checks") != float64(checks+1) {
		t.Fatalf("wait_checked on %s: %v, want one with checks=%d", b.cfg.WorkerName, checked, checks+1)
	}
	if countEvents(t, logs, "wait_hold_started", id) != 0 {
		t.Fatalf("%s started the hold over", b.cfg.WorkerName)
	}
	if countEvents(t, a.logs.String(), "job_started", id) != 0 || countEvents(t, logs, "job_started", id) != 1 {
		t.Fatal("want one start, on the second host")
	}
}

// An `after` condition is one exact deferral to its instant (a delay from
// the hold's start, or an RFC 3339 instant); past PI_WAIT_AFTER_MAX_MS it is
// refused at once.
func TestWaitAfter(t *testing.T) {
	t.Parallel()
	ensureImage(t)
	db := livetest.Valkey(t)
	w := bootWorker(t, testEnv(t, db.URL, map[string]string{"TEST_DEFAULT_NAME": uniqueName("after", db), "PI_WAIT_AFTER_MAX_MS": "60000"}), fastWait())

	added := time.Now()
	at := added.Add(2500 * time.Millisecond).UTC()
	delayID, instantID, farID := uniqueName("gh-after-delay", db), uniqueName("gh-after-at", db), uniqueName("gh-after-far", db)
	addWaitJob(t, db, fleet.SharedQueue, delayID, nil, jobs.WaitCondition{After: "2s"})
	addWaitJob(t, db, fleet.SharedQueue, instantID, nil, jobs.WaitCondition{After: at.Format(time.RFC3339Nano)})
	addWaitJob(t, db, fleet.SharedQueue, farID, nil, jobs.WaitCondition{After: "2m"})

	far := waitRecord(t, w.cfg.LogsDir, farID, 30*time.Second)
	if far.Outcome != jobs.OutcomePolicy || far.Reason != jobs.ReasonWaitTimeout {
		t.Fatalf("an after past PI_WAIT_AFTER_MAX_MS: record %+v", far)
	}
	for id, notBefore := range map[string]time.Time{delayID: added.Add(2 * time.Second), instantID: at} {
		rec := waitRecord(t, w.cfg.LogsDir, id, 60*time.Second)
		if rec.Outcome != jobs.OutcomeCompleted {
			t.Fatalf("record %+v", rec)
		}
		if rec.StartedAt.Before(notBefore) {
			t.Fatalf("%s started at %s, before its after instant %s", id, rec.StartedAt, notBefore)
		}
		if rec.StartedAt.After(notBefore.Add(20 * time.Second)) {
			t.Fatalf("%s started at %s, long after %s", id, rec.StartedAt, notBefore)
		}
		waitHoldGone(t, db, id)
	}
	w.stop(t)
	logs := w.logs.String()
	for _, id := range []string{delayID, instantID} {
		d := events(t, logs, "job_deferred", id)
		if len(d) != 1 || d[0].Reason != "wait-after" {
			t.Fatalf("deferrals of %s: %v, want exactly one wait-after", id, d)
		}
		if countEvents(t, logs, "wait_checked", id) != 0 {
			t.Fatal("an after condition ran a check")
		}
	}
	if countEvents(t, logs, "job_started", farID) != 0 || countEvents(t, logs, "job_deferred", farID) != 0 {
		t.Fatal("the far after was held or ran")
	}
}

// A newer delivery of a dedup id supersedes an older hold that sits on a host
// queue: the older job is live there (the original looked only at the shared
// queue and would have let both run), so it is refused wait-superseded at its
// next check, and only the newer one runs.
func TestWaitSupersededAcrossQueues(t *testing.T) {
	t.Parallel()
	ensureImage(t)
	db := livetest.Valkey(t)
	fx := newWaitFixture(t)
	name := uniqueName("super", db)
	w := bootWorker(t, testEnv(t, db.URL, map[string]string{"PI_WORKER_NAME": name, "PI_WAIT_PROFILES": fx.profile}), fastWait())
	const dedup = "acme/web#12:review"
	oldID, newID := uniqueName("gh-old", db), uniqueName("gh-new", db)
	addWaitJob(t, db, fleet.HostQueueName(name), oldID, &queue.Dedup{ID: dedup, TTL: time.Millisecond}, fx.condition("old", 0, 1, ""))
	ctx := context.Background()
	deadline := time.Now().Add(30 * time.Second)
	for fx.runs(t, "old") < 1 {
		if time.Now().After(deadline) {
			t.Fatal("the older job was never checked")
		}
		time.Sleep(20 * time.Millisecond)
	}
	addWaitJob(t, db, fleet.SharedQueue, newID, &queue.Dedup{ID: dedup, TTL: time.Millisecond}, fx.condition("new", 1, 1, ""))

	old := waitRecord(t, w.cfg.LogsDir, oldID, 30*time.Second)
	if old.Outcome != jobs.OutcomePolicy || old.Reason != jobs.ReasonWaitSuperseded {
		t.Fatalf("older record %+v", old)
	}
	rec := waitRecord(t, w.cfg.LogsDir, newID, 60*time.Second)
	if rec.Outcome != jobs.OutcomeCompleted {
		t.Fatalf("newer record %+v", rec)
	}
	waitHoldGone(t, db, oldID)
	waitHoldGone(t, db, newID)
	if db.Client.Exists(ctx, fleetstate.WaitDedupKey(dedup)).Val() != 0 {
		t.Fatal("the dedup id's holder outlived both jobs")
	}
	w.stop(t)
	logs := w.logs.String()
	took := events(t, logs, "wait_took_over", newID)
	if len(took) != 1 || attr(t, took[0], "previous") != oldID || attr(t, took[0], "previousLive") != true || attr(t, took[0], "previousQueue") != fleet.HostQueueName(name) {
		t.Fatalf("takeover lines %v", took)
	}
	if countEvents(t, logs, "job_started", oldID) != 0 || countEvents(t, logs, "job_started", newID) != 1 {
		t.Fatal("want the newer job alone to run")
	}
}

// A held job shows in the operator's status, and cancelling it removes the
// job and its hold state.
func TestHeldJobInStatusAndCancel(t *testing.T) {
	t.Parallel()
	ensureImage(t)
	db := livetest.Valkey(t)
	fx := newWaitFixture(t)
	name := uniqueName("heldcancel", db)
	// Checks 3 s apart: the job sits delayed between them for far longer
	// than a check runs, even on a loaded machine, so a cancel finds it there.
	tune := fastWait()
	tune.WaitIntervalOverride = 3 * time.Second
	bootWorker(t, testEnv(t, db.URL, map[string]string{"PI_WORKER_NAME": name, "PI_WAIT_PROFILES": fx.profile}), tune)
	// A check that never passes (it would pass at run 1000).
	addWaitJob(t, db, fleet.SharedQueue, "gh-held-1", nil, fx.condition("never", 1000, 1000, ""))

	ctx := context.Background()
	deadline := time.Now().Add(60 * time.Second)
	for fx.runs(t, "never") < 1 {
		if time.Now().After(deadline) {
			t.Fatal("the check never ran")
		}
		time.Sleep(50 * time.Millisecond)
	}
	set, err := operator.FleetQueues(ctx, db.Client)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := operator.Status(ctx, db.Client, set)
	if err != nil || rep.Held != 1 {
		t.Fatalf("status held = %d (%v), want 1", rep.Held, err)
	}
	// Cancel it between checks (it is delayed, not running).
	var res operator.CancelResult
	for {
		res, err = operator.Cancel(ctx, db.Client, "gh-held-1", 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if res.Where == operator.CancelRemoved || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond) // it was mid-check; try again
	}
	if res.Where != operator.CancelRemoved {
		t.Fatalf("cancel %+v", res)
	}
	waitHoldGone(t, db, "gh-held-1")
}
