package dispatch

import (
	"context"
	"log/slog"
	"time"
)

// Fleet is the driver of the fleet's stores: everything a Worker keeps in
// state shared by the hosts (queues, budgets, holds, leases, the registry,
// the run mirror, cancel requests, rate limits) opened for one host at a
// time. The stack's driver keeps them in Valkey (stack.NewFleet); the fakes'
// driver keeps them in memory (dispatchtest.NewFleet), every host it opens
// sharing one state, so several Workers on it make one fleet. Both pass
// dispatchtest.Exercise.
type Fleet interface {
	// Open returns the stores of host. The Worker calls each store's own
	// start and stop methods (Registry.Start, RunMirror.Close); the driver
	// keeps what it opened until it is closed itself.
	Open(ctx context.Context, host FleetHost) (Stores, error)
}

// Stores are the Worker's collaborators that keep fleet state: one Fleet
// driver opens them all, and Deps embeds them.
type Stores struct {
	// Queues are the queues this host drains: the shared queue first, then
	// the host queue when the name is declared. The stalled-job check runs on
	// each.
	Queues []JobQueue
	// Source takes jobs from Queues.
	Source   JobSource
	Budget   Budgeter
	Registry Registry
	Leases   Leaser
	Mirror   RunMirror
	// Directory, when set with Registry, lets the worker re-home jobs
	// stranded on the queue of a host whose row expired.
	Directory Directory
	// Holds keeps the state of jobs waiting on their waitFor conditions. Without
	// it such a job cannot be held safely and is deferred, never run; so
	// NewWorker refuses a nil Holds when Config.WaitProfiles declares any.
	Holds HoldStore
	// Finder looks a job up on every queue, to tell whether the older holder
	// of a dedup id is still live when a newer delivery takes its wait over.
	// Without it the older hold is always marked superseded.
	Finder Finder
	// Cancels, when set, stops a running job on an operator's request
	// (pi-dispatch cancel); the job is recorded operator-cancel. A Cancels
	// that also has Run(ctx) is run for as long as jobs may run.
	Cancels JobCancels
	// Dollars holds each job's dollar cap against the fleet-wide dollar
	// windows. NewWorker refuses a nil Dollars when Config.Spend sets a
	// dollar window or a scope row has dollar limits.
	Dollars DollarBudget
	// RateLimits is the fleet's record of rate-limited providers: the
	// gateway writes it, the rate-limit gate reads it. Nil: no suspension is
	// shared, each call meets the provider's limit itself.
	RateLimits RateLimits
	// Threads keeps one job per forge thread (an issue or a pull request)
	// running at a time, fleet-wide, in the order the jobs were enqueued.
	// Nil: a thread's jobs are held to one at a time on this host only.
	Threads Threads
}

// FleetHost is what a Fleet driver needs to know of the host whose stores it
// opens.
type FleetHost struct {
	// Name is the host's name (Config.WorkerName).
	Name string
	// Declared: the name was chosen, so the host drains a queue of its own
	// and takes fleet leases (Config.WorkerNameDeclared).
	Declared bool
	// Machine identifies the machine in the registry's name claim, so a
	// restart on the same machine takes over its crashed predecessor's
	// name. Empty: this machine's name.
	Machine string
	// Starts are the container-start caps of the fleet's windows.
	Starts StartCaps
	// Dollars are the dollar caps of the fleet's windows, in micro-dollars.
	Dollars DollarCaps
	// LockTTL is the lock a taken job holds (Tuning.LockTTL). Zero: the
	// driver's default.
	LockTTL time.Duration
	// Row is what the host publishes in its registry row.
	Row HostRow
	// Logger receives the stores' events, each with a host attribute.
	// Nil: discarded.
	Logger *slog.Logger
}

// StartCaps are the global caps on container starts per UTC day, ISO week
// and UTC month (0 week or month: no such window; a negative cap refuses
// everything), and the soft hold's share of each (0: none).
type StartCaps struct {
	Daily, Weekly, Monthly, SoftHoldPct int
}

// DollarCaps are the global dollar caps per UTC day, ISO week and UTC month,
// in micro-dollars (0: no such window).
type DollarCaps struct {
	Daily, Weekly, Monthly int64
}

// HostRow is the host's row in the fleet registry. FPCron and CronCount are
// read at every beat, so a reloaded cron set is published; nil publishes
// nothing.
type HostRow struct {
	Version     string
	Image       string
	ImageDigest string
	Concurrency int
	Caps        string
	TZ          string
	FPCron      func() (string, error)
	CronCount   func() (int, error)
	// OnBeat, when set, is told the outcome of every beat.
	OnBeat func(err error)
}
