package dispatch_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/dispatch/container"
	"github.com/pidispatch/pidispatch/dispatch/dispatchtest"
	"github.com/pidispatch/pidispatch/gateway/socket"
	"github.com/pidispatch/pidispatch/jobs"
)

// The gateway, rate-limit and dollar wiring of the Worker, on the fakes:
// each collaborator is a small stand-in that records what it was asked.

// stubGateway hands out sessions that answer every call 200, note the call's
// job and keys, and report a scripted spend.
type stubGateway struct {
	mu    sync.Mutex
	jobs  []dispatch.GatewayJob
	calls int
	spend jobs.Spend
}

func (g *stubGateway) Job(_ context.Context, j dispatch.GatewayJob) dispatch.GatewaySession {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.jobs = append(g.jobs, j)
	return &stubSession{g: g}
}

type stubSession struct{ g *stubGateway }

func (s *stubSession) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.g.mu.Lock()
	s.g.calls++
	s.g.mu.Unlock()
	w.WriteHeader(http.StatusOK)
}

func (s *stubSession) Spend() jobs.Spend {
	s.g.mu.Lock()
	defer s.g.mu.Unlock()
	return s.g.spend
}

func (s *stubSession) Close() {}

var _ dispatch.ModelGateway = (*stubGateway)(nil)

// callModel is a container's model call through its socket.
func callModel(ctx context.Context, spec container.Spec) error {
	c := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", filepath.Join(spec.ModelSocketDir, socket.Name))
	}}}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://model/anthropic/v1/messages", nil)
	resp, err := c.Do(req)
	if err == nil {
		resp.Body.Close()
	}
	return err
}

func TestGatewayHoldsTheKeysAndTheContainerGetsNone(t *testing.T) {
	h := newFakeHost(t)
	gw := &stubGateway{spend: jobs.Spend{Calls: 1, Micros: 1500, Basis: jobs.BasisMetered}}
	h.deps.Gateway = gw
	h.cfg.Gateway.ProviderKeys = map[string]string{"anthropic": "sk-host", "openai": "sk-host-openai"}
	h.cfg.Spend.MaxCostMicros = 2_000_000
	h.cfg.SecretProfiles = map[string]string{"ci": writeFile(t, "resolver", "#!/bin/sh\necho ANTHROPIC_API_KEY=sk-job\necho TOKEN=t0k\n", 0o755)}
	var callErr error
	h.rt.RunFunc = func(ctx context.Context, spec container.Spec) (container.Result, error) {
		callErr = callModel(ctx, spec)
		return container.Result{ExitCode: 0}, nil
	}
	h.start(t)
	h.add(t, "gw-1", `{"kind":"forge","repo":"acme/widgets","flow":"fix","task":"t","secretsProfile":"ci","maxCostUsd":"0.5"}`, 2)
	h.wait(t, "gw-1", finished)
	if callErr != nil {
		t.Fatalf("model call through the socket: %v", callErr)
	}
	rec := h.oneRecord(t, "gw-1", jobs.OutcomeCompleted, jobs.ReasonCompleted)
	if rec.Spend == nil || rec.Spend.Micros != 1500 || rec.Spend.Calls != 1 {
		t.Fatalf("record spend = %+v, want the session's", rec.Spend)
	}
	spec := h.rt.Specs()[0]
	if _, ok := spec.Env["ANTHROPIC_API_KEY"]; ok {
		t.Fatal("the provider key entered the container's environment")
	}
	if spec.Env["TOKEN"] != "t0k" || spec.ModelSocketDir == "" {
		t.Fatalf("env %v, socket %q: want the other secrets and a socket", spec.Env, spec.ModelSocketDir)
	}
	j := gw.jobs[0]
	if j.Keys["anthropic"] != "sk-job" || j.Keys["openai"] != "sk-host-openai" || j.JobID != "gw-1" {
		t.Fatalf("gateway job %+v: want the profile's key over the host's", j)
	}
	if j.MaxMicros != 500_000 {
		t.Fatalf("job cap %d, want the job's lower maxCostUsd (500000)", j.MaxMicros)
	}
}

