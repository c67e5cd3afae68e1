package operator

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/fleetstate"
	"github.com/pidispatch/pidispatch/jobs"
	"github.com/pidispatch/pidispatch/queue"
	"github.com/pidispatch/pidispatch/registry"
)

// DefaultCapacityWindow is the span whose finished runs give the
// completion rate a drain time is estimated at.
const DefaultCapacityWindow = time.Hour

// maxCapacityActive bounds the active jobs read per queue to tell which
// host holds them; past it, jobs still count as busy, unattributed.
const maxCapacityActive = 1000

// CapacityOptions tunes Capacity. The zero value reads the last hour.
type CapacityOptions struct {
	// Now is the instant the report is for; zero is time.Now. Tests set it.
	Now time.Time
	// Window is how far back finished runs count toward the completion
	// rate (DefaultCapacityWindow when 0).
	Window time.Duration
	// LogsDir is this host's records folder, merged with the run mirror as
	// Runs does; "" reads the mirror alone.
	LogsDir string
	// Trust, when set, marks the registry rows it does not trust (as
	// registry.Trust does); a row marked Untrusted is listed but adds no
	// slots to the fleet, since routing sends it nothing.
	Trust func([]registry.Host) []registry.Host
}

// HostCapacity is one live host's share of the fleet.
type HostCapacity struct {
	Name string `json:"name"`
	// Slots is the row's concurrency: how many jobs it runs at once (0 when
	// the row does not say).
	Slots int `json:"slots"`
	// Busy counts the jobs it holds now, on any queue; BusyShare is Busy
	// over Slots (0 without slots).
	Busy      int     `json:"busy"`
	BusyShare float64 `json:"busyShare"`
	// Waiting counts the jobs ready on its own queue.
	Waiting int64 `json:"waiting"`
	// Finished counts its runs that ended in the window; PerHour is that
	// rate per hour.
	Finished int     `json:"finished"`
	PerHour  float64 `json:"perHour"`
	// DrainMs is how long its own queue's waiting jobs take at PerHour:
	// 0 with nothing waiting, null when something waits and none of its
	// runs ended in the window (no rate to estimate from).
	DrainMs   *int64 `json:"drainMs"`
	Untrusted bool   `json:"untrusted,omitempty"`
}

// QueueCapacity is one queue's backlog.
type QueueCapacity struct {
	Queue string `json:"queue"`
	// Waiting counts ready jobs (waiting, paused list and prioritized);
	// Delayed those not due yet; Active those a worker holds.
	Waiting int64 `json:"waiting"`
	Delayed int64 `json:"delayed"`
	Active  int64 `json:"active"`
	Paused  bool  `json:"paused"`
}

// CapacityReport is the fleet's capacity: what it can run, what it runs,
// what waits, and how long the wait lasts at the recent rate.
type CapacityReport struct {
	At       time.Time       `json:"at"`
	WindowMs int64           `json:"windowMs"`
	Hosts    []HostCapacity  `json:"hosts"`
	Queues   []QueueCapacity `json:"queues"`
	// Slots sums the trusted hosts' slots; Busy every job held now
	// (Unattributed of them by no live host); BusyShare is Busy over Slots.
	Slots        int     `json:"slots"`
	Busy         int     `json:"busy"`
	Unattributed int     `json:"unattributed"`
	BusyShare    float64 `json:"busyShare"`
	// Waiting sums every queue's ready jobs, Delayed their delayed ones.
	Waiting int64 `json:"waiting"`
	Delayed int64 `json:"delayed"`
	// Finished counts the fleet's runs (attempts) that ended in the window,
	// PerHour their rate, DrainMs the fleet's Waiting at that rate (null
	// when jobs wait and no run ended in the window).
	Finished int     `json:"finished"`
	PerHour  float64 `json:"perHour"`
	DrainMs  *int64  `json:"drainMs"`
	// Runs names where the records were read and their state (Totals.Source,
	// and the mirror's degraded state when there is one).
	Runs string `json:"runs"`
}

// ActiveJob is a job a worker holds: its queue and the worker that took it
// ("" when the job does not name a valid worker).
type ActiveJob struct {
	Queue string
	Host  string
}

// CapacityInput is what Capacity reads, for ComputeCapacity.
type CapacityInput struct {
	Hosts  []registry.Host
	Queues []QueueCapacity
	Active []ActiveJob
	// Records are the runs that ended in the window, and Now its end.
	Records []jobs.Record
	Now     time.Time
	Window  time.Duration
}

