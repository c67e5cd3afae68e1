package operator_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pidispatch/pidispatch/capabilities"
	"github.com/pidispatch/pidispatch/config"
	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/fleetstate"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/jobs"
	"github.com/pidispatch/pidispatch/lease"
	"github.com/pidispatch/pidispatch/operator"
	"github.com/pidispatch/pidispatch/queue"
	"github.com/pidispatch/pidispatch/registry"
)

const forgeJob = `{"kind":"forge","repo":"acme/app","flow":"fix","task":"fix it"}`

// addData adds a job with the given data to q.
// takesUnsigned explains for a fleet without a key whose queues all take
// unsigned jobs, as the jobs these tests write carry no signature (the
// signature findings have their own tests).
var takesUnsigned = operator.ExplainOptions{UnsignedQueues: []string{fleet.EveryQueue}}

func addData(t *testing.T, q *queue.Queue, id, data string, opts queue.AddOptions) {
	t.Helper()
	opts.JobID = id
	if _, added, err := q.Add(context.Background(), "j", json.RawMessage(data), opts); err != nil || !added {
		t.Fatalf("add %s: %v %v", id, added, err)
	}
}

func explain(t *testing.T, client redis.UniversalClient, id string, opts operator.ExplainOptions) operator.Explanation {
	t.Helper()
	ex, err := operator.Explain(context.Background(), client, id, opts)
	if err != nil {
		t.Fatalf("explain %s: %v", id, err)
	}
	return ex
}

// finding returns the finding with code, failing the test when there is none.
func finding(t *testing.T, ex operator.Explanation, code string) operator.Finding {
	t.Helper()
	for _, f := range ex.Findings {
		if f.Code == code {
			return f
		}
	}
	t.Fatalf("no %s finding in %+v", code, ex.Findings)
	return operator.Finding{}
}

// liveHost publishes a row for name with an image digest (empty: the image
// was absent at boot), as stack's registry does.
func liveHost(t *testing.T, client redis.UniversalClient, name, digest string) *registry.Registry {
	t.Helper()
	return liveHostCaps(t, client, name, digest, "")
}

// caps is the registry value of a host that declares these profiles.
func caps(secrets []string, waits ...string) string {
	return capabilities.Serialize(capabilities.Tokens(secrets, waits))
}

