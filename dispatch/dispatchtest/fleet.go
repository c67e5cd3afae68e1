package dispatchtest

import (
	"context"
	"sync"
	"time"

	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/jobs"
)

// Clock is the fake fleet's clock: the real time moved on by Advance, so a
// test can step past a window or a TTL while the Worker's own timers still
// run. It is safe for concurrent use.
type Clock struct {
	mu     sync.Mutex
	offset time.Duration
}

// Now is the real time plus every Advance so far.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.offset)
}

// Advance moves the clock on by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.offset += d
}

// Fleet is an in-memory dispatch.Fleet: every host it opens shares one state
// (the queues, the budgets, holds, leases, registry, run mirror, cancel
// requests, rate limits and forge threads' lines), so several Workers on one Fleet are one fleet,
// as several hosts on one Valkey are. Every store reads Clock. The exported
// stores are there for assertions and to set a failure (Err); the caps are
// set by the hosts Open is given, the last one winning, as every host of a
// real fleet is meant to name the same caps.
type Fleet struct {
	Clock      *Clock
	Budget     *Budget
	Dollars    *Dollars
	RateLimits *RateLimits
	Holds      *Holds
	Mirror     *Mirror
	Leases     *LeaseStore
	Cancels    *Cancels
	Directory  *Directory
	Threads    *Threads

	mu       sync.Mutex
	lockTTL  time.Duration
	registry fakeFleet
}

var _ dispatch.Fleet = (*Fleet)(nil)

// NewFleet returns an empty fleet on a fresh Clock.
func NewFleet() *Fleet {
	c := &Clock{}
	f := &Fleet{
		Clock:      c,
		Budget:     NewBudget(0, 0),
		Dollars:    NewDollars(0, 0, 0),
		RateLimits: NewRateLimits(),
		Holds:      NewHolds(),
		Mirror:     NewMirror(),
		Leases:     NewLeaseStore(),
		Cancels:    NewCancels(),
		Directory:  NewDirectory(),
		Threads:    NewThreads(),
	}
	f.Budget.Now, f.Dollars.Now, f.RateLimits.Now, f.Holds.Now, f.Leases.Now = c.Now, c.Now, c.Now, c.Now, c.Now
	f.Threads.Now = c.Now
	return f
}

// Queue is the fleet's queue called name, made empty on first use.
func (f *Fleet) Queue(name string) *Queue {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.queueLocked(name)
}

func (f *Fleet) queueLocked(name string) *Queue {
	if q, err := f.Directory.queue(name); err == nil {
		return q
	}
	q := NewQueue(name)
	q.Now, q.LockTTL = f.Clock.Now, f.lockTTL
	f.Directory.Add(q)
	return q
}

// Shared is the fleet's shared queue.
func (f *Fleet) Shared() *Queue { return f.Queue(fleet.SharedQueue) }

// Open returns host's stores on the fleet: the shared queue and, for a
// declared host, its own queue; a Source taking jobs as host; a registry row
// the other hosts' rows see; fleet leases for a declared host. The budgets,
// holds, mirror, cancels, rate limits and threads are the fleet's own,
// shared.
func (f *Fleet) Open(ctx context.Context, h dispatch.FleetHost) (dispatch.Stores, error) {
	if err := fleet.ValidateName(h.Name); err != nil {
		return dispatch.Stores{}, err
	}
	if err := ctx.Err(); err != nil {
		return dispatch.Stores{}, err
	}
	f.mu.Lock()
	if h.LockTTL > 0 {
		f.lockTTL = h.LockTTL
	}
	queues := []*Queue{f.queueLocked(fleet.SharedQueue)}
	if h.Declared {
		queues = append(queues, f.queueLocked(fleet.HostQueueName(h.Name)))
	}
	for _, q := range queues {
		if h.LockTTL > 0 {
			q.mu.Lock()
			q.LockTTL = h.LockTTL
			q.mu.Unlock()
		}
	}
	f.mu.Unlock()
	f.setCaps(h)

	reg := &fleetRegistry{Registry: NewRegistry(h.Name), fleet: &f.registry, routes: h.Declared}
	f.registry.mu.Lock()
	f.registry.members = append(f.registry.members, reg)
	f.registry.mu.Unlock()

	s := dispatch.Stores{
		Source:     &Source{queues: queues, worker: h.Name, done: make(chan struct{})},
		Budget:     f.Budget,
		Registry:   reg,
		Mirror:     &fleetMirror{Mirror: f.Mirror},
		Directory:  f.Directory,
		Finder:     f.Directory,
		Holds:      f.Holds,
		Cancels:    f.Cancels,
		Dollars:    f.Dollars,
		RateLimits: f.RateLimits,
		Threads:    f.Threads,
	}
	for _, q := range queues {
		s.Queues = append(s.Queues, q)
	}
	if h.Declared {
		s.Leases = f.Leases.Leaser(h.Name)
	}
	return s, nil
}

// setCaps gives the fleet's windows host's caps.
func (f *Fleet) setCaps(h dispatch.FleetHost) {
	f.Budget.mu.Lock()
	f.Budget.DailyCap, f.Budget.WeeklyCap = h.Starts.Daily, h.Starts.Weekly
	f.Budget.MonthlyCap, f.Budget.SoftHoldPct = h.Starts.Monthly, h.Starts.SoftHoldPct
	f.Budget.mu.Unlock()
	f.Dollars.mu.Lock()
	f.Dollars.DailyMicros, f.Dollars.WeeklyMicros, f.Dollars.MonthlyMicros = h.Dollars.Daily, h.Dollars.Weekly, h.Dollars.Monthly
	f.Dollars.mu.Unlock()
}

// fleetMirror is one host's view of the fleet's Mirror: its Close stops
// this host's Go, not the other hosts'.
type fleetMirror struct {
	*Mirror
	mu     sync.Mutex
	closed bool
}

// Go stores rec in the fleet's mirror unless this view is closed.
func (m *fleetMirror) Go(ctx context.Context, rec jobs.Record) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.closed {
		m.Mirror.Go(ctx, rec)
	}
}

// Close stops this view's Go.
func (m *fleetMirror) Close(ctx context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closed = true
	return nil
}