// Capacity reads the registry's live rows, each queue's counts and active
// jobs, and the runs that ended in the window, and computes the report.
// Every read is bounded: the registry and queue set by FleetReadTimeout,
// active jobs by maxCapacityActive per queue, records by the run mirror's
// read limit.
func Capacity(ctx context.Context, client redis.UniversalClient, opts CapacityOptions) (CapacityReport, error) {
	if client == nil {
		return CapacityReport{}, errors.New("capacity: nil client")
	}
	now := opts.Now
	if now.IsZero() {
		now = time.Now()
	}
	window := opts.Window
	if window <= 0 {
		window = DefaultCapacityWindow
	}
	hosts, err := Hosts(ctx, client)
	if err != nil {
		return CapacityReport{}, err
	}
	if opts.Trust != nil {
		hosts = opts.Trust(hosts)
	}
	set, err := FleetQueues(ctx, client)
	if err != nil {
		return CapacityReport{}, err
	}
	in := CapacityInput{Hosts: hosts, Now: now, Window: window}
	for _, name := range set.Names {
		qc, active, err := readQueueCapacity(ctx, client, name)
		if err != nil {
			return CapacityReport{}, err
		}
		in.Queues = append(in.Queues, qc)
		in.Active = append(in.Active, active...)
	}
	recs, tot, err := Runs(ctx, client, RunsFilter{Since: now.Add(-window), Until: now,
		Limit: fleetstate.MaxMirrorReadLimit, LogsDir: opts.LogsDir})
	source := tot.Source
	switch {
	case errors.Is(err, ErrNoRunSource):
		source = "none"
	case err != nil:
		return CapacityReport{}, err
	}
	in.Records = recs
	rep := ComputeCapacity(in)
	rep.Runs = source
	if tot.Degraded != "" {
		rep.Runs += " (" + tot.Degraded + ")"
	}
	return rep, nil
}

// readQueueCapacity reads one queue's counts, pause state and the workers
// holding its active jobs.
func readQueueCapacity(ctx context.Context, client redis.UniversalClient, name string) (QueueCapacity, []ActiveJob, error) {
	q, err := queue.New(client, name, queue.Config{})
	if err != nil {
		return QueueCapacity{}, nil, fmt.Errorf("capacity: %w", err)
	}
	c, err := q.Counts(ctx)
	if err != nil {
		return QueueCapacity{}, nil, fmt.Errorf("capacity: %w", err)
	}
	paused, err := q.IsPaused(ctx)
	if err != nil {
		return QueueCapacity{}, nil, fmt.Errorf("capacity: %w", err)
	}
	qc := QueueCapacity{Queue: name, Waiting: c.Waiting + c.Paused + c.Prioritized,
		Delayed: c.Delayed, Active: c.Active, Paused: paused}
	var active []ActiveJob
	if c.Active > 0 {
		held, err := q.Active(ctx, int(min(c.Active, maxCapacityActive)))
		if err != nil {
			return QueueCapacity{}, nil, fmt.Errorf("capacity: %w", err)
		}
		for _, j := range held {
			a := ActiveJob{Queue: name}
			if fleet.ValidateName(j.ProcessedBy) == nil {
				a.Host = j.ProcessedBy
			}
			active = append(active, a)
		}
		// Jobs past the bound, or that finished between the two reads,
		// still count by the queue's own count.
		for range int(c.Active) - len(held) {
			active = append(active, ActiveJob{Queue: name})
		}
	}
	return qc, active, nil
}

// ComputeCapacity is Capacity's arithmetic over what it read.
func ComputeCapacity(in CapacityInput) CapacityReport {
	window := in.Window
	if window <= 0 {
		window = DefaultCapacityWindow
	}
	rep := CapacityReport{At: in.Now.UTC(), WindowMs: window.Milliseconds(),
		Hosts: []HostCapacity{}, Queues: append([]QueueCapacity{}, in.Queues...)}
	busy := map[string]int{}
	for _, a := range in.Active {
		busy[a.Host]++
		rep.Busy++
	}
	finished := map[string]int{}
	since := in.Now.Add(-window)
	for _, r := range in.Records {
		if r.EndedAt.After(since) && !r.EndedAt.After(in.Now) {
			finished[r.Host]++
			rep.Finished++
		}
	}
	waiting := map[string]int64{}
	for _, q := range in.Queues {
		waiting[q.Queue] += q.Waiting
		rep.Waiting += q.Waiting
		rep.Delayed += q.Delayed
	}
	live := map[string]bool{}
	for _, h := range in.Hosts {
		live[h.Name] = true
		hc := HostCapacity{Name: h.Name, Slots: max(h.Concurrency, 0), Busy: busy[h.Name],
			Waiting: waiting[fleet.HostQueueName(h.Name)], Finished: finished[h.Name], Untrusted: h.Untrusted}
		hc.BusyShare = busyShare(hc.Busy, hc.Slots)
		hc.PerHour = perHour(hc.Finished, window)
		hc.DrainMs = drain(hc.Waiting, hc.Finished, window)
		if !h.Untrusted {
			rep.Slots += hc.Slots
		}
		rep.Hosts = append(rep.Hosts, hc)
	}
	slices.SortFunc(rep.Hosts, func(a, b HostCapacity) int { return cmp.Compare(a.Name, b.Name) })
	for host, n := range busy {
		if !live[host] {
			rep.Unattributed += n
		}
	}
	rep.BusyShare = busyShare(rep.Busy, rep.Slots)
	rep.PerHour = perHour(rep.Finished, window)
	rep.DrainMs = drain(rep.Waiting, rep.Finished, window)
	return rep
}

func busyShare(n, of int) float64 {
	if of <= 0 {
		return 0
	}
	return float64(n) / float64(of)
}

func perHour(n int, window time.Duration) float64 {
	return float64(n) * float64(time.Hour) / float64(window)
}

// drain is how long waiting jobs take at finished runs per window: 0 with
// nothing waiting, nil with no rate.
func drain(waiting int64, finished int, window time.Duration) *int64 {
	var ms int64
	switch {
	case waiting <= 0:
	case finished == 0:
		return nil
	default:
		ms = waiting * window.Milliseconds() / int64(finished)
	}
	return &ms
}