func TestGatewayOffGivesNoSocket(t *testing.T) {
	h := newFakeHost(t)
	h.deps.Gateway = &stubGateway{}
	h.cfg.Gateway.Off = true
	h.start(t)
	h.add(t, "gw-off", forgeJob, 1)
	h.wait(t, "gw-off", finished)
	if dir := h.rt.Specs()[0].ModelSocketDir; dir != "" {
		t.Fatalf("socket %q with PI_GATEWAY=off", dir)
	}
}

func TestCapHitIsPolicyNeverRetried(t *testing.T) {
	for _, reason := range []jobs.Reason{jobs.ReasonCostCap, jobs.ReasonTokenCap} {
		t.Run(string(reason), func(t *testing.T) {
			h := newFakeHost(t)
			h.deps.Gateway = &stubGateway{spend: jobs.Spend{Calls: 2, Refused: 1, Micros: 900, CapHit: reason, Basis: jobs.BasisMetered}}
			h.rt.Script("cap-1", container.Result{ExitCode: 1}, nil) // the agent gave up on the refused call
			h.start(t)
			h.add(t, "cap-1", forgeJob, 3)
			s := h.wait(t, "cap-1", finished)
			if s.State != dispatch.StateCompleted || resultReason(t, s) != reason {
				t.Fatalf("queue: %+v, want completed with reason %s (never retried)", s, reason)
			}
			rec := h.oneRecord(t, "cap-1", jobs.OutcomePolicy, reason)
			if rec.Spend == nil || rec.Spend.CapHit != reason || rec.ExitCode == nil || *rec.ExitCode != 1 {
				t.Fatalf("record %+v", rec)
			}
		})
	}
}

// stubRateLimits reports one provider suspended.
type stubRateLimits struct {
	provider string
	until    time.Time
}

func (r *stubRateLimits) Suspend(context.Context, string, time.Time, string) error { return nil }
func (r *stubRateLimits) SuspendedUntil(_ context.Context, p string) (time.Time, error) {
	if p == r.provider {
		return r.until, nil
	}
	return time.Time{}, nil
}
func (r *stubRateLimits) List(context.Context) ([]dispatch.Suspension, error) { return nil, nil }

func TestGateRateLimitDefersUntilTheReset(t *testing.T) {
	h := newFakeHost(t)
	h.deps.Gateway = &stubGateway{}
	h.deps.RateLimits = &stubRateLimits{provider: "anthropic", until: time.Now().Add(20 * time.Second)}
	obs := &eventLog{}
	h.deps.Observers = []dispatch.Observer{obs}
	h.start(t)
	h.add(t, "rl-1", forgeJob, 2)
	h.add(t, "rl-2", `{"kind":"forge","repo":"acme/widgets","flow":"fix","task":"t","provider":"openai"}`, 2)
	h.wait(t, "rl-2", finished) // another provider's job runs
	s := h.wait(t, "rl-1", deferred)
	if s.AttemptsMade != 0 || s.Finished() || len(h.records(t, "rl-1")) != 0 {
		t.Fatalf("rl-1: %+v, want deferred: not finished, not an attempt, no record", s)
	}
	for _, spec := range h.rt.Specs() {
		if spec.JobID == "rl-1" {
			t.Fatal("the rate-limited provider's job ran")
		}
	}
	ev := obs.find(dispatch.EventGate, "rl-1")
	if ev == nil || ev.Gate != "rate-limit" || ev.Decision != dispatch.DecisionDefer || ev.Delay < 19*time.Second || ev.Delay > 22*time.Second {
		t.Fatalf("gate event %+v, want a rate-limit deferral of about 20s", ev)
	}
}

// stubDollars grants while the cap holds and notes every settle.
type stubDollars struct {
	mu       sync.Mutex
	capM     int64
	used     int64
	reserved []int64
	settled  []int64
	ttl      time.Duration
}

func (d *stubDollars) ReserveDollars(_ context.Context, _, _ string, _ *dispatch.ScopeLimit, micros int64, ttl time.Duration) (dispatch.DollarReservation, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.ttl = ttl
	if d.used+micros > d.capM {
		return dispatch.DollarReservation{Window: dispatch.WindowDay, UsedMicros: d.used, CapMicros: d.capM}, nil
	}
	d.used += micros
	d.reserved = append(d.reserved, micros)
	return dispatch.DollarReservation{Granted: true, Window: dispatch.WindowDay, Ticket: micros}, nil
}

