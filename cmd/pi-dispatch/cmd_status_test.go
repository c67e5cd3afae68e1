package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/fleetstate"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/jobs"
	"github.com/pidispatch/pidispatch/queue"
)

// finishNext takes q's next job and completes it with result, or fails it
// for good when result is "".
func finishNext(t *testing.T, q *queue.Queue, result string) {
	t.Helper()
	ctx := context.Background()
	tok := queue.NewToken()
	j, err := q.Fetch(ctx, tok)
	if err != nil || j == nil {
		t.Fatalf("fetch: %v %v", j, err)
	}
	if result == "" {
		if _, err := q.Fail(ctx, j.ID, tok, string(jobs.ReasonExit1), queue.FailOptions{NoRetry: true}); err != nil {
			t.Fatal(err)
		}
		return
	}
	if err := q.Complete(ctx, j.ID, tok, json.RawMessage(result)); err != nil {
		t.Fatal(err)
	}
}

// Refused and cancelled jobs are not "completed": status counts each
// outcome, as a table by default, per queue on request, and as JSON.
func TestStatusCountsByOutcomeGolden(t *testing.T) {
	db := livetest.Valkey(t)
	ctx := context.Background()
	shared := newQueue(t, db.Client, fleet.SharedQueue)
	alpha := newQueue(t, db.Client, fleet.HostQueueName("alpha"))
	if err := alpha.Declare(ctx); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"s1", "s2", "s3", "s4", "s5"} {
		add(t, shared, id, queue.AddOptions{})
	}
	add(t, alpha, "a1", queue.AddOptions{})
	add(t, alpha, "a2", queue.AddOptions{})
	finishNext(t, shared, `{"event":"exit","turns":3}`)
	finishNext(t, shared, `{"outcome":"policy","reason":"scope-cap"}`)
	finishNext(t, shared, `{"outcome":"policy","reason":"operator-cancel"}`)
	finishNext(t, shared, "")
	finishNext(t, alpha, `{"outcome":"policy","reason":"over-budget"}`)
	if err := alpha.Pause(ctx); err != nil {
		t.Fatal(err)
	}
	env := vars(db.URL)

	expect(t, runCLI(t, env, "status"), db.URL, 0, ""+
		"fleet: PARTLY PAUSED (1 of 2 queues paused: pi-jobs@alpha); run `pi-dispatch pause` or `resume` to make it whole\n"+
		"QUEUE  PAUSED  WAITING  DELAYED  PRIORITIZED  ACTIVE  COMPLETED  REFUSED  CANCELLED  FAILED\n"+
		"total  partly  2        0        0            0       1          2        1          1\n"+
		"container starts day: 0/25 (resets <time>)\n", "")
	expect(t, runCLI(t, env, "status", "--per-queue"), db.URL, 0, ""+
		"fleet: PARTLY PAUSED (1 of 2 queues paused: pi-jobs@alpha); run `pi-dispatch pause` or `resume` to make it whole\n"+
		"QUEUE          PAUSED  WAITING  DELAYED  PRIORITIZED  ACTIVE  COMPLETED  REFUSED  CANCELLED  FAILED\n"+
		"pi-jobs        no      1        0        0            0       1          1        1          1\n"+
		"pi-jobs@alpha  yes     1        0        0            0       0          1        0          0\n"+
		"total          partly  2        0        0            0       1          2        1          1\n"+
		"container starts day: 0/25 (resets <time>)\n", "")
	expect(t, runCLI(t, env, "status", "--json", "--per-queue"), db.URL, 0,
		`{"pausedState":false,"pausedPartial":true,"pausedQueues":["pi-jobs@alpha"],"waiting":2,"active":0,"paused":0,"delayed":0,"failed":1,"completed":1,"refused":2,"cancelled":1,"prioritized":0,`+
			`"perQueue":[{"queue":"pi-jobs","pausedState":false,"waiting":1,"active":0,"paused":0,"delayed":0,"failed":1,"completed":1,"refused":1,"cancelled":1,"prioritized":0},`+
			`{"queue":"pi-jobs@alpha","pausedState":true,"waiting":1,"active":0,"paused":0,"delayed":0,"failed":0,"completed":0,"refused":1,"cancelled":0,"prioritized":0}],`+
			`"spend":{"starts":[{"window":"day","count":0,"cap":25,"resetsAt":"<time>"}]},"pauseFlag":false,"queues":2,"held":0}`+"\n", "")
	expect(t, runCLI(t, env, "status", "--frobnicate"), db.URL, 2, "",
		"pi-dispatch status: unexpected argument \"--frobnicate\" (usage: pi-dispatch status [--per-queue] [--json])\n")
}

