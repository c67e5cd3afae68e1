package dispatchtest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/jobs"
)

// TestFleet is one fleet driver under test and the hooks the conformance
// suites need around it: what a test does to the stores from outside a
// Worker (add a job, take one as another client would, let a lock expire,
// read the windows, ask for a cancel, let time pass).
type TestFleet struct {
	Fleet dispatch.Fleet
	// Peer, when set, is another driver over the same state through a
	// connection of its own, as another machine reaches the fleet. Nil:
	// Fleet.
	Peer dispatch.Fleet
	// Add puts a job on the named queue; attempts 0 is the queue's default.
	Add func(queue, id string, data []byte, attempts int)
	// Take takes the named queue's next job locked with token, as another
	// client of the queue would; nil when there is none.
	Take func(queue, token string) *dispatch.HeldJob
	// ExpireLock lets the lock of job id on the named queue lapse now.
	ExpireLock func(queue, id string)
	// Starts reads the global start counts of today, this week and this
	// month.
	Starts func() (day, week, month int)
	// DollarDay reads the global day dollar window: settled spend and live
	// reservations. The suite calls it from a goroutine of its own too.
	DollarDay func() (spent, reserved int64)
	// Records reads the run mirror (any order).
	Records func() []jobs.Record
	// RequestCancel asks, as an operator does, that job id stop; the job is
	// one the suite watches.
	RequestCancel func(jobID string)
	// Wait lets d pass on the stores' clock: a fake's clock moves, a live
	// test sleeps.
	Wait func(d time.Duration)
}

// Exercise runs every store's conformance suite against the fleet driver
// newFleet makes, a fresh fleet per case: the queue and the source, the
// finder, the start and dollar budgets, the leases, the registry, the holds,
// the run mirror, the rate limits, the cancel requests and the forge
// threads' lines, each store opened through the driver as a Worker's host
// opens it.
func Exercise(t *testing.T, newFleet func(t *testing.T) TestFleet) {
	t.Run("JobQueue", func(t *testing.T) {
		TestJobQueue(t, func(t *testing.T) QueueHarness {
			f := newFleet(t)
			return queueHarness(f, Open(t, f.Fleet, dispatch.FleetHost{Name: "host-a"}).Queues[0])
		})
	})
	t.Run("JobSource", func(t *testing.T) {
		TestJobSource(t, func(t *testing.T) SourceHarness {
			f := newFleet(t)
			s := Open(t, f.Fleet, dispatch.FleetHost{Name: "host-a"})
			return SourceHarness{Source: s.Source, Add: func(id string) { f.Add(fleet.SharedQueue, id, []byte(`{}`), 0) }}
		})
	})
	t.Run("Finder", func(t *testing.T) {
		TestFinder(t, func(t *testing.T) FinderHarness {
			f := newFleet(t)
			s := Open(t, f.Fleet, dispatch.FleetHost{Name: "host-a"})
			return FinderHarness{Finder: s.Finder, Queue: func(name string) QueueHarness {
				if host, ok := strings.CutPrefix(name, fleet.HostQueuePrefix); ok {
					hs := Open(t, f.Fleet, dispatch.FleetHost{Name: host, Declared: true})
					return queueHarness(f, hs.Queues[len(hs.Queues)-1])
				}
				return queueHarness(f, s.Queues[0])
			}}
		})
	})
	t.Run("Budgeter", func(t *testing.T) {
		TestBudgeter(t, func(t *testing.T, c BudgetCaps) BudgetHarness {
			f := newFleet(t)
			s := Open(t, f.Fleet, dispatch.FleetHost{Name: "host-a", Starts: dispatch.StartCaps(c)})
			return BudgetHarness{
				Budget: s.Budget,
				Counts: func() (int, int) { d, w, _ := f.Starts(); return d, w },
				Month:  func() int { _, _, m := f.Starts(); return m },
			}
		})
	})
	t.Run("DollarBudget", func(t *testing.T) {
		TestDollarBudget(t, func(t *testing.T, c DollarCaps) DollarHarness {
			f := newFleet(t)
			h := dispatch.FleetHost{Name: "host-a", Dollars: dispatch.DollarCaps(c)}
			s := Open(t, f.Fleet, h)
			return DollarHarness{
				Budget: s.Dollars,
				Peer: func() dispatch.DollarBudget {
					peer := f.Peer
					if peer == nil {
						peer = f.Fleet
					}
					h.Name, h.Machine = "host-b", "machine-b"
					return Open(t, peer, h).Dollars
				},
				Day:  f.DollarDay,
				Wait: f.Wait,
			}
		})
	})
	t.Run("Leaser", func(t *testing.T) {
		TestLeaser(t, func(t *testing.T) func(string) dispatch.Leaser {
			f := newFleet(t)
			return func(worker string) dispatch.Leaser {
				return Open(t, f.Fleet, dispatch.FleetHost{Name: worker, Declared: true}).Leases
			}
		})
	})
	t.Run("Registry", func(t *testing.T) {
		TestRegistry(t, func(t *testing.T) RegistryHarness {
			f := newFleet(t)
			return RegistryHarness{New: func(name, machine string) dispatch.Registry {
				return Open(t, f.Fleet, dispatch.FleetHost{Name: name, Machine: machine}).Registry
			}}
		})
	})
	t.Run("HoldStore", func(t *testing.T) {
		TestHoldStore(t, func(t *testing.T) dispatch.HoldStore {
			return Open(t, newFleet(t).Fleet, dispatch.FleetHost{Name: "host-a"}).Holds
		})
	})
	t.Run("RunMirror", func(t *testing.T) {
		TestRunMirror(t, func(t *testing.T) MirrorHarness {
			f := newFleet(t)
			m, ok := Open(t, f.Fleet, dispatch.FleetHost{Name: "host-a"}).Mirror.(interface {
				dispatch.RunMirror
				RecordClaimer
			})
			if !ok {
				t.Fatal("the fleet's run mirror does not claim records")
			}
			return MirrorHarness{Mirror: m, Read: f.Records}
		})
	})
	t.Run("RateLimits", func(t *testing.T) {
		TestRateLimits(t, func(t *testing.T) RateLimitsHarness {
			f := newFleet(t)
			return RateLimitsHarness{Limits: Open(t, f.Fleet, dispatch.FleetHost{Name: "host-a"}).RateLimits, Wait: f.Wait}
		})
	})
	t.Run("JobCancels", func(t *testing.T) {
		TestJobCancels(t, func(t *testing.T) CancelsHarness {
			f := newFleet(t)
			c := Open(t, f.Fleet, dispatch.FleetHost{Name: "host-a", Declared: true}).Cancels
			runBackground(t, c)
			return CancelsHarness{Cancels: c, Request: f.RequestCancel}
		})
	})
	t.Run("Threads", func(t *testing.T) {
		TestThreads(t, func(t *testing.T) ThreadsHarness {
			f := newFleet(t)
			return ThreadsHarness{
				Host: func(name string) dispatch.Threads {
					fl, h := f.Fleet, dispatch.FleetHost{Name: name}
					if name != "host-a" && f.Peer != nil {
						fl, h.Machine = f.Peer, "machine-"+name
					}
					return staleThreads(t, Open(t, fl, h).Threads, ExerciseStaleAfter)
				},
				StaleAfter: ExerciseStaleAfter,
				Wait:       f.Wait,
			}
		})
	})
}

