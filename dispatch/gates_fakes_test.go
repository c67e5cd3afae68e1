package dispatch_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/dispatch/container"
	"github.com/pidispatch/pidispatch/dispatch/dispatchtest"
	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/jobs"
)

// The gate ladder, one gate at a time, on the fakes: each test feeds one job
// and checks the record the worker wrote and what the queue was told.

// refusedBefore asserts a pre-spend refusal: one policy record with reason,
// the job completed with the refusal as its result, no container, nothing
// counted against the budget.
func refusedBefore(t *testing.T, h *fakeHost, id string, reason jobs.Reason) {
	t.Helper()
	s := h.wait(t, id, finished)
	if s.State != dispatch.StateCompleted || resultReason(t, s) != reason {
		t.Fatalf("queue: %+v (result %s), want completed with reason %s", s, s.Result, reason)
	}
	h.oneRecord(t, id, jobs.OutcomePolicy, reason)
	if n := len(h.rt.Specs()); n != 0 {
		t.Fatalf("%d containers ran, want none", n)
	}
	if day, _ := h.budget.Counts(); day != 0 {
		t.Fatalf("budget counted %d starts, want 0", day)
	}
}

// deferredBefore asserts a deferral: no record, no container, not an attempt.
func deferredBefore(t *testing.T, h *fakeHost, id string) dispatchtest.Snapshot {
	t.Helper()
	s := h.wait(t, id, deferred)
	if s.AttemptsMade != 0 || s.Finished() {
		t.Fatalf("deferred job: %+v, want not finished, 0 attempts", s)
	}
	if recs := h.records(t, id); len(recs) != 0 {
		t.Fatalf("a deferred job was recorded: %+v", recs)
	}
	if n := len(h.rt.Specs()); n != 0 {
		t.Fatalf("%d containers ran, want none", n)
	}
	return s
}

func TestGateCronRefusedWithoutAgreement(t *testing.T) {
	h := newFakeHost(t)
	h.deps.Cron = dispatchtest.CronGate{Verdict: dispatch.CronVerdict{Reason: "not in the triggers file"}}
	h.start(t)
	h.queue.Add(dispatchtest.Job{ID: "cron-1", Data: []byte(forgeJob), SchedulerID: "nightly"})
	refusedBefore(t, h, "cron-1", jobs.ReasonCronNotAgreed)
}

func TestGateCronLeftForAnotherHost(t *testing.T) {
	h := newFakeHost(t)
	h.deps.Cron = dispatchtest.CronGate{Verdict: dispatch.CronVerdict{Leave: true, Reason: "a peer's"}}
	h.start(t)
	h.queue.Add(dispatchtest.Job{ID: "cron-2", Data: []byte(forgeJob), SchedulerID: "nightly"})
	deferredBefore(t, h, "cron-2")
}

func TestGateCronAgreedRuns(t *testing.T) {
	h := newFakeHost(t)
	h.deps.Cron = dispatchtest.CronGate{Verdict: dispatch.CronVerdict{Run: true}}
	h.start(t)
	h.queue.Add(dispatchtest.Job{ID: "cron-3", Data: []byte(forgeJob), SchedulerID: "nightly"})
	h.wait(t, "cron-3", finished)
	h.oneRecord(t, "cron-3", jobs.OutcomeCompleted, jobs.ReasonCompleted)
}

func TestGateCronWithoutGateRefused(t *testing.T) {
	h := newFakeHost(t)
	h.start(t)
	h.queue.Add(dispatchtest.Job{ID: "cron-4", Data: []byte(forgeJob), SchedulerID: "nightly"})
	refusedBefore(t, h, "cron-4", jobs.ReasonCronNotAgreed)
	// A job whose data says cron is a scheduler's run too.
	h.add(t, "cron-5", fmt.Sprintf(`{"kind":"cron","folder":%q,"flow":"fix","task":"t"}`, t.TempDir()), 1)
	refusedBefore(t, h, "cron-5", jobs.ReasonCronNotAgreed)
}

func TestGateJobIDRule(t *testing.T) {
	h := newFakeHost(t)
	h.start(t)
	id := "bad\x01id"
	if fleet.CheckJobID(id) == nil {
		t.Fatal("test id keeps the rule")
	}
	h.add(t, id, forgeJob, 3)
	s := h.wait(t, id, finished)
	if s.State != dispatch.StateFailed || s.FailedReason != string(jobs.ReasonInvalidJob) || s.AttemptsMade != 1 {
		t.Fatalf("queue: %+v, want failed for good as invalid-job", s)
	}
	recID, _ := jobs.RefusedJobID(id)
	h.oneRecord(t, recID, jobs.OutcomeFailed, jobs.ReasonInvalidJob)
	if len(h.rt.Specs()) != 0 {
		t.Fatal("a job breaking the id rule ran")
	}
}

