package fleetsim

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pidispatch/pidispatch/capabilities"
	"github.com/pidispatch/pidispatch/cronsync"
	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/fleetstate"
	"github.com/pidispatch/pidispatch/jobs"
	"github.com/pidispatch/pidispatch/lease"
	"github.com/pidispatch/pidispatch/queue"
	"github.com/pidispatch/pidispatch/registry"
	"github.com/pidispatch/pidispatch/valkey"
)

// Names the simulated fleet uses.
const (
	// secretProfile is the profile every simulated host declares and every
	// delivery needs, so each routing decision reads the registry and
	// picks a host.
	secretProfile = "gh"
	// cronScheduler is the scheduler of the cron run each host gates once
	// a minute; no host's set names it, so the gate asks its peers.
	cronScheduler = "nightly-sim"
	// scopeSlots is each repository scope's fleet-wide concurrent limit.
	scopeSlots = 2
	// jobCostMicros is each job's cap, reserved in the dollar windows.
	jobCostMicros = 2_000_000
)

// host is one simulated worker: its own client, as a worker process has,
// and the stores stack.Fleet opens for a declared host, driven on the
// worker's periods.
type host struct {
	name    string
	sim     *sim
	rc      *redis.Client
	reg     *registry.Registry
	shared  *queue.Queue
	own     *queue.Queue
	cons    *queue.Consumer
	dir     *queue.Directory
	lease   *lease.Lease
	budget  *fleetstate.Budget
	dollars *fleetstate.Dollars
	mirror  *fleetstate.Mirror
	cancels *fleetstate.CancelWatcher
	live    *cronsync.LiveSet
	slots   chan struct{}
}

// openHost opens host name's stores and publishes its first beat, as a
// worker's boot does (registry, then its queue declared).
func (s *sim) openHost(ctx context.Context, name string) (*host, error) {
	rc, err := valkey.NewClient(s.url, valkey.Options{})
	if err != nil {
		return nil, err
	}
	rc.AddHook(s.hook)
	h := &host{name: name, sim: s, rc: rc, slots: make(chan struct{}, s.cfg.Concurrency)}
	fail := func(err error) (*host, error) {
		_ = rc.Close()
		return nil, err
	}
	h.live = cronsync.NewLiveSet(cronsync.Own{Configured: true, Entries: []cronsync.Entry{}}, "UTC")
	caps := capabilities.Serialize(capabilities.Tokens([]string{secretProfile}, nil))
	h.reg, err = registry.New(rc, name, registry.Facts{
		Image:       registry.Value("pi-agent:sim"),
		Concurrency: registry.Value(s.cfg.Concurrency),
		Routes:      registry.Value(true),
		Caps:        registry.Value(caps),
		TZ:          registry.Value("UTC"),
		FPCron:      h.live.FPCron,
		CronCount:   h.live.CronCount,
	}, registry.Config{Interval: s.cfg.Periods.Beat, FleetKey: s.key, Machine: name, Version: "sim"})
	if err != nil {
		return fail(err)
	}
	qcfg := queue.Config{WorkerName: name}
	if h.shared, err = queue.New(rc, fleet.SharedQueue, qcfg); err != nil {
		return fail(err)
	}
	if h.own, err = queue.New(rc, fleet.HostQueueName(name), qcfg); err != nil {
		return fail(err)
	}
	if h.cons, err = queue.NewConsumer([]*queue.Queue{h.shared, h.own}, queue.ConsumerConfig{BlockTimeout: s.cfg.Periods.Block}); err != nil {
		return fail(err)
	}
	if h.dir, err = queue.NewDirectory(rc, queue.Config{}); err != nil {
		return fail(err)
	}
	if h.cancels, err = fleetstate.NewCancelWatcher(rc, name, fleetstate.CancelWatcherConfig{}); err != nil {
		return fail(err)
	}
	h.lease = lease.New(rc, name, lease.Config{})
	h.budget = fleetstate.NewBudget(rc, fleetstate.BudgetConfig{DailyCap: 1 << 30, WeeklyCap: 1 << 30, MonthlyCap: 1 << 30, Host: name})
	h.dollars = fleetstate.NewDollars(rc, fleetstate.DollarsConfig{DailyMicros: 1 << 50, WeeklyMicros: 1 << 50, MonthlyMicros: 1 << 50, Host: name})
	h.mirror = fleetstate.NewMirror(rc, fleetstate.MirrorConfig{Host: name})
	ctx = withOp(ctx, opBoot)
	if err := h.reg.Publish(ctx); err != nil {
		return fail(fmt.Errorf("first beat of %s: %w", name, err))
	}
	if _, err := fleetstate.DeclareHostQueue(ctx, h.own); err != nil {
		return fail(fmt.Errorf("declare %s: %w", h.own.Name(), err))
	}
	return h, nil
}

