package cronsync

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/pidispatch/pidispatch/queue"
)

// SchedulerStore is where schedulers live: a queue. *queue.Queue implements it.
type SchedulerStore interface {
	UpsertScheduler(ctx context.Context, id string, s queue.Scheduler) (string, error)
	RemoveScheduler(ctx context.Context, id string) (bool, error)
	Schedulers(ctx context.Context) ([]queue.SchedulerInfo, error)
}

// The template of every cron run.
const (
	// JobName is the name of every run a cron scheduler makes.
	JobName = "cron"
	// RunAttempts is 1: a scheduler's run is never retried, as in the original
	// (the next fire is the retry), so a failing paid run cannot repeat itself.
	RunAttempts = 1
	// KeepCompleted and KeepFailed are how long finished runs stay visible.
	KeepCompleted = 24 * time.Hour
	KeepFailed    = 7 * 24 * time.Hour
)

// Options says whose schedulers a call handles.
type Options struct {
	// Host is this worker's name, on every log line.
	Host string
	// TZ is the host's IANA zone: the zone of every entry without on.tz, and
	// the zone the gate fingerprints with (so two hosts in different zones
	// disagree). It must be the value the registry publishes as tz. Empty is
	// UTC.
	TZ string
	// Logger receives the events. Defaults to discarding.
	Logger *slog.Logger
}

func (o Options) logger() *slog.Logger {
	if o.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return o.Logger
}

// zone is the zone entry e's pattern is read in on a host in zone tz.
func zone(e Entry, tz string) string {
	if e.TZ != "" {
		return e.TZ
	}
	return tz
}

// Result is what a reconcile changed.
type Result struct {
	Installed  int      // schedulers upserted (every served entry)
	Removed    int      // schedulers removed because the set no longer names them
	RemovedIDs []string // their ids, in the store's order
}

// JobData is the data of every run of e's scheduler: the run object as written
// with kind "cron" (the run's kind, "local", says where the folder is; the job's
// kind says where the job came from) and "schedulerId" added:
//
//	{"kind":"cron","schedulerId":"nightly","folder":"/srv/app","flow":"fix","task":"..."}
//
// Keys are sorted, so the same entry always yields the same bytes. The worker
// (package dispatch) parses it as its job model: every run field here must be
// one it understands, or the run is refused as an invalid job. It returns nil
// when e.Run is not a JSON object.
func JobData(e Entry) json.RawMessage {
	data, err := jobData(e)
	if err != nil {
		return nil
	}
	return data
}

func jobData(e Entry) (json.RawMessage, error) {
	fields, ok := object(e.Run)
	if !ok {
		return nil, fmt.Errorf("cronsync: scheduler %q: run is not a JSON object", e.SchedulerID)
	}
	id, err := json.Marshal(e.SchedulerID)
	if err != nil {
		return nil, err
	}
	fields["kind"] = json.RawMessage(`"cron"`)
	fields["schedulerId"] = id
	// A map marshals with sorted keys; values are the compacted raw text.
	data, err := json.Marshal(fields)
	if err != nil {
		return nil, fmt.Errorf("cronsync: scheduler %q: job data: %w", e.SchedulerID, err)
	}
	return data, nil
}

// Scheduler is the job scheduler Reconcile installs for e in the host zone tz.
func Scheduler(e Entry, tz string) (queue.Scheduler, error) {
	data, err := jobData(e)
	if err != nil {
		return queue.Scheduler{}, err
	}
	return queue.Scheduler{
		Pattern:          e.Pattern,
		TZ:               zone(e, tz),
		JobName:          JobName,
		Data:             data,
		Attempts:         RunAttempts,
		RemoveOnComplete: queue.Keep{Age: KeepCompleted},
		RemoveOnFail:     queue.Keep{Age: KeepFailed},
	}, nil
}

// Reconcile makes store hold exactly the served entries' schedulers: it
// upserts every one (an upsert of an existing id redefines it), then removes
// every scheduler of the store that the set does not name, logging each
// removal as scheduler_removed_orphan. An empty set removes them all: a file
// with no cron entry means "no schedulers".
//
// The store is the host's own queue (fleet.HostQueueName) when the worker's
// name is declared, the shared queue otherwise; the caller chooses. On a fleet
// use ReconcileGated, never this directly.
//
// The first error stops the reconcile and is returned with what was done so
// far; nothing is removed until every entry is installed.
func Reconcile(ctx context.Context, store SchedulerStore, served []Entry, opts Options) (Result, error) {
	log := opts.logger()
	var res Result
	named := make(map[string]bool, len(served))
	for _, e := range served {
		s, err := Scheduler(e, opts.TZ)
		if err != nil {
			return res, err
		}
		if _, err := store.UpsertScheduler(ctx, e.SchedulerID, s); err != nil {
			return res, fmt.Errorf("cronsync: install scheduler %q: %w", e.SchedulerID, err)
		}
		named[e.SchedulerID] = true
		res.Installed++
	}
	resident, err := store.Schedulers(ctx)
	if err != nil {
		return res, fmt.Errorf("cronsync: list schedulers: %w", err)
	}
	for _, info := range resident {
		if named[info.ID] {
			continue
		}
		if queue.ValidateSchedulerID(info.ID) != nil {
			// Written by another client under an id our queue cannot address;
			// leave it rather than fail every reconcile over it.
			log.Warn("scheduler_orphan_unremovable", "host", opts.Host, "schedulerId", clipQuote(info.ID))
			continue
		}
		removed, err := store.RemoveScheduler(ctx, info.ID)
		if err != nil {
			return res, fmt.Errorf("cronsync: remove orphan scheduler %q: %w", info.ID, err)
		}
		if removed {
			res.Removed++
			res.RemovedIDs = append(res.RemovedIDs, info.ID)
			log.Info("scheduler_removed_orphan", "host", opts.Host, "schedulerId", info.ID)
		}
	}
	return res, nil
}