func TestGateInvalidJob(t *testing.T) {
	for name, job := range map[string]dispatchtest.Job{
		"unknown kind":     {ID: "inv-kind", Data: []byte(`{"kind":"nope","task":"t"}`)},
		"unknown field":    {ID: "inv-field", Data: []byte(`{"kind":"forge","repo":"acme/widgets","flow":"fix","task":"t","costCap":1}`)},
		"corrupt":          {ID: "inv-corrupt", Corrupt: "data is not JSON"},
		"deferred failure": {ID: "inv-defa", Data: []byte(forgeJob), DeferredFailure: "job stalled more than allowable limit"},
	} {
		t.Run(name, func(t *testing.T) {
			h := newFakeHost(t)
			h.start(t)
			job.Attempts = 3
			h.queue.Add(job)
			refusedBefore(t, h, job.ID, jobs.ReasonInvalidJob)
		})
	}
}

func TestGatePauseWindow(t *testing.T) {
	h := newFakeHost(t)
	h.cfg.PauseWindows = mustPauseWindows(t, `{"windows":[{"scope":"acme/widgets","from":"00:00","to":"23:59","tz":"UTC"}]}`)
	noon := todayAt(12)
	h.tune.Now = func() time.Time { return noon }
	h.start(t)
	h.add(t, "paused-1", forgeJob, 1)
	s := deferredBefore(t, h, "paused-1")
	if s.LastDelay < 11*time.Hour || s.LastDelay > 12*time.Hour {
		t.Fatalf("deferred for %s, want until the window's end (about 11h59m)", s.LastDelay)
	}
	h.add(t, "other-1", `{"kind":"forge","repo":"acme/other","flow":"fix","task":"t"}`, 1)
	h.wait(t, "other-1", finished)
	h.oneRecord(t, "other-1", jobs.OutcomeCompleted, jobs.ReasonCompleted)
}

func TestGateSecretProfileUnknown(t *testing.T) {
	h := newFakeHost(t)
	h.start(t)
	h.add(t, "sec-1", `{"kind":"forge","repo":"acme/widgets","flow":"fix","task":"t","secretsProfile":"ci"}`, 3)
	refusedBefore(t, h, "sec-1", jobs.ReasonSecretProfileUnknown)
}

func TestGateWaitProfileUnknown(t *testing.T) {
	h := newFakeHost(t)
	h.start(t)
	h.add(t, "wp-1", `{"kind":"forge","repo":"acme/widgets","flow":"fix","task":"t","waitFor":[{"profile":"ticket"}]}`, 3)
	refusedBefore(t, h, "wp-1", jobs.ReasonWaitProfileUnknown)
}

func waitAfter(at time.Time) string {
	return fmt.Sprintf(`{"kind":"forge","repo":"acme/widgets","flow":"fix","task":"t","waitFor":[{"after":%q}]}`, at.UTC().Format(time.RFC3339))
}

func TestGateHoldWithoutStoreDefers(t *testing.T) {
	h := newFakeHost(t)
	h.deps.Holds = nil
	h.start(t)
	h.add(t, "hold-0", waitAfter(time.Now().Add(-time.Minute)), 1)
	s := deferredBefore(t, h, "hold-0")
	if s.LastDelay != 30*time.Second {
		t.Fatalf("deferred %s, want the unreachable deferral (30s)", s.LastDelay)
	}
}

func TestGateHoldWaitsForAfter(t *testing.T) {
	h := newFakeHost(t)
	h.start(t)
	h.add(t, "hold-1", waitAfter(time.Now().Add(time.Hour)), 1)
	deferredBefore(t, h, "hold-1")
	if !h.holds.Held("hold-1") {
		t.Fatal("no hold state for a held job")
	}
}

func TestGateHoldMetRunsAndEnds(t *testing.T) {
	h := newFakeHost(t)
	h.start(t)
	h.add(t, "hold-2", waitAfter(time.Now().Add(-time.Minute)), 1)
	h.wait(t, "hold-2", finished)
	h.oneRecord(t, "hold-2", jobs.OutcomeCompleted, jobs.ReasonCompleted)
	if h.holds.Held("hold-2") {
		t.Fatal("the hold outlived its job")
	}
}

func TestGateHoldStoreDownDefers(t *testing.T) {
	h := newFakeHost(t)
	h.holds.Err = errors.New("valkey down")
	h.start(t)
	h.add(t, "hold-3", waitAfter(time.Now().Add(-time.Minute)), 1)
	deferredBefore(t, h, "hold-3")
}