// liveHostCaps is liveHost with a capabilities value.
func liveHostCaps(t *testing.T, client redis.UniversalClient, name, digest, caps string) *registry.Registry {
	t.Helper()
	r, err := registry.New(client, name, registry.Facts{
		Routes: registry.Value(true), Image: registry.Value("pi-job:latest"), ImageDigest: registry.Value(digest), Caps: registry.Value(caps),
	}, registry.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Publish(context.Background()); err != nil {
		t.Fatal(err)
	}
	return r
}

const digestA = "sha256:" + "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

func writeFile(t *testing.T, name, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestExplainUnknownAndInvalidIDs(t *testing.T) {
	db := livetest.Valkey(t)
	ctx := context.Background()
	ex, err := operator.Explain(ctx, db.Client, "nope", takesUnsigned)
	if !errors.Is(err, operator.ErrJobNotFound) || ex.Found || len(ex.Records) != 0 {
		t.Fatalf("unknown: %+v %v", ex, err)
	}
	if _, err := operator.Explain(ctx, db.Client, "bad\nid", takesUnsigned); !errors.Is(err, operator.ErrInvalidJobID) {
		t.Fatalf("invalid id: %v", err)
	}
}

// A job nothing holds is ready; an active one names the worker that took it
// (its processedBy); one whose lock expired is stalled.
func TestExplainReadyRunningStalled(t *testing.T) {
	db := livetest.Valkey(t)
	ctx := context.Background()
	defer liveHost(t, db.Client, "alpha", digestA).Close(ctx)
	shared := mustQueue(t, db.Client, fleet.SharedQueue)
	addData(t, shared, "ready-1", forgeJob, queue.AddOptions{})
	ex := explain(t, db.Client, "ready-1", takesUnsigned)
	if ex.State != "waiting" || ex.Queue != fleet.SharedQueue || ex.Attempt != 1 || len(ex.Findings) != 1 || ex.Primary().Code != operator.FindReady {
		t.Fatalf("ready: %+v", ex)
	}

	worker, err := queue.New(db.Client, fleet.HostQueueName("alpha"), queue.Config{WorkerName: "alpha", LockTTL: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	addData(t, worker, "run-1", forgeJob, queue.AddOptions{})
	if j, err := worker.Fetch(ctx, queue.NewToken()); err != nil || j == nil {
		t.Fatalf("fetch: %v %v", j, err)
	}
	ex = explain(t, db.Client, "run-1", takesUnsigned)
	if f := ex.Primary(); f.Code != operator.FindRunning || ex.Host != "alpha" || f.Data["host"] != "alpha" || !strings.Contains(f.Words, "on host alpha") {
		t.Fatalf("running: %+v", ex)
	}
	deadline := time.Now().Add(5 * time.Second)
	for ex.Primary().Code == operator.FindRunning && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
		ex = explain(t, db.Client, "run-1", takesUnsigned)
	}
	if ex.Primary().Code != operator.FindStalled {
		t.Fatalf("lock expired: %+v", ex)
	}
}

// The kill switch's flag comes first, in the words of the fix.
func TestExplainFleetPaused(t *testing.T) {
	db := livetest.Valkey(t)
	ctx := context.Background()
	defer liveHost(t, db.Client, "alpha", digestA).Close(ctx)
	addData(t, mustQueue(t, db.Client, fleet.SharedQueue), "p-1", forgeJob, queue.AddOptions{})
	set, err := operator.FleetQueues(ctx, db.Client)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := operator.Pause(ctx, db.Client, set); err != nil {
		t.Fatal(err)
	}
	ex := explain(t, db.Client, "p-1", takesUnsigned)
	if f := ex.Primary(); f.Code != operator.FindFleetPaused || f.Words != "not running: the fleet is paused (pi-dispatch resume)" || ex.State != "waiting" {
		t.Fatalf("%+v", ex)
	}
	if _, err := operator.Resume(ctx, db.Client, set); err != nil {
		t.Fatal(err)
	}
	if err := mustQueue(t, db.Client, fleet.SharedQueue).Pause(ctx); err != nil {
		t.Fatal(err)
	}
	if ex := explain(t, db.Client, "p-1", takesUnsigned); ex.Primary().Code != operator.FindQueuePaused {
		t.Fatalf("queue paused alone: %+v", ex)
	}
}

// A pause window of the host's file, evaluated with the gate's matcher.
func TestExplainPauseWindow(t *testing.T) {
	db := livetest.Valkey(t)
	defer liveHost(t, db.Client, "alpha", digestA).Close(context.Background())
	addData(t, mustQueue(t, db.Client, fleet.SharedQueue), "w-1", forgeJob, queue.AddOptions{})
	path := writeFile(t, "pause-windows.json", `{"windows":[{"scope":"acme/app","from":"11:00","to":"13:30"},{"scope":"other/repo","from":"00:00","to":"23:59"}]}`)
	opts, err := operator.ExplainOptionsFromConfig(config.Config{PauseWindowsFile: path})
	if err != nil {
		t.Fatal(err)
	}
	opts.UnsignedQueues = takesUnsigned.UnsignedQueues
	opts.Now = func() time.Time { return time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC) }
	ex := explain(t, db.Client, "w-1", opts)
	f := finding(t, ex, operator.FindPauseWindow)
	if until := f.Data["until"].(time.Time); !until.Equal(time.Date(2026, 6, 1, 13, 30, 0, 0, time.UTC)) || ex.Primary().Code != operator.FindPauseWindow {
		t.Fatalf("%+v", ex)
	}
	opts.Now = func() time.Time { return time.Date(2026, 6, 1, 14, 0, 0, 0, time.UTC) }
	if ex := explain(t, db.Client, "w-1", opts); ex.Primary().Code != operator.FindReady {
		t.Fatalf("window closed: %+v", ex)
	}
	if _, err := operator.ExplainOptionsFromConfig(config.Config{PauseWindowsFile: writeFile(t, "bad.json", `{"windows":[{"scope":"*"}]}`)}); err == nil || !strings.Contains(err.Error(), "windows[0].from") {
		t.Fatalf("bad file: %v", err)
	}
}

// A hold written through the hold store: conditions, checks, next check.
func TestExplainWaitHold(t *testing.T) {
	db := livetest.Valkey(t)
	ctx := context.Background()
	defer liveHostCaps(t, db.Client, "alpha", digestA, caps(nil, "ci")).Close(ctx)
	q := mustQueue(t, db.Client, fleet.SharedQueue)
	addData(t, q, "h-1", `{"kind":"forge","repo":"acme/app","flow":"fix","task":"t","waitFor":[{"profile":"ci","args":["x"]},{"after":"1h"}]}`, queue.AddOptions{})
	ex := explain(t, db.Client, "h-1", takesUnsigned)
	if f := ex.Primary(); f.Code != operator.FindWaitHold || f.Data["begun"] != false {
		t.Fatalf("before the hold: %+v", ex)
	}
	holds := fleetstate.NewHolds(db.Client, fleetstate.HoldsConfig{})
	if _, err := holds.Begin(ctx, "h-1", "", dispatch.HoldBounds{AfterDelay: time.Hour, AfterMax: 24 * time.Hour, WaitMax: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if _, err := holds.Checked(ctx, "h-1", "", dispatch.CheckOutcome{Met: 0b01}); err != nil {
		t.Fatal(err)
	}
	// The worker defers a held job until its next check.
	tok := queue.NewToken()
	if j, err := q.Fetch(ctx, tok); err != nil || j == nil {
		t.Fatalf("fetch: %v %v", j, err)
	}
	if err := q.Defer(ctx, "h-1", tok, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	ex = explain(t, db.Client, "h-1", takesUnsigned)
	f := ex.Primary()
	conds, _ := f.Data["conditions"].([]map[string]any)
	if f.Code != operator.FindWaitHold || f.Data["checks"] != 1 || len(conds) != 2 || conds[0]["met"] != true || conds[1]["met"] != false ||
		!strings.Contains(f.Words, "1 of 2 met, 1 check(s) made, next check about") || ex.State != "delayed" {
		t.Fatalf("held: %+v", ex)
	}
	if at, _ := conds[1]["at"].(time.Time); time.Until(at) < 50*time.Minute {
		t.Fatalf("after 1h is due at %v", conds[1]["at"])
	}
	// An hour later by the clock Explain is given, the `after` is met.
	later := explain(t, db.Client, "h-1", operator.ExplainOptions{UnsignedQueues: takesUnsigned.UnsignedQueues, Now: func() time.Time { return time.Now().Add(61 * time.Minute) }})
	if !strings.Contains(later.Primary().Words, "2 of 2 met") {
		t.Fatalf("later: %+v", later.Primary())
	}
	next := f.Data["nextCheckAt"].(time.Time)
	if d := time.Until(next); d < 20*time.Second || d > 40*time.Second {
		t.Fatalf("next check in %s", d)
	}
	finding(t, ex, operator.FindDelayed)
}

// Fleet-wide scope slots taken through lease name their holders; a folder
// scope is said to be local to its host.
func TestExplainScopeBusy(t *testing.T) {
	db := livetest.Valkey(t)
	ctx := context.Background()
	defer liveHost(t, db.Client, "alpha", digestA).Close(ctx)
	q := mustQueue(t, db.Client, fleet.SharedQueue)
	addData(t, q, "s-1", forgeJob, queue.AddOptions{})
	limits := writeFile(t, "scoped-limits.json", `{"version":1,"limits":[{"scope":"acme/app","concurrent":2}]}`)
	opts, err := operator.ExplainOptionsFromConfig(config.Config{ScopedLimitsFile: limits})
	if err != nil {
		t.Fatal(err)
	}
	opts.UnsignedQueues = takesUnsigned.UnsignedQueues
	hash := fleet.ScopeHash("acme/app")
	keyFor := func(i int) string { return fleet.ScopeSlotKey(hash, i) }
	h1, err := lease.New(db.Client, "beta", lease.Config{}).Acquire(ctx, "other-1", 2, time.Minute, keyFor)
	if err != nil || h1 == nil {
		t.Fatalf("acquire: %v %v", h1, err)
	}
	if ex := explain(t, db.Client, "s-1", opts); ex.Primary().Code != operator.FindReady {
		t.Fatalf("one of two slots free: %+v", ex)
	}
	if h, err := lease.New(db.Client, "gamma", lease.Config{}).Acquire(ctx, "other-2", 2, time.Minute, keyFor); err != nil || h == nil {
		t.Fatalf("acquire: %v %v", h, err)
	}
	ex := explain(t, db.Client, "s-1", opts)
	f := ex.Primary()
	holders, _ := f.Data["holders"].([]map[string]any)
	if f.Code != operator.FindScopeBusy || len(holders) != 2 || !strings.Contains(f.Words, "other-1 on beta") || !strings.Contains(f.Words, "other-2 on gamma") {
		t.Fatalf("busy: %+v", ex)
	}

	addData(t, q, "f-1", `{"kind":"local","folder":"/srv/app","flow":"fix","task":"t"}`, queue.AddOptions{})
	ex = explain(t, db.Client, "f-1", opts)
	if finding(t, ex, operator.FindScopeLocal); ex.Primary().Code != operator.FindReady || len(ex.Findings) != 2 {
		t.Fatalf("folder: %+v", ex)
	}
}

// Budget windows filled through the budget's own reservations, global and
// per scope, with the instant each resets.
func TestExplainBudgetFull(t *testing.T) {
	db := livetest.Valkey(t)
	ctx := context.Background()
	defer liveHost(t, db.Client, "alpha", digestA).Close(ctx)
	addData(t, mustQueue(t, db.Client, fleet.SharedQueue), "b-1", forgeJob, queue.AddOptions{})
	limits := writeFile(t, "scoped-limits.json", `{"version":1,"limits":[{"scope":"acme/app","day":1}]}`)
	opts, err := operator.ExplainOptionsFromConfig(config.Config{ScopedLimitsFile: limits, DailyCap: 3})
	if err != nil {
		t.Fatal(err)
	}
	opts.UnsignedQueues = takesUnsigned.UnsignedQueues
	budget := fleetstate.NewBudget(db.Client, fleetstate.BudgetConfig{DailyCap: 3})
	limit, _ := opts.ScopedLimits.Lookup("acme/app")
	if r, err := budget.Reserve(ctx, "acme/app", &limit); err != nil || !r.Granted {
		t.Fatalf("reserve: %+v %v", r, err)
	}
	ex := explain(t, db.Client, "b-1", opts)
	f := finding(t, ex, operator.FindBudgetFull)
	if f.Data["window"] != dispatch.WindowScopeDay || f.Data["reason"] != jobs.ReasonScopeCap || len(ex.Findings) != 1 {
		t.Fatalf("scope day: %+v", ex)
	}
	for range 2 {
		if r, err := budget.Reserve(ctx, "", nil); err != nil || !r.Granted {
			t.Fatalf("reserve: %+v %v", r, err)
		}
	}
	ex = explain(t, db.Client, "b-1", opts)
	now, _ := db.Client.Time(ctx).Result()
	y, m, d := now.UTC().Date()
	midnight := time.Date(y, m, d+1, 0, 0, 0, 0, time.UTC)
	f = ex.Primary()
	if f.Code != operator.FindBudgetFull || f.Data["window"] != dispatch.WindowDay || f.Data["count"] != 3 || f.Data["cap"] != 3 ||
		!f.Data["resetsAt"].(time.Time).Equal(midnight) || len(ex.Findings) != 2 {
		t.Fatalf("day: %+v", ex)
	}
}

// A host queue whose host's row expired, and a shared queue nobody drains.
func TestExplainHostGoneAndNoHosts(t *testing.T) {
	db := livetest.Valkey(t)
	ctx := context.Background()
	r, err := registry.New(db.Client, "gamma", registry.Facts{Routes: registry.Value(true), ImageDigest: registry.Value(digestA)}, registry.Config{TTL: 300 * time.Millisecond, Interval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Publish(ctx); err != nil {
		t.Fatal(err)
	}
	host := mustQueue(t, db.Client, fleet.HostQueueName("gamma"))
	addData(t, host, "g-1", forgeJob, queue.AddOptions{})
	addData(t, mustQueue(t, db.Client, fleet.SharedQueue), "n-1", forgeJob, queue.AddOptions{})
	if ex := explain(t, db.Client, "g-1", takesUnsigned); ex.Primary().Code != operator.FindReady {
		t.Fatalf("live host: %+v", ex)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		live, err := registry.ReadLive(ctx, db.Client, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if len(live) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("row did not expire")
		}
		time.Sleep(50 * time.Millisecond)
	}
	ex := explain(t, db.Client, "g-1", takesUnsigned)
	if f := ex.Primary(); f.Code != operator.FindHostGone || f.Data["host"] != "gamma" {
		t.Fatalf("gone: %+v", ex)
	}
	if ex := explain(t, db.Client, "n-1", takesUnsigned); ex.Primary().Code != operator.FindNoHosts {
		t.Fatalf("no hosts: %+v", ex)
	}
}

// The registry's rows say which capable hosts lack the job's image.
func TestExplainImageMissing(t *testing.T) {
	db := livetest.Valkey(t)
	ctx := context.Background()
	defer liveHost(t, db.Client, "alpha", digestA).Close(ctx)
	defer liveHost(t, db.Client, "beta", "").Close(ctx)
	q := mustQueue(t, db.Client, fleet.SharedQueue)
	addData(t, q, "i-1", forgeJob, queue.AddOptions{})
	ex := explain(t, db.Client, "i-1", takesUnsigned)
	f := ex.Primary()
	if missing, _ := f.Data["missingOn"].([]string); f.Code != operator.FindImageMissing || len(missing) != 1 || missing[0] != "beta" || f.Data["capableHosts"] != 2 {
		t.Fatalf("%+v", ex)
	}
	// An image override the registry does not describe is not called missing.
	addData(t, q, "i-2", `{"kind":"forge","repo":"acme/app","flow":"fix","task":"t","image":"other:1"}`, queue.AddOptions{})
	if ex := explain(t, db.Client, "i-2", takesUnsigned); ex.Primary().Code != operator.FindReady {
		t.Fatalf("override: %+v", ex)
	}
}

// A finished job shows its outcome and its mirrored record, or its record
// file when the mirror has none.
func TestExplainFinished(t *testing.T) {
	db := livetest.Valkey(t)
	ctx := context.Background()
	q := mustQueue(t, db.Client, fleet.SharedQueue)
	addData(t, q, "d-1", forgeJob, queue.AddOptions{})
	addData(t, q, "d-2", forgeJob, queue.AddOptions{})
	for _, id := range []string{"d-1", "d-2"} {
		tok := queue.NewToken()
		if j, err := q.Fetch(ctx, tok); err != nil || j == nil || j.ID != id {
			t.Fatalf("fetch: %v %v", j, err)
		}
		if err := q.Complete(ctx, id, tok, json.RawMessage(`{"outcome":"policy","reason":"over-budget"}`)); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Now().UTC().Truncate(time.Millisecond)
	rec := jobs.Record{JobID: "d-1", Kind: jobs.KindForge, Target: "acme/app", Flow: "fix", StartedAt: now, EndedAt: now,
		Outcome: jobs.OutcomePolicy, Reason: jobs.ReasonOverBudget, Attempt: 1, Host: "alpha"}
	if err := fleetstate.NewMirror(db.Client, fleetstate.MirrorConfig{}).Mirror(ctx, rec); err != nil {
		t.Fatal(err)
	}
	ex := explain(t, db.Client, "d-1", takesUnsigned)
	f := ex.Primary()
	if f.Code != operator.FindFinished || f.Data["finished"] != operator.FinishedRefused || ex.RecordsFrom != operator.RunsFromMirror ||
		len(ex.Records) != 1 || ex.Records[0].Host != "alpha" || !strings.Contains(f.Words, "policy/over-budget on host alpha") {
		t.Fatalf("mirrored: %+v", ex)
	}
	dir := t.TempDir()
	rec.JobID, rec.Host = "d-2", "beta"
	if _, err := jobs.WriteRecord(dir, rec); err != nil {
		t.Fatal(err)
	}
	ex = explain(t, db.Client, "d-2", operator.ExplainOptions{UnsignedQueues: takesUnsigned.UnsignedQueues, LogsDir: dir})
	if ex.RecordsFrom != operator.RunsFromLogsDir || len(ex.Records) != 1 || ex.Records[0].Host != "beta" {
		t.Fatalf("local: %+v", ex)
	}
	// A job retention removed still shows its records.
	if err := q.Remove(ctx, "d-1"); err != nil {
		t.Fatal(err)
	}
	ex, err := operator.Explain(ctx, db.Client, "d-1", takesUnsigned)
	if !errors.Is(err, operator.ErrJobNotFound) || len(ex.Records) != 1 {
		t.Fatalf("removed: %+v %v", ex, err)
	}
}

type dollarSource struct{ err error }

func (dollarSource) Name() string { return "the dollar windows" }
func (s dollarSource) Findings(_ context.Context, j operator.ExplainJob) ([]operator.Finding, error) {
	if s.err != nil {
		return nil, s.err
	}
	return []operator.Finding{{Code: "dollar-window", Words: "the day's dollars are spent (" + j.Spec.Repo + ")"}}, nil
}

// A host that drains the job's queue without a profile the job names would
// refuse it; the capable hosts' images are checked.
func TestExplainNotCapable(t *testing.T) {
	db := livetest.Valkey(t)
	ctx := context.Background()
	defer liveHostCaps(t, db.Client, "alpha", "", caps([]string{"gh"}, "ci")).Close(ctx)
	defer liveHostCaps(t, db.Client, "beta", digestA, caps(nil, "ci")).Close(ctx)
	addData(t, mustQueue(t, db.Client, fleet.SharedQueue), "c-1", `{"kind":"forge","repo":"acme/app","flow":"fix","task":"t","secretsProfile":"gh","waitFor":[{"profile":"ci"}]}`, queue.AddOptions{})
	ex := explain(t, db.Client, "c-1", takesUnsigned)
	f := ex.Primary()
	if lacking, _ := f.Data["lacking"].([]string); f.Code != operator.FindNotCapable || len(lacking) != 1 || lacking[0] != "beta" ||
		!strings.Contains(f.Words, "(s:gh, w:ci): beta; one that takes it refuses it secret-profile-unknown or wait-profile-unknown") {
		t.Fatalf("%+v", ex)
	}
	if missing, _ := finding(t, ex, operator.FindImageMissing).Data["missingOn"].([]string); len(missing) != 1 || missing[0] != "alpha" {
		t.Fatalf("image: %+v", ex)
	}
}

// An extension source's findings join the others; its failure is an unread
// finding, never a failed Explain.
func TestExplainFindingSources(t *testing.T) {
	db := livetest.Valkey(t)
	defer liveHost(t, db.Client, "alpha", digestA).Close(context.Background())
	addData(t, mustQueue(t, db.Client, fleet.SharedQueue), "x-1", forgeJob, queue.AddOptions{})
	ex := explain(t, db.Client, "x-1", operator.ExplainOptions{UnsignedQueues: takesUnsigned.UnsignedQueues, Sources: []operator.FindingSource{dollarSource{}}})
	if f := finding(t, ex, "dollar-window"); f.Words != "the day's dollars are spent (acme/app)" || len(ex.Findings) != 1 {
		t.Fatalf("%+v", ex)
	}
	ex = explain(t, db.Client, "x-1", operator.ExplainOptions{UnsignedQueues: takesUnsigned.UnsignedQueues, Sources: []operator.FindingSource{dollarSource{err: errors.New("boom")}}})
	if f := finding(t, ex, operator.FindUnread); !strings.Contains(f.Words, "the dollar windows: boom") {
		t.Fatalf("%+v", ex)
	}
}

// A job whose provider is rate-limited: explain gives the reset, read from
// the same store the rate-limit gate reads.
func TestExplainRateLimited(t *testing.T) {
	db := livetest.Valkey(t)
	defer liveHost(t, db.Client, "alpha", digestA).Close(context.Background())
	addData(t, mustQueue(t, db.Client, fleet.SharedQueue), "rl-1", forgeJob, queue.AddOptions{})
	cfg := config.Default()
	until := time.Now().Add(30 * time.Second).UTC().Truncate(time.Millisecond)
	if err := fleetstate.NewRateLimits(db.Client, fleetstate.RateLimitsConfig{}).Suspend(context.Background(), cfg.Gateway.DefaultProvider, until, "429"); err != nil {
		t.Fatal(err)
	}
	ex := explain(t, db.Client, "rl-1", operator.ExplainOptions{UnsignedQueues: takesUnsigned.UnsignedQueues, Sources: operator.SpendSources(db.Client, cfg)})
	f := finding(t, ex, operator.FindRateLimited)
	if f.Data["provider"] != "anthropic" || !f.Data["until"].(time.Time).Equal(until) || ex.Primary().Code != operator.FindRateLimited {
		t.Fatalf("%+v", ex)
	}
}

// A dollar window that cannot hold the job's cap: explain names it with
// what it holds, read from the same store the dollar gate reserves in.
func TestExplainDollarsFull(t *testing.T) {
	db := livetest.Valkey(t)
	defer liveHost(t, db.Client, "alpha", digestA).Close(context.Background())
	addData(t, mustQueue(t, db.Client, fleet.SharedQueue), "usd-1", forgeJob, queue.AddOptions{})
	cfg := config.Default()
	cfg.Spend.MaxCostMicros, cfg.Spend.DailyCostMicros = 2_000_000, 3_000_000
	d := fleetstate.NewDollars(db.Client, fleetstate.DollarsConfig{DailyMicros: cfg.Spend.DailyCostMicros})
	if res, err := d.ReserveDollars(context.Background(), "other", "", nil, 2_000_000, time.Minute); err != nil || !res.Granted {
		t.Fatalf("%+v %v", res, err)
	}
	ex := explain(t, db.Client, "usd-1", operator.ExplainOptions{UnsignedQueues: takesUnsigned.UnsignedQueues, Sources: operator.SpendSources(db.Client, cfg)})
	f := finding(t, ex, operator.FindDollarsFull)
	if f.Data["window"] != "day" || f.Data["usedUsd"] != 2.0 || f.Data["capUsd"] != 3.0 || !strings.Contains(f.Words, "dollar-cap") {
		t.Fatalf("%+v", f)
	}
	// With room for the cap, nothing holds it.
	cfg.Spend.MaxCostMicros = 1_000_000
	ex = explain(t, db.Client, "usd-1", operator.ExplainOptions{UnsignedQueues: takesUnsigned.UnsignedQueues, Sources: operator.SpendSources(db.Client, cfg)})
	for _, f := range ex.Findings {
		if f.Code == operator.FindDollarsFull {
			t.Fatalf("a window with room was called full: %+v", f)
		}
	}
}

// A forge job whose issue another job holds, or an older job of which waits
// first, is said to wait behind them.
func TestExplainThreadBusy(t *testing.T) {
	db := livetest.Valkey(t)
	ctx := context.Background()
	defer liveHost(t, db.Client, "alpha", digestA).Close(ctx)
	q := mustQueue(t, db.Client, fleet.SharedQueue)
	const job = `{"kind":"forge","repo":"acme/app","forge":"github","number":7,"flow":"fix","task":"t"}`
	addData(t, q, "gh-2", job, queue.AddOptions{})
	opts, err := operator.ExplainOptionsFromConfig(config.Config{})
	if err != nil {
		t.Fatal(err)
	}
	opts.UnsignedQueues = takesUnsigned.UnsignedQueues
	if ex := explain(t, db.Client, "gh-2", opts); ex.Primary().Code != operator.FindReady {
		t.Fatalf("a free thread: %+v", ex)
	}
	th := fleetstate.NewThreads(db.Client, fleetstate.ThreadsConfig{})
	if r, err := th.Turn(ctx, "github:acme/app#7", "gh-1", time.Now().Add(-time.Minute), time.Hour); err != nil || !r.Granted {
		t.Fatalf("turn: %+v %v", r, err)
	}
	ex := explain(t, db.Client, "gh-2", opts)
	if f := ex.Primary(); f.Code != operator.FindThreadBusy || f.Data["holder"] != "gh-1" || !strings.Contains(f.Words, "gh-1") {
		t.Fatalf("held: %+v", ex)
	}
}