// run drives the host until ctx ends: the consumer, and one loop per
// period, each started at a random phase so the fleet's calls spread
// over the period as independent hosts' do.
func (h *host) run(ctx context.Context) {
	p := h.sim.cfg.Periods
	var wg sync.WaitGroup
	wg.Go(func() { h.consume(ctx) })
	wg.Go(func() { _ = h.cancels.Run(ctx) })
	wg.Go(func() { every(ctx, p.Beat, h.beat) })
	wg.Go(func() { every(ctx, p.Stalled, h.stalled) })
	wg.Go(func() { every(ctx, p.Rehome, h.rehome) })
	wg.Go(func() { every(ctx, p.Cron, h.cronGate) })
	wg.Wait()
}

// close releases the host's connections, once run has returned.
func (h *host) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = h.cons.Close()
	_ = h.mirror.Close(ctx)
	_ = h.budget.Close(ctx)
	_ = h.dollars.Close(ctx)
	_ = h.rc.Close()
}

// every calls f every period, the first time after a random part of it.
func every(ctx context.Context, period time.Duration, f func(context.Context)) {
	first := time.Duration(rand.Int64N(int64(period)))
	t := time.NewTimer(first)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		f(ctx)
		t.Reset(period)
	}
}

// beat publishes the host's row, as the registry's loop does.
func (h *host) beat(ctx context.Context) {
	_ = h.sim.rec.time(OpBeat, func() error { return h.reg.Publish(withOp(ctx, OpBeat)) })
}

// stalled runs the stalled check on each queue the host drains, with the
// peek at the jobs it would fail that the worker makes first.
func (h *host) stalled(ctx context.Context) {
	ctx = withOp(ctx, OpStalled)
	for _, q := range []*queue.Queue{h.shared, h.own} {
		_ = h.sim.rec.time(OpStalled, func() error {
			if _, err := q.Unlocked(ctx); err != nil {
				return err
			}
			_, err := q.CheckStalled(ctx)
			return err
		})
	}
}

// rehome is the once-a-minute look for dead hosts' queues: the live rows
// and the host queues in the keyspace (dispatch's deadHosts).
func (h *host) rehome(ctx context.Context) {
	ctx = withOp(ctx, OpRehome)
	_ = h.sim.rec.time(OpRehome, func() error {
		if _, err := h.reg.ReadLive(ctx); err != nil {
			return err
		}
		_, err := h.dir.HostQueues(ctx)
		return err
	})
}

// cronGate decides a scheduler's run taken from the shared queue that this
// host's set does not name: the gate reads the live peers to see whether
// one may have agreed to it (cronsync.AdmitRun).
func (h *host) cronGate(ctx context.Context) {
	ctx = withOp(ctx, OpCronGate)
	data := json.RawMessage(`{"kind":"cron","folder":"/srv/sim","task":"nightly"}`)
	start := time.Now()
	d := cronsync.AdmitRun(ctx, h.live, h.reg, true, h.name, cronScheduler, data)
	// Every simulated host publishes the same cron set, so a run is left
	// for a peer only when the peers could not be read.
	var err error
	switch {
	case d.Run:
		err = fmt.Errorf("cron gate: the run was admitted, so no peer was read")
	case d.Leave:
		err = fmt.Errorf("cron gate: the live peers could not be read")
	}
	h.sim.rec.add(OpCronGate, time.Since(start), err)
}