// A job holding the only host slot keeps the next one waiting, untaken.
func TestGateHostSlot(t *testing.T) {
	h := newFakeHost(t)
	h.cfg.Concurrency = 1
	release := make(chan struct{})
	h.rt.RunFunc = func(ctx context.Context, spec container.Spec) (container.Result, error) {
		if spec.JobID == "slot-1" {
			<-release
		}
		return container.Result{Container: "c-" + spec.JobID, StartedAt: time.Now(), EndedAt: time.Now()}, nil
	}
	h.start(t)
	h.add(t, "slot-1", forgeJob, 1)
	h.wait(t, "slot-1", func(s dispatchtest.Snapshot) bool { return s.State == dispatch.StateActive })
	h.add(t, "slot-2", `{"kind":"forge","repo":"acme/other","flow":"fix","task":"t"}`, 1)
	time.Sleep(200 * time.Millisecond)
	if s, _ := h.queue.Snapshot("slot-2"); s.Takes != 0 {
		t.Fatalf("slot-2 was taken while the only slot was held: %+v", s)
	}
	close(release)
	h.wait(t, "slot-2", finished)
	h.oneRecord(t, "slot-2", jobs.OutcomeCompleted, jobs.ReasonCompleted)
}

// A scope at its fleet-wide limit (another host holds the one slot) defers.
func TestGateScopeSlotLeaser(t *testing.T) {
	h := newFakeHost(t)
	h.cfg.WorkerNameDeclared = true
	h.cfg.ScopedLimits = mustScopedLimits(t, `{"version":1,"limits":[{"scope":"acme/widgets","concurrent":1}]}`)
	other := h.leases.Leaser("host-b")
	hash := fleet.ScopeHash("acme/widgets")
	slot, err := other.Acquire(t.Context(), "theirs", 1, time.Hour, func(i int) string { return fleet.ScopeSlotKey(hash, i) })
	if err != nil || slot == nil {
		t.Fatalf("host-b's slot: %v, %v", slot, err)
	}
	h.tune.BusyDeferral = 300 * time.Millisecond
	h.start(t)
	h.add(t, "scope-1", forgeJob, 1)
	s := deferredBefore(t, h, "scope-1")
	if s.LastDelay != h.tune.BusyDeferral {
		t.Fatalf("deferred %s, want the busy deferral", s.LastDelay)
	}
	if err := slot.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	h.wait(t, "scope-1", finished) // due again soon: taken again, now runs
	h.oneRecord(t, "scope-1", jobs.OutcomeCompleted, jobs.ReasonCompleted)
	k := fleet.ScopeSlotKey(hash, 0)
	eventually(t, "the scope slot is released after the run", func() bool { return h.leases.Held(k) == "" })
}

// A local folder is its own mutex on the host: a second job of the folder
// defers while the first runs.
func TestGateScopeSlotFolder(t *testing.T) {
	h := newFakeHost(t)
	folder := t.TempDir()
	release := make(chan struct{})
	h.rt.RunFunc = func(ctx context.Context, spec container.Spec) (container.Result, error) {
		if spec.JobID == "fold-1" {
			<-release
		}
		return container.Result{Container: "c-" + spec.JobID, StartedAt: time.Now(), EndedAt: time.Now()}, nil
	}
	h.start(t)
	job := fmt.Sprintf(`{"kind":"local","folder":%q,"flow":"fix","task":"t"}`, folder)
	h.add(t, "fold-1", job, 1)
	h.wait(t, "fold-1", func(s dispatchtest.Snapshot) bool { return s.State == dispatch.StateActive })
	for len(h.rt.Specs()) == 0 {
		time.Sleep(5 * time.Millisecond)
	}
	h.add(t, "fold-2", job, 1)
	s := h.wait(t, "fold-2", deferred)
	close(release)
	if s.AttemptsMade != 0 || len(h.records(t, "fold-2")) != 0 {
		t.Fatalf("busy folder: %+v", s)
	}
}

func TestGateBudgetRefused(t *testing.T) {
	h := newFakeHost(t)
	h.budget.DailyCap = 1
	if _, err := h.budget.Reserve(t.Context(), "acme/elsewhere", nil); err != nil {
		t.Fatal(err)
	}
	h.start(t)
	h.add(t, "budget-1", forgeJob, 3)
	s := h.wait(t, "budget-1", finished)
	if s.State != dispatch.StateCompleted || resultReason(t, s) != jobs.ReasonOverBudget {
		t.Fatalf("queue: %+v", s)
	}
	h.oneRecord(t, "budget-1", jobs.OutcomePolicy, jobs.ReasonOverBudget)
	if len(h.rt.Specs()) != 0 {
		t.Fatal("a refused job ran")
	}
}

