package stack

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"log/slog"
	"time"

	"github.com/pidispatch/pidispatch/config"
	"github.com/pidispatch/pidispatch/cronsync"
	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/fleet"
)

// cronPart is the worker's cron side: at boot, the gated reconcile of the
// triggers file's cron entries into job schedulers on this host's queue (the
// shared queue when no name is declared); then the triggers-file watch. It
// runs as a dispatch.Background, after the consumers.
type cronPart struct {
	path     string
	declared bool
	store    cronsync.SchedulerStore
	peers    cronsync.Peers
	live     *cronsync.LiveSet
	opts     cronsync.Options
	log      *slog.Logger
}

var _ dispatch.Background = (*cronPart)(nil)

// readTriggers reads PI_TRIGGERS_FILE at boot. A file that does not parse
// refuses boot (exit 2) naming the trigger and field; a missing file starts
// the worker with cron waiting for the file (nothing installed or pruned).
func readTriggers(cfg config.Config) (cronsync.Own, error) {
	own := cronsync.ReadOwn(cfg.TriggersFile)
	if own.Err != nil && !errors.Is(own.Err, fs.ErrNotExist) {
		return own, &config.ConfigError{Var: "PI_TRIGGERS_FILE", Value: cfg.TriggersFile, Rule: own.Err.Error()}
	}
	return own, nil
}

// reconcile installs the entries this host serves, if the fleet agrees.
func (c *cronPart) reconcile(ctx context.Context, authored []cronsync.Entry) (cronsync.GateResult, error) {
	own := cronsync.Own{Configured: true, Entries: authored}
	served, unserved := cronsync.Served(authored, c.declared, cronsync.FolderExists)
	for _, u := range unserved {
		c.log.Info("schedule_unserved", "schedulerId", u.Entry.SchedulerID, "reason", u.Reason)
	}
	return cronsync.ReconcileGated(ctx, c.store, c.peers, own, served, c.opts)
}

// Run reconciles once, then watches the file until ctx ends.
func (c *cronPart) Run(ctx context.Context) error {
	own := c.live.Own()
	if own.Err != nil {
		c.log.Warn("schedules_file_missing", "reason", own.Err.Error(), "kept", true)
	} else {
		res, err := c.reconcile(ctx, own.Entries)
		switch {
		case err != nil:
			c.log.Error("schedules_install_failed", "reason", err.Error())
		case res.Refused != "":
			c.log.Warn("schedules_install_refused", "refused", res.Refused, "peers", res.Peers)
		default:
			c.log.Info("schedules_installed", "installed", res.Result.Installed, "removed", res.Result.Removed)
		}
	}
	// The watcher stamps the host itself: it gets the bare logger, not c.log.
	w, err := cronsync.NewWatcher(c.path, cronsync.WatchConfig{Logger: c.opts.Logger, Host: c.opts.Host, Live: c.live}, c.reconcile)
	if err != nil {
		return err
	}
	return w.Run(ctx)
}

// cronGate is the worker's gate for the runs job schedulers make: a run goes
// ahead only when this host's live cron set names it (cronsync.AdmitRun).
type cronGate struct {
	live  *cronsync.LiveSet
	peers cronsync.Peers
	host  string
}

var _ dispatch.CronGate = cronGate{}

func (g cronGate) AdmitCron(ctx context.Context, queueName, schedulerID string, data json.RawMessage) dispatch.CronVerdict {
	d := cronsync.AdmitRun(ctx, g.live, g.peers, queueName == fleet.SharedQueue, g.host, schedulerID, data)
	return dispatch.CronVerdict{Run: d.Run, Leave: d.Leave, Reason: d.Reason}
}

// cronOff is the cron side of a host without PI_TRIGGERS_FILE: it installs and
// prunes nothing, and says once at boot which schedulers its queue still holds,
// since none of their runs will run here. On a host queue that is a leftover
// (a warning); on the shared queue they may be a peer's (information).
type cronOff struct {
	store cronsync.SchedulerStore
	queue string
	log   *slog.Logger
}

var _ dispatch.Background = (*cronOff)(nil)

// Run lists the resident schedulers and returns.
func (c *cronOff) Run(ctx context.Context) error {
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	list, err := c.store.Schedulers(lctx)
	if err != nil || len(list) == 0 {
		return nil // nothing to say, or nothing known: the gate still refuses
	}
	ids := make([]string, len(list))
	for i, s := range list {
		ids[i] = s.ID
	}
	level, reason := slog.LevelWarn, "PI_TRIGGERS_FILE is unset: this host runs no cron job, and refuses these schedulers' runs (cron-not-agreed)"
	if c.queue == fleet.SharedQueue {
		level, reason = slog.LevelInfo, "PI_TRIGGERS_FILE is unset: this host runs no cron job; it leaves these schedulers' runs to a live peer with another cron set, or refuses them (cron-not-agreed)"
	}
	c.log.Log(ctx, level, "cron_disabled_schedulers_resident", "queue", c.queue, "schedulers", ids, "reason", reason)
	return nil
}