// consume takes jobs from the host's queue and the shared queue, a slot at
// a time, as the worker's fetch loop does.
func (h *host) consume(ctx context.Context) {
	ctx = withOp(ctx, opFetch)
	var jobs sync.WaitGroup
	defer jobs.Wait()
	for {
		select {
		case h.slots <- struct{}{}:
		case <-ctx.Done():
			return
		}
		token := fleet.NewToken()
		q, job, err := h.cons.Next(ctx, token)
		if err != nil || job == nil {
			<-h.slots
			if ctx.Err() != nil {
				return
			}
			select {
			case <-time.After(time.Second):
			case <-ctx.Done():
				return
			}
			continue
		}
		if at, ok := h.sim.enqueued.LoadAndDelete(job.ID); ok {
			h.sim.rec.add(OpPickup, time.Since(at.(time.Time)), nil)
		}
		jobs.Go(func() {
			defer func() { <-h.slots }()
			h.handle(context.WithoutCancel(ctx), q, job, token)
		})
	}
}

// handle is a job's Valkey work on the worker, in order: the scope slot,
// the start budget, the dollar windows, the cancel watch while it runs,
// the dollar settle, the record's mirror, the completion, the slot back.
// The container is a sleep of Config.JobTime.
func (h *host) handle(ctx context.Context, q *queue.Queue, job *queue.Job, token string) {
	rec := h.sim.rec
	spec, err := jobs.ParseJob(job.Data)
	if err != nil {
		rec.add(OpComplete, 0, err)
		return
	}
	scope := spec.Scope()
	hash := fleet.ScopeHash(scope)
	var slot *lease.Handle
	err = rec.time(OpLeaseAcquire, func() error {
		var err error
		slot, err = h.lease.Acquire(withOp(ctx, OpLeaseAcquire), job.ID, scopeSlots, h.sim.cfg.JobTime+time.Minute,
			func(i int) string { return fleet.ScopeSlotKey(hash, i) })
		return err
	})
	if err == nil && slot != nil {
		defer func() {
			_ = rec.time(OpLeaseRelease, func() error { return slot.Release(withOp(ctx, OpLeaseRelease)) })
		}()
	}
	_ = rec.time(OpBudgetReserve, func() error {
		_, err := h.budget.Reserve(withOp(ctx, OpBudgetReserve), scope, nil)
		return err
	})
	var settle func() error
	_ = rec.time(OpDollarReserve, func() error {
		r, err := h.dollars.ReserveDollars(withOp(ctx, OpDollarReserve), job.ID, scope, nil, jobCostMicros, h.sim.cfg.JobTime+time.Hour)
		settle = func() error { return h.dollars.SettleDollars(withOp(ctx, OpDollarSettle), r, jobCostMicros/4) }
		return err
	})
	started := time.Now()
	stop := h.cancels.Watch(ctx, job.ID, func() {})
	select {
	case <-time.After(h.sim.cfg.JobTime):
	case <-ctx.Done():
	}
	stop()
	if settle != nil {
		_ = rec.time(OpDollarSettle, settle)
	}
	r := jobs.Record{
		Queue: q.Name(), JobID: job.ID, Kind: spec.Kind, Target: spec.Target(), Host: h.name,
		Image: "pi-agent:sim", StartedAt: started, EndedAt: time.Now(), Attempt: job.AttemptsMade + 1,
		Outcome: jobs.OutcomeCompleted, Reason: jobs.ReasonCompleted, Flow: spec.Flow,
	}
	_ = rec.time(OpMirror, func() error { return h.mirror.Mirror(withOp(ctx, OpMirror), r) })
	_ = rec.time(OpComplete, func() error {
		return q.Complete(withOp(ctx, OpComplete), job.ID, token, json.RawMessage(`{"outcome":"completed"}`))
	})
}