func (d *stubDollars) SettleDollars(_ context.Context, r dispatch.DollarReservation, spent int64) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.used += spent - r.Ticket.(int64)
	d.settled = append(d.settled, spent)
	return nil
}

func TestGateDollarsReservesTheCapAndSettlesTheSpend(t *testing.T) {
	h := newFakeHost(t)
	h.cfg.Spend.MaxCostMicros = 1_000_000
	h.cfg.Spend.DailyCostMicros = 1_500_000
	h.cfg.Concurrency = 1
	dollars := &stubDollars{capM: 1_500_000}
	h.deps.Dollars = dollars
	h.deps.Gateway = &stubGateway{spend: jobs.Spend{Calls: 3, Micros: 250_000, Basis: jobs.BasisMetered}}
	h.start(t)
	h.add(t, "usd-1", forgeJob, 1)
	h.wait(t, "usd-1", finished)
	eventually(t, "the first job settled", func() bool {
		dollars.mu.Lock()
		defer dollars.mu.Unlock()
		return len(dollars.settled) == 1
	})
	h.add(t, "usd-2", forgeJob, 1) // 0.25 settled + 1.00 reserved fits 1.50
	h.wait(t, "usd-2", finished)
	h.oneRecord(t, "usd-2", jobs.OutcomeCompleted, jobs.ReasonCompleted)
	eventually(t, "the second job settled", func() bool {
		dollars.mu.Lock()
		defer dollars.mu.Unlock()
		return len(dollars.settled) == 2
	})
	h.add(t, "usd-3", forgeJob, 1) // 0.50 settled + 1.00 fits 1.50 exactly
	h.wait(t, "usd-3", finished)
	h.add(t, "usd-4", forgeJob, 1) // 0.75 + 1.00 does not
	s := h.wait(t, "usd-4", finished)
	if resultReason(t, s) != jobs.ReasonDollarCap {
		t.Fatalf("usd-4: %+v, want refused dollar-cap", s)
	}
	h.oneRecord(t, "usd-4", jobs.OutcomePolicy, jobs.ReasonDollarCap)
	if n := len(h.rt.Specs()); n != 3 {
		t.Fatalf("%d containers, want 3", n)
	}
	dollars.mu.Lock()
	defer dollars.mu.Unlock()
	if dollars.reserved[0] != 1_000_000 || dollars.settled[0] != 250_000 || dollars.ttl != h.cfg.JobTimeout {
		t.Fatalf("reserved %v settled %v ttl %v: want the job cap reserved for the job timeout, the spend settled", dollars.reserved, dollars.settled, dollars.ttl)
	}
}

func TestNewWorkerRefusesDollarWindowsWithoutABudget(t *testing.T) {
	h := newFakeHost(t)
	h.cfg.Spend.MaxCostMicros = 1_000_000
	h.cfg.Spend.DailyCostMicros = 5_000_000
	_, err := dispatch.NewWorker(h.cfg, h.deps, h.tune)
	var mp *dispatch.MissingPartError
	if !errors.As(err, &mp) || mp.Part != "Deps.Dollars" {
		t.Fatalf("NewWorker: %v, want a missing Deps.Dollars", err)
	}
}

// eventLog is an Observer that keeps every event.
type eventLog struct {
	mu  sync.Mutex
	evs []dispatch.Event
}

func (l *eventLog) Observe(ev dispatch.Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.evs = append(l.evs, ev)
}

func (l *eventLog) find(kind dispatch.EventKind, jobID string) *dispatch.Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := range l.evs {
		if l.evs[i].Kind == kind && l.evs[i].JobID == jobID {
			ev := l.evs[i]
			return &ev
		}
	}
	return nil
}