// run says when the job it queued waits for a resume.
func TestRunSaysTheJobWaitsForAResume(t *testing.T) {
	db := livetest.Valkey(t)
	env := map[string]string{"VALKEY_URL": db.URL, "PI_UNSIGNED_QUEUES": "*"}
	folder := gitRepo(t, false)
	r := runCLI(t, env, "run", folder, "--task", "fix the tests", "--flow", "fix", "--env-file", "")
	if r.code != exitOK || strings.Contains(r.stderr, "resume") {
		t.Fatalf("not paused: %+v", r)
	}
	if r := runCLI(t, env, "pause"); r.code != exitOK {
		t.Fatalf("%+v", r)
	}
	folder2 := gitRepo(t, false)
	r = runCLI(t, env, "run", folder2, "--task", "fix the tests", "--flow", "fix", "--env-file", "")
	if r.code != exitOK || !strings.Contains(r.stderr, "note: the fleet is paused, so this job waits until `pi-dispatch resume`\n") {
		t.Fatalf("paused: %+v", r)
	}
	queuedJob(t, db, fleet.SharedQueue, r.stdout, folder2)
}

// With dollar windows set and a provider rate-limited, status shows where
// the money stands and which provider waits for its reset.
func TestStatusShowsSpendAndRateLimits(t *testing.T) {
	db := livetest.Valkey(t)
	ctx := context.Background()
	newQueue(t, db.Client, fleet.SharedQueue)
	d := fleetstate.NewDollars(db.Client, fleetstate.DollarsConfig{DailyMicros: 10_000_000})
	res, err := d.ReserveDollars(ctx, "j1", "", nil, 2_000_000, time.Minute)
	if err != nil || !res.Granted {
		t.Fatalf("reserve: %+v %v", res, err)
	}
	until := time.Now().Add(20 * time.Second).UTC().Truncate(time.Second)
	if err := fleetstate.NewRateLimits(db.Client, fleetstate.RateLimitsConfig{}).Suspend(ctx, "anthropic", until, "429 rate_limit_error"); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"VALKEY_URL": db.URL, "PI_UNSIGNED_QUEUES": "*", "PI_MAX_COST_USD": "2", "PI_DAILY_COST_USD": "10"}
	r := runCLI(t, env, "status")
	for _, want := range []string{
		"container starts day: 0/25 (resets ",
		"dollars day: $0.00 spent + $2.00 reserved of $10.00",
		"rate-limited: anthropic until " + until.Format(time.RFC3339) + " (429 rate_limit_error)",
	} {
		if r.code != exitOK || !strings.Contains(r.stdout, want) {
			t.Fatalf("status (exit %d) lacks %q:\n%s%s", r.code, want, r.stdout, r.stderr)
		}
	}
	r = runCLI(t, env, "status", "--json")
	var rep struct {
		Spend struct {
			Dollars []struct {
				Window      string
				ReservedUsd float64
			}
			Suspended []struct {
				Provider string
				Until    time.Time
			}
		}
	}
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil || len(rep.Spend.Dollars) != 1 || rep.Spend.Dollars[0].ReservedUsd != 2 ||
		len(rep.Spend.Suspended) != 1 || !rep.Spend.Suspended[0].Until.Equal(until) {
		t.Fatalf("status --json: %s (%v)", r.stdout, err)
	}
}

// status always shows the container-start windows as used/cap with their
// reset, dollar windows or not, and says when one is full: a full window
// refuses every job.
func TestStatusAlwaysShowsTheCountWindows(t *testing.T) {
	db := livetest.Valkey(t)
	ctx := context.Background()
	newQueue(t, db.Client, fleet.SharedQueue)
	b := fleetstate.NewBudget(db.Client, fleetstate.BudgetConfig{DailyCap: 2})
	for i := range 2 {
		if res, err := b.Reserve(ctx, fmt.Sprintf("tok-%d", i), nil); err != nil || !res.Granted {
			t.Fatalf("reserve %d: %+v %v", i, res, err)
		}
	}
	r := runCLI(t, map[string]string{"VALKEY_URL": db.URL, "PI_UNSIGNED_QUEUES": "*", "PI_DAILY_CAP": "2"}, "status")
	if r.code != exitOK || !strings.Contains(r.stdout, "container starts day: 2/2 (resets ") ||
		!strings.Contains(r.stdout, "FULL: new jobs are refused over-budget until the reset") {
		t.Fatalf("status (exit %d):\n%s%s", r.code, r.stdout, r.stderr)
	}
}