// ExerciseStaleAfter is the stale window Exercise gives a driver's Threads
// (through their WithStaleAfter), so a live store's jobs go stale within
// the test.
const ExerciseStaleAfter = 2 * time.Second

// staleTuner is a Threads whose stale window a test may set: the fake's and
// fleetstate's both are.
type staleTuner interface {
	WithStaleAfter(d time.Duration) dispatch.Threads
}

// staleThreads is th with the stale window d, failing t when the driver
// opened no Threads or one whose window cannot be set.
func staleThreads(t *testing.T, th dispatch.Threads, d time.Duration) dispatch.Threads {
	t.Helper()
	if th == nil {
		t.Fatal("the fleet's stores have no Threads")
	}
	s, ok := th.(staleTuner)
	if !ok {
		t.Fatalf("the fleet's Threads (%T) have no WithStaleAfter: the suite cannot make a job stale", th)
	}
	return s.WithStaleAfter(d)
}

// Open opens host's stores on fl, failing t on an error.
func Open(t testing.TB, fl dispatch.Fleet, host dispatch.FleetHost) dispatch.Stores {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := fl.Open(ctx, host)
	if err != nil {
		t.Fatalf("open the stores of %s: %v", host.Name, err)
	}
	return s
}

// queueHarness drives q through f's hooks.
func queueHarness(f TestFleet, q dispatch.JobQueue) QueueHarness {
	name := q.Name()
	return QueueHarness{
		Queue:      q,
		Add:        func(id string, data []byte, attempts int) { f.Add(name, id, data, attempts) },
		Take:       func(token string) *dispatch.HeldJob { return f.Take(name, token) },
		ExpireLock: func(id string) { f.ExpireLock(name, id) },
	}
}

// runBackground runs part's Run, if it has one, until the test ends, as the
// Worker runs a Cancels for as long as jobs may run.
func runBackground(t *testing.T, part any) {
	r, ok := part.(interface{ Run(context.Context) error })
	if !ok {
		return
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("Run = %v", err)
		}
	})
}

// FakeTestFleet is the fake Fleet under Exercise, with its hooks.
func FakeTestFleet(t *testing.T) TestFleet {
	f := NewFleet()
	return TestFleet{
		Fleet: f,
		Add: func(queue, id string, data []byte, attempts int) {
			f.Queue(queue).Add(Job{ID: id, Data: data, Attempts: attempts})
		},
		Take:       func(queue, token string) *dispatch.HeldJob { return f.Queue(queue).Take(token) },
		ExpireLock: func(queue, id string) { f.Queue(queue).ExpireLock(id) },
		Starts: func() (int, int, int) {
			d, w := f.Budget.Counts()
			return d, w, f.Budget.Month()
		},
		DollarDay:     func() (int64, int64) { return f.Dollars.Window(dispatch.WindowDay) },
		Records:       f.Mirror.Records,
		RequestCancel: f.Cancels.Cancel,
		Wait:          f.Clock.Advance,
	}
}
