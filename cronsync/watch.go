package cronsync

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"sync/atomic"
	"time"
)

// Defaults of WatchConfig.
const (
	DefaultPoll     = time.Second
	DefaultDebounce = 500 * time.Millisecond
	DefaultRetry    = 30 * time.Second
)

// racyWindow: a file whose mtime is this close to our last read may have been
// written again within the same mtime tick with the same size, so it is re-read
// (git's "racy clean" rule).
const racyWindow = 2 * time.Second

// WatchConfig tunes a Watcher. The zero value is valid.
type WatchConfig struct {
	// Poll is how often the file is stat'ed by path. Defaults to 1s.
	Poll time.Duration
	// Debounce is how long the file must stay unchanged before a reload, so a
	// burst of writes is one reload. It is checked at each poll. Defaults to
	// 500ms.
	Debounce time.Duration
	// Retry is how long after a refused or failed reload the same set is tried
	// again, until it succeeds or a valid edit replaces it. Schedulers live on each
	// host's own queue, so a host that refused while a peer was still on the
	// old file must retry once the peer has caught up: nobody else installs its
	// schedulers. Defaults to 30s; negative disables retries.
	Retry time.Duration
	// Logger receives the reload events. Defaults to discarding.
	Logger *slog.Logger
	// Host is this worker's name, on every log line.
	Host string
	// Live, when set, is updated with every valid set before onChange runs, so
	// the fingerprint published during the gate is the new one. An invalid or
	// missing file leaves it alone.
	Live *LiveSet
}

// OnChange applies a valid authored set: typically Served, then ReconcileGated
// with Own{Configured: true, Entries: authored}.
type OnChange func(ctx context.Context, authored []Entry) (GateResult, error)

// Watcher reloads the cron set when the triggers file changes.
//
// It polls rather than using inotify: every Poll it stats the file by path,
// and reads and hashes it when its size, mtime or inode changed (or its mtime
// is too recent to trust). An editor that writes a temporary file and renames
// it over the original, a Kubernetes ConfigMap's symlink swap, and a plain
// in-place write all look the same: the content hash at the path changed. A
// reload happens at the first poll at least Debounce after the last change, and
// only when the content differs from the content last acted on.
//
// Outcomes, each logged with host:
//   - schedules_reloaded {installed, removed}: onChange reconciled.
//   - schedules_reload_refused {refused, peers}: the gate withheld it; the
//     schedulers are unchanged. Never logged as a reload. Retried after Retry.
//   - schedules_reload_failed {reason}: onChange returned an error. Retried.
//   - schedules_reload_invalid {reason, kept: true}: the file does not parse,
//     cannot be read, or is missing (reason "missing"). The last good set is
//     kept: installed schedulers stay, and the live set (so the published
//     fingerprint) keeps describing them. A deleted file is treated as an
//     invalid edit, not as "cron disabled": disabling cron is a configuration
//     change (unset PI_TRIGGERS_FILE and restart), never a side effect of an
//     editor's unlink.
type Watcher struct {
	path     string
	cfg      WatchConfig
	log      *slog.Logger
	onChange OnChange
	running  atomic.Bool
}

// NewWatcher returns a Watcher of the triggers file at path. Nothing runs until
// Run.
func NewWatcher(path string, cfg WatchConfig, onChange OnChange) (*Watcher, error) {
	if path == "" {
		return nil, errors.New("cronsync: watcher needs a triggers file path")
	}
	if onChange == nil {
		return nil, errors.New("cronsync: watcher needs an onChange function")
	}
	if cfg.Poll < 0 || cfg.Debounce < 0 {
		return nil, fmt.Errorf("cronsync: negative Poll %s or Debounce %s", cfg.Poll, cfg.Debounce)
	}
	cfg.Poll = cmp.Or(cfg.Poll, DefaultPoll)
	cfg.Debounce = cmp.Or(cfg.Debounce, DefaultDebounce)
	cfg.Retry = cmp.Or(cfg.Retry, DefaultRetry)
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Watcher{path: path, cfg: cfg, log: log.With("host", cfg.Host), onChange: onChange}, nil
}

// stamp is what a stat says about the file.
type stamp struct {
	exists bool
	size   int64
	mtime  time.Time
	ino    uint64
}

// observation is the file's content as last read.
type observation struct {
	key     string // content hash, "missing", or "error:<reason>"
	data    []byte
	missing bool
	err     error
}

type watchState struct {
	stamp   stamp
	readAt  time.Time
	cur     observation
	handled string // key of the content last acted on

	retry   []Entry // a refused or failed set to apply again
	retryAt time.Time
}