func TestGateBudgetScopeCap(t *testing.T) {
	h := newFakeHost(t)
	h.cfg.ScopedLimits = mustScopedLimits(t, `{"version":1,"limits":[{"scope":"acme/widgets","day":1}]}`)
	h.start(t)
	h.add(t, "cap-1", forgeJob, 1)
	h.wait(t, "cap-1", finished)
	h.add(t, "cap-2", forgeJob, 1)
	s := h.wait(t, "cap-2", finished)
	if resultReason(t, s) != jobs.ReasonScopeCap {
		t.Fatalf("queue: %+v (%s)", s, s.Result)
	}
	h.oneRecord(t, "cap-2", jobs.OutcomePolicy, jobs.ReasonScopeCap)
}

func TestGateBudgetUnavailable(t *testing.T) {
	h := newFakeHost(t)
	h.budget.SetErr(errors.New("valkey down"))
	h.start(t)
	h.add(t, "bu-1", forgeJob, 1)
	s := deferredBefore(t, h, "bu-1")
	if s.LastDelay != 30*time.Second {
		t.Fatalf("deferred %s, want 30s", s.LastDelay)
	}
}

func TestGateImageMissing(t *testing.T) {
	h := newFakeHost(t)
	h.rt.Missing["pi-agent:test"] = true
	h.start(t)
	h.add(t, "img-1", forgeJob, 3)
	s := h.wait(t, "img-1", finished)
	if resultReason(t, s) != jobs.ReasonJobImageMissing {
		t.Fatalf("queue: %+v", s)
	}
	h.oneRecord(t, "img-1", jobs.OutcomePolicy, jobs.ReasonJobImageMissing)
	eventually(t, "the reservation is released", func() bool { day, _ := h.budget.Counts(); return day == 0 })
}

func TestGateImageCheckFailedDefers(t *testing.T) {
	h := newFakeHost(t)
	h.rt.ImageErr = errors.New("docker unreachable")
	h.start(t)
	h.add(t, "img-2", forgeJob, 1)
	deferredBefore(t, h, "img-2")
	eventually(t, "the reservation is released", func() bool { day, _ := h.budget.Counts(); return day == 0 })
}

func TestGateImageMissingAtRun(t *testing.T) {
	h := newFakeHost(t)
	h.rt.Script("img-3", container.Result{NeverStarted: true}, container.ErrImageMissing)
	h.start(t)
	h.add(t, "img-3", forgeJob, 3)
	s := h.wait(t, "img-3", finished)
	if resultReason(t, s) != jobs.ReasonJobImageMissing {
		t.Fatalf("queue: %+v", s)
	}
	h.oneRecord(t, "img-3", jobs.OutcomePolicy, jobs.ReasonJobImageMissing)
}

func TestGateSecretsResolveFailed(t *testing.T) {
	h := newFakeHost(t)
	h.cfg.SecretProfiles = map[string]string{"ci": writeFile(t, "resolver", "#!/bin/sh\necho nope >&2\nexit 3\n", 0o755)}
	h.start(t)
	h.add(t, "sr-1", `{"kind":"forge","repo":"acme/widgets","flow":"fix","task":"t","secretsProfile":"ci"}`, 3)
	s := h.wait(t, "sr-1", finished)
	if resultReason(t, s) != jobs.ReasonSecretResolveFailed {
		t.Fatalf("queue: %+v", s)
	}
	h.oneRecord(t, "sr-1", jobs.OutcomePolicy, jobs.ReasonSecretResolveFailed)
	if len(h.rt.Specs()) != 0 {
		t.Fatal("ran without its secrets")
	}
}

