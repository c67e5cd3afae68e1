package cronsync_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"github.com/redis/go-redis/v9"

	"github.com/pidispatch/pidispatch/cronsync"
	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/queue"
	"github.com/pidispatch/pidispatch/registry"
)

// A triggers file is validated whole: every problem names its trigger and
// field, and webhook triggers are kept for the front-ends.
func ExampleParseTriggers() {
	good := []byte(`{"triggers": [
	  {"on": {"type": "cron", "id": "nightly", "pattern": "0 3 * * *", "tz": "Europe/Amsterdam"},
	   "run": {"kind": "local", "folder": "/srv/app", "flow": "fix", "task": "Fix the failing tests"}},
	  {"on": {"type": "label", "any": ["pi"]}, "run": {"kind": "github", "flow": "fix"}}
	]}`)
	t, err := cronsync.ParseTriggers(good)
	if err != nil {
		panic(err)
	}
	e := t.Cron[0]
	fmt.Println(e.SchedulerID, e.Pattern, e.TZ, e.Local.Folder, len(t.Others))
	fmt.Println(string(cronsync.JobData(e)))

	bad := []byte(`{"triggers": [
	  {"on": {"type": "cron", "id": "nightly", "pattern": "61 * * * *"},
	   "run": {"kind": "local", "folder": "srv/app", "flow": "fix", "task": "t"}},
	  {"on": {"type": "cron", "id": "nightly", "patern": "0 4 * * *"},
	   "run": {"kind": "local", "folder": "/srv/app", "flow": "fix", "task": "t"}}
	]}`)
	_, err = cronsync.ParseTriggers(bad)
	fmt.Println(err)
	// Output:
	// nightly 0 3 * * * Europe/Amsterdam /srv/app 1
	// {"flow":"fix","folder":"/srv/app","kind":"cron","schedulerId":"nightly","task":"Fix the failing tests"}
	// triggers[0] (id "nightly"): on.pattern: "61 * * * *" is not a valid cron pattern
	// triggers[0] (id "nightly"): run.folder: must be an absolute path
	// triggers[1] (id "nightly"): on.patern: unknown key (did you mean "pattern"?)
	// triggers[1] (id "nightly"): on.pattern: required
	// triggers[1] (id "nightly"): on.id: duplicate of triggers[0]
}

// A named worker reconciles its own queue at boot through the agreement gate,
// then follows edits of the file. The registry publishes the live set's
// fingerprint at every beat.
func ExampleReconcileGated() {
	ctx := context.Background()
	const name, tz, path = "mini1", "Europe/Amsterdam", "/etc/pi/triggers.json"
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer client.Close()
	logger := slog.New(slog.NewJSONHandler(os.Stderr, nil))

	own := cronsync.ReadOwn(path)
	live := cronsync.NewLiveSet(own, tz)
	reg, err := registry.New(client, name, registry.Facts{
		TZ: registry.Value(tz), FPCron: live.FPCron, CronCount: live.CronCount,
	}, registry.Config{Logger: logger})
	if err != nil {
		panic(err)
	}
	store, err := queue.New(client, fleet.HostQueueName(name), queue.Config{})
	if err != nil {
		panic(err)
	}
	opts := cronsync.Options{Host: name, TZ: tz, Logger: logger}
	apply := func(ctx context.Context, authored []cronsync.Entry) (cronsync.GateResult, error) {
		served, unserved := cronsync.Served(authored, true, nil)
		for _, u := range unserved {
			logger.Info("schedule_unserved", "host", name, "schedulerId", u.Entry.SchedulerID, "reason", u.Reason)
		}
		return cronsync.ReconcileGated(ctx, store, reg, cronsync.Own{Configured: true, Entries: authored}, served, opts)
	}

	if own.Err != nil {
		panic(own.Err) // boot refuses an unreadable triggers file (exit 2)
	}
	gr, err := apply(ctx, own.Entries)
	switch {
	case err != nil:
		logger.Error("schedules_install_failed", "host", name, "reason", err.Error())
	case gr.Refused != "":
		logger.Warn("schedules_refused", "host", name, "refused", gr.Refused) // the worker still starts
	default:
		logger.Info("schedules_installed", "host", name, "installed", gr.Result.Installed, "removed", gr.Result.Removed)
	}

	w, err := cronsync.NewWatcher(path, cronsync.WatchConfig{Logger: logger, Host: name, Live: live}, apply)
	if err != nil {
		panic(err)
	}
	_ = w.Run(ctx) // blocks until ctx is done
}