func TestObserverSeesGatesStartsAndFinishes(t *testing.T) {
	h := newFakeHost(t)
	h.budget.DailyCap = 1
	obs := &eventLog{}
	h.deps.Observers = []dispatch.Observer{obs}
	h.cfg.Concurrency = 1
	h.start(t)
	h.add(t, "ob-1", forgeJob, 1)
	h.wait(t, "ob-1", finished)
	h.add(t, "ob-2", forgeJob, 1)
	h.wait(t, "ob-2", finished)
	eventually(t, "both finishes observed", func() bool {
		return obs.find(dispatch.EventFinish, "ob-1") != nil && obs.find(dispatch.EventFinish, "ob-2") != nil
	})
	start := obs.find(dispatch.EventStart, "ob-1")
	fin := obs.find(dispatch.EventFinish, "ob-1")
	if start == nil || start.Host != "host-a" || start.Queue == "" || start.Attempt != 1 || start.PickupLatency <= 0 {
		t.Fatalf("start event %+v", start)
	}
	if fin.Outcome != jobs.OutcomeCompleted || fin.Reason != jobs.ReasonCompleted {
		t.Fatalf("finish event %+v", fin)
	}
	gate := obs.find(dispatch.EventGate, "ob-2")
	fin2 := obs.find(dispatch.EventFinish, "ob-2")
	if gate == nil || gate.Gate != "budget" || gate.Decision != dispatch.DecisionRefuse || gate.Reason != jobs.ReasonOverBudget {
		t.Fatalf("gate event %+v, want the budget's refusal", gate)
	}
	if fin2.Outcome != jobs.OutcomePolicy || fin2.Reason != jobs.ReasonOverBudget || fin2.Duration != 0 {
		t.Fatalf("finish event %+v, want policy/over-budget with no run time", fin2)
	}
	if obs.find(dispatch.EventStart, "ob-2") != nil {
		t.Fatal("a refused job was reported started")
	}
}

func TestScopeDollarRowsNeedAJobCap(t *testing.T) {
	h := newFakeHost(t)
	h.cfg.ScopedLimits = mustScopedLimits(t, `{"version":1,"limits":[{"scope":"acme/widgets","dailyCostUsd":"5"}]}`)
	_, err := dispatch.NewWorker(h.cfg, h.deps, h.tune)
	var ce *dispatch.ConfigError
	if !errors.As(err, &ce) || ce.Var != "Config.ScopedLimits" || !strings.Contains(ce.Rule, "Spend.MaxCostMicros") {
		t.Fatalf("NewWorker: %v, want Config.ScopedLimits needing Spend.MaxCostMicros", err)
	}
	h.cfg.Spend.MaxCostMicros = 1_000_000
	_, err = dispatch.NewWorker(h.cfg, h.deps, h.tune)
	var mp *dispatch.MissingPartError
	if !errors.As(err, &mp) || mp.Part != "Deps.Dollars" {
		t.Fatalf("NewWorker: %v, want a missing Deps.Dollars", err)
	}
}

// A scope row's dollar window is held even with no global window, with
// the real fake of dispatchtest.
func TestScopeDollarWindowRefuses(t *testing.T) {
	h := newFakeHost(t)
	h.cfg.ScopedLimits = mustScopedLimits(t, `{"version":1,"limits":[{"scope":"acme/widgets","dailyCostUsd":"1.5"}]}`)
	h.cfg.Spend.MaxCostMicros = 1_000_000
	h.deps.Dollars = dispatchtest.NewDollars(0, 0, 0)
	h.cfg.Concurrency = 2
	hold := make(chan struct{})
	h.rt.RunFunc = func(ctx context.Context, spec container.Spec) (container.Result, error) {
		<-hold // the first job holds its $1 while the second asks
		return container.Result{}, nil
	}
	h.start(t)
	h.add(t, "sd-1", forgeJob, 1)
	eventually(t, "the first job runs", func() bool { return len(h.rt.Specs()) == 1 })
	h.add(t, "sd-2", forgeJob, 1)
	s := h.wait(t, "sd-2", finished)
	close(hold)
	if resultReason(t, s) != jobs.ReasonDollarCap {
		t.Fatalf("sd-2: %+v, want dollar-cap from the scope's day window", s)
	}
	h.wait(t, "sd-1", finished)
}