// Run polls until ctx is done, then returns nil. It runs in the caller's
// goroutine and starts none. Without Live, the content at start is the
// baseline (the caller reconciled it at boot). With Live, the baseline is the
// live set: a file that differs from it at start (an edit made between the boot
// read and Run) is handled at the first poll like any edit.
func (w *Watcher) Run(ctx context.Context) error {
	if !w.running.CompareAndSwap(false, true) {
		return errors.New("cronsync: watcher is already running")
	}
	defer w.running.Store(false)

	st := &watchState{}
	w.poll(st, time.Now())
	st.handled = st.cur.key
	pending, changedAt := false, time.Time{}
	if w.differsFromLive(st.cur) {
		st.handled, pending = "", true
	}

	ticker := time.NewTicker(w.cfg.Poll)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		}
		now := time.Now()
		if w.poll(st, now) {
			pending, changedAt = true, now
		}
		switch {
		case pending && now.Sub(changedAt) >= w.cfg.Debounce:
			pending = false
			w.fire(ctx, st)
		case !pending && st.retry != nil && !now.Before(st.retryAt):
			w.apply(ctx, st, st.retry)
		}
	}
}

// poll stats the file and, when it may have changed, reads it. It reports
// whether the content differs from the previous observation.
func (w *Watcher) poll(st *watchState, now time.Time) bool {
	var s stamp
	fi, err := os.Stat(w.path)
	switch {
	case err == nil:
		s = stamp{exists: true, size: fi.Size(), mtime: fi.ModTime(), ino: fileID(fi)}
	case errors.Is(err, fs.ErrNotExist):
	default:
		return st.set(observation{key: "error:" + err.Error(), err: err})
	}
	racy := s.exists && !s.mtime.Before(st.readAt.Add(-racyWindow))
	if s == st.stamp && !racy && st.cur.key != "" {
		return false
	}
	st.stamp, st.readAt = s, now
	if !s.exists {
		return st.set(observation{key: "missing", missing: true})
	}
	data, err := readFile(w.path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return st.set(observation{key: "missing", missing: true})
	case err != nil:
		return st.set(observation{key: "error:" + err.Error(), err: err})
	}
	sum := sha256.Sum256(data)
	return st.set(observation{key: hex.EncodeToString(sum[:]), data: data})
}

// set records an observation and reports whether its content is new.
func (st *watchState) set(o observation) bool {
	changed := o.key != st.cur.key
	st.cur = o
	return changed
}

// differsFromLive reports whether the file at start is not what the live set
// describes: a valid set with another fingerprint, or a file that is invalid or
// missing (reported then as an invalid edit, the live set kept).
func (w *Watcher) differsFromLive(o observation) bool {
	if w.cfg.Live == nil {
		return false
	}
	if o.data == nil {
		return true
	}
	t, err := ParseTriggers(o.data)
	if err != nil {
		return true
	}
	fp, err := Fingerprint(t.Cron, w.cfg.Live.TZ())
	live, liveErr := w.cfg.Live.FPCron()
	return err != nil || liveErr != nil || fp != live
}

// fire acts on the current content after the debounce.
func (w *Watcher) fire(ctx context.Context, st *watchState) {
	o := st.cur
	if o.key == st.handled {
		return // back to what was last acted on (touch, delete and restore)
	}
	st.handled = o.key
	switch {
	case o.missing:
		w.log.Warn("schedules_reload_invalid", "reason", "missing", "kept", true)
		return
	case o.err != nil:
		w.log.Warn("schedules_reload_invalid", "reason", o.err.Error(), "kept", true)
		return
	}
	t, err := ParseTriggers(o.data)
	if err != nil {
		w.log.Warn("schedules_reload_invalid", "reason", err.Error(), "kept", true)
		return
	}
	if w.cfg.Live != nil {
		// Before the reconcile, never on the invalid paths: the gate publishes
		// what this host now believes.
		w.cfg.Live.Update(t.Cron)
	}
	w.apply(ctx, st, t.Cron)
}

// apply runs onChange and logs its outcome.
func (w *Watcher) apply(ctx context.Context, st *watchState, set []Entry) {
	st.retry = nil
	res, err := w.onChange(ctx, set)
	if ctx.Err() != nil {
		return // shutting down: the outcome says nothing about the file
	}
	again := func() {
		if w.cfg.Retry > 0 {
			st.retry, st.retryAt = set, time.Now().Add(w.cfg.Retry)
		}
	}
	switch {
	case err != nil:
		w.log.Error("schedules_reload_failed", "reason", err.Error())
		again()
	case res.Refused != "":
		w.log.Warn("schedules_reload_refused", "refused", res.Refused, "mine", res.Mine, "peers", res.Peers)
		if res.Refused != RefusedCronDisabled {
			again()
		}
	default:
		w.log.Info("schedules_reloaded", "installed", res.Result.Installed, "removed", res.Result.Removed)
	}
}
