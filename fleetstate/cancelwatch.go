package fleetstate

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/internal/reach"
)

var _ dispatch.JobCancels = (*CancelWatcher)(nil)

// CancelAckTTL keeps a worker's cancel ack long enough for a slow CLI.
const CancelAckTTL = 5 * time.Minute

// Defaults of CancelWatcherConfig.
const (
	DefaultCancelPoll = time.Second
	// cancelledMemory is how long Cancelled remembers a stopped job after
	// its watch ended.
	cancelledMemory = 10 * time.Minute
)

// CancelWatcherConfig tunes a CancelWatcher. The zero value is valid.
type CancelWatcherConfig struct {
	// Poll is how often the watched jobs' request keys are read, all in one
	// MGET. Defaults to 1s: an operator's cancel lands within about a
	// second, and an idle worker sends nothing.
	Poll time.Duration
	// Logger receives cancel_requested and the unreachable/restored
	// transitions, each with a host attribute. Defaults to discarding.
	Logger *slog.Logger
}

// CancelWatcher is the worker side of operator cancel: one loop (Run) reads
// the cancel requests of every job the worker runs in one MGET per Poll; a
// job handler registers its job with Watch for as long as it runs.
type CancelWatcher struct {
	client redis.UniversalClient
	worker string
	cfg    CancelWatcherConfig
	log    *slog.Logger
	health *reach.Tracker // the poll's unreachable/restored transitions

	mu        sync.Mutex
	watched   map[string]*cancelWatch
	cancelled map[string]time.Time
}

type cancelWatch struct{ cancel func() }

// NewCancelWatcher returns the watcher of the worker called worker (a valid
// worker name: it is the ack's value, read by the operator's CLI).
func NewCancelWatcher(client redis.UniversalClient, worker string, cfg CancelWatcherConfig) (*CancelWatcher, error) {
	if client == nil {
		return nil, errors.New("dispatch: NewCancelWatcher: nil client")
	}
	if err := fleet.ValidateName(worker); err != nil {
		return nil, fmt.Errorf("dispatch: NewCancelWatcher: %w", err)
	}
	if cfg.Poll <= 0 {
		cfg.Poll = DefaultCancelPoll
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	log := cfg.Logger.With("host", worker)
	return &CancelWatcher{
		client: client, worker: worker, cfg: cfg, log: log,
		health: reach.New(log, reach.Events{
			Down: "cancel_watch_unreachable", DownLevel: slog.LevelWarn, Up: "cancel_watch_restored",
		}),
		watched: map[string]*cancelWatch{}, cancelled: map[string]time.Time{},
	}, nil
}

// Watch registers a running job: when an operator's request for jobID
// arrives, cancel is called (once). The watch ends when stop is called or
// ctx ends, whichever is first; stop may be called more than once.
func (w *CancelWatcher) Watch(ctx context.Context, jobID string, cancel func()) (stop func()) {
	entry := &cancelWatch{cancel: cancel}
	w.mu.Lock()
	w.watched[jobID] = entry
	w.mu.Unlock()
	unwatch := func() {
		w.mu.Lock()
		if w.watched[jobID] == entry {
			delete(w.watched, jobID)
		}
		w.mu.Unlock()
	}
	stopAfter := context.AfterFunc(ctx, unwatch)
	return func() {
		stopAfter()
		unwatch()
	}
}

// Cancelled reports whether jobID was stopped by an operator's request, so
// its handler records reason operator-cancel. It stays true after the watch
// ends (for cancelledMemory), so the handler may ask after stop.
func (w *CancelWatcher) Cancelled(jobID string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	_, ok := w.cancelled[jobID]
	return ok
}

// Run polls until ctx ends, then returns nil. It starts no goroutine.
func (w *CancelWatcher) Run(ctx context.Context) error {
	t := time.NewTicker(w.cfg.Poll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if err := w.poll(ctx); err == nil || ctx.Err() == nil {
			// A poll cut short by ctx says nothing about Valkey.
			w.health.Observe(err)
		}
	}
}

// poll reads every watched job's request in one MGET and acts on each one
// present.
func (w *CancelWatcher) poll(ctx context.Context) error {
	now := time.Now()
	w.mu.Lock()
	for id, at := range w.cancelled {
		if now.Sub(at) > cancelledMemory {
			delete(w.cancelled, id)
		}
	}
	ids := make([]string, 0, len(w.watched))
	for id := range w.watched {
		ids = append(ids, id)
	}
	w.mu.Unlock()
	if len(ids) == 0 {
		return nil
	}
	keys := make([]string, len(ids))
	for i, id := range ids {
		keys[i] = CancelRequestKey(id)
	}
	vals, err := w.client.MGet(ctx, keys...).Result()
	if err != nil {
		return fmt.Errorf("read cancel requests: %w", err)
	}
	for i, v := range vals {
		if v == nil {
			continue
		}
		if err := w.consume(ctx, ids[i]); err != nil {
			return err
		}
	}
	return nil
}

// consume takes the request for jobID (the DEL that removes it decides which
// reader owns it, so the operator's withdrawal and this worker never both
// believe they won), stops the job and acknowledges.
func (w *CancelWatcher) consume(ctx context.Context, jobID string) error {
	w.mu.Lock()
	entry := w.watched[jobID]
	w.mu.Unlock()
	if entry == nil {
		return nil // the job ended since the read; leave the request to the operator
	}
	n, err := w.client.Del(ctx, CancelRequestKey(jobID)).Result()
	if err != nil {
		return fmt.Errorf("take cancel request %q: %w", jobID, err)
	}
	if n == 0 {
		return nil // withdrawn or expired
	}
	w.mu.Lock()
	w.cancelled[jobID] = time.Now()
	delete(w.watched, jobID)
	w.mu.Unlock()
	w.log.Info("cancel_requested", "jobId", jobID)
	entry.cancel()
	if err := w.client.Set(ctx, CancelAckKey(jobID), w.worker, CancelAckTTL).Err(); err != nil {
		// The job is stopped; the operator's CLI will say "unconfirmed".
		w.log.Warn("cancel_ack_failed", "jobId", jobID, "err", err)
	}
	return nil
}