// Every gate passed: one container, given the job's env (secrets included),
// image, network none, and this host's name; the record names it all.
func TestGateRun(t *testing.T) {
	h := newFakeHost(t)
	h.cfg.SecretProfiles = map[string]string{"ci": writeFile(t, "resolver", "#!/bin/sh\necho TOKEN=s3cret\n", 0o755)}
	h.cfg.JobImages = []string{"pi-agent:other"}
	h.start(t)
	h.add(t, "run-1", `{"kind":"forge","repo":"acme/widgets","flow":"fix","task":"t","secretsProfile":"ci","image":"pi-agent:other"}`, 1)
	h.wait(t, "run-1", finished)
	rec := h.oneRecord(t, "run-1", jobs.OutcomeCompleted, jobs.ReasonCompleted)
	specs := h.rt.Specs()
	if len(specs) != 1 {
		t.Fatalf("%d runs, want 1", len(specs))
	}
	sp := specs[0]
	if sp.JobID != "run-1" || sp.Image != "pi-agent:other" || sp.Network != "none" || sp.Worker != "host-a" ||
		sp.Env["TOKEN"] != "s3cret" || sp.Env["PI_JOB_ID"] != "run-1" || !sp.KeepContainer {
		t.Fatalf("spec = %+v", sp)
	}
	if rec.Image != "pi-agent:other" || rec.Target != "acme/widgets" || rec.Host != "host-a" || rec.Attempt != 1 {
		t.Fatalf("record = %+v", rec)
	}
	if day, _ := h.budget.Counts(); day != 1 {
		t.Fatalf("budget counts %d, want 1", day)
	}
	if got := h.mirror.Records(); len(got) != 1 || got[0].JobID != "run-1" {
		t.Fatalf("mirrored %+v, want the run's record", got)
	}
	if h.mirror.ClaimOwner(fleet.SharedQueue, "run-1", 1) != "host-a" {
		t.Fatal("the attempt was recorded without its claim")
	}
	eventually(t, "the kept container is removed", func() bool { return len(h.rt.Removed()) == 1 })
	if rm := h.rt.Removed(); rm[0] != "pi-job-run-1" {
		t.Fatalf("removed %v, want the kept container", rm)
	}
	for _, r := range h.records(t, "run-1") {
		if strings.Contains(fmt.Sprintf("%+v", r), "s3cret") {
			t.Fatal("a secret reached the record")
		}
	}
}

// One clock: every time the Worker writes (a record's start and end, the
// events) comes from its injected clock, whatever the runtime's own clock
// says. A clock 12 h behind or ahead of the wall clock still gives one
// valid record, timed by that clock.
func TestWorkerWritesOnlyItsOwnClock(t *testing.T) {
	for _, skew := range []time.Duration{-12 * time.Hour, 12 * time.Hour} {
		t.Run(skew.String(), func(t *testing.T) {
			h := newFakeHost(t)
			h.tune.Now = func() time.Time { return time.Now().Add(skew) }
			h.start(t)
			h.add(t, "clock-1", forgeJob, 1)
			h.wait(t, "clock-1", finished)
			rec := h.oneRecord(t, "clock-1", jobs.OutcomeCompleted, jobs.ReasonCompleted)
			want := time.Now().Add(skew)
			for name, at := range map[string]time.Time{"startedAt": rec.StartedAt, "endedAt": rec.EndedAt} {
				if d := at.Sub(want); d < -time.Minute || d > time.Minute {
					t.Errorf("%s %s is %s from the injected clock", name, at, d)
				}
			}
			if rec.EndedAt.Before(rec.StartedAt) {
				t.Errorf("ends %s before it starts %s", rec.EndedAt, rec.StartedAt)
			}
		})
	}
}

// Without a fleet key (the zero Key) every job but a scheduler's run is
// refused job-unsigned, forge and folder jobs alike, before anything is
// spent: any Valkey writer could have queued it. Listing its queue in
// UnsignedQueues, or every queue, is the operator's opt-in.
func TestGateUnsignedWithoutAKey(t *testing.T) {
	folderJob := fmt.Sprintf(`{"kind":"local","folder":%q,"flow":"fix","task":"t"}`, t.TempDir())
	for name, data := range map[string]string{"forge": forgeJob, "folder": folderJob} {
		t.Run(name, func(t *testing.T) {
			h := newFakeHost(t)
			h.cfg.UnsignedQueues = nil
			h.start(t)
			h.add(t, "u-1", data, 1)
			refusedBefore(t, h, "u-1", jobs.ReasonJobUnsigned)
		})
	}
	for name, list := range map[string][]string{"its queue": {fleet.SharedQueue}, "every queue": {fleet.EveryQueue}} {
		t.Run("opted in/"+name, func(t *testing.T) {
			h := newFakeHost(t)
			h.cfg.UnsignedQueues = list
			h.start(t)
			h.add(t, "u-2", folderJob, 1)
			h.wait(t, "u-2", finished)
			h.oneRecord(t, "u-2", jobs.OutcomeCompleted, jobs.ReasonCompleted)
		})
	}
	t.Run("another host's queue opted in", func(t *testing.T) {
		h := newFakeHost(t)
		h.cfg.UnsignedQueues = []string{fleet.HostQueueName("other")}
		h.start(t)
		h.add(t, "u-3", folderJob, 1)
		refusedBefore(t, h, "u-3", jobs.ReasonJobUnsigned)
	})
}
