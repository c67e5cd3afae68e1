package operator

import (
	"context"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/fleetstate"
	"github.com/pidispatch/pidispatch/queue"
	"github.com/pidispatch/pidispatch/registry"
)

// queues is doctor's view of the work itself: a paused fleet (or some paused
// queues), and jobs ready to run on a queue no live worker drains, the two
// ways a healthy host still runs nothing.
func (d *doctor) queues(ctx context.Context, valkeyUp bool) {
	if !valkeyUp || d.deps.Valkey == nil {
		return
	}
	const fix = "check Valkey and run doctor again"
	qctx, cancel := d.bounded(ctx)
	defer cancel()
	set, err := FleetQueues(qctx, d.deps.Valkey)
	if err != nil {
		d.warn("queues", fix, "queues: not read: %v", err)
		return
	}
	names := set.Names
	if len(names) == 0 {
		names = []string{fleet.SharedQueue}
	}
	var paused []string
	ready := map[string]int64{}
	for _, name := range names {
		q, err := queue.New(d.deps.Valkey, name, queue.Config{})
		if err != nil {
			continue
		}
		isPaused, err := q.IsPaused(qctx)
		if err != nil {
			d.warn("queues", fix, "queues: %s not read: %v", name, err)
			return
		}
		c, err := q.Counts(qctx)
		if err != nil {
			d.warn("queues", fix, "queues: %s not read: %v", name, err)
			return
		}
		if isPaused {
			paused = append(paused, name)
		}
		ready[name] = c.Waiting + c.Paused + c.Prioritized
	}
	d.pausedQueues(paused, len(names))
	hosts, err := registry.ReadLive(qctx, d.deps.Valkey, d.deps.Timeout)
	if err != nil {
		return // the fleet check names an unreadable registry
	}
	d.unserved(names, ready, hosts)
}

// pausedQueues warns about a paused fleet, or part of one.
func (d *doctor) pausedQueues(paused []string, of int) {
	switch {
	case len(paused) == 0:
	case len(paused) == of:
		d.warn("paused", "run `pi-dispatch resume` when jobs should run again",
			"fleet paused (%d %s): no job starts until a resume; new jobs still enqueue", of, plural(of, "queue", "queues"))
	default:
		d.warn("paused", "run `pi-dispatch resume` (or `pause`) so every queue agrees",
			"fleet partly paused: %s paused, %d of %d queues", strings.Join(paused, ", "), len(paused), of)
	}
}

// unserved warns about ready jobs that no live worker takes: on the shared
// queue when no worker is live at all, on a host's queue when that host is
// not live.
func (d *doctor) unserved(names []string, ready map[string]int64, hosts []registry.Host) {
	live := map[string]bool{}
	for _, h := range hosts {
		live[h.Name] = true
	}
	for _, name := range names {
		n := ready[name]
		if n == 0 {
			continue
		}
		worker, isHost := strings.CutPrefix(name, "pi-jobs@")
		switch {
		case !isHost && len(live) == 0:
			d.warn("unserved", "start a worker (go run ./cmd/worker, or its systemd unit); the jobs wait until one is live",
				"%d %s waiting on %s and no worker is live: nothing takes them", n, plural(int(n), "job", "jobs"), name)
		case isHost && !live[worker]:
			d.warn("unserved", fmt.Sprintf("start the worker of %s (PI_WORKER_NAME=%s); only it takes these jobs", worker, worker),
				"%d %s waiting on %s and its worker %s is not live: nothing takes them", n, plural(int(n), "job", "jobs"), name, worker)
		}
	}
}

// PauseHold says why a job just queued on the queue name will not start
// until a resume: the fleet is paused, or that queue alone is. It is "" when
// the queue is not paused.
func PauseHold(ctx context.Context, client redis.UniversalClient, name string) (string, error) {
	q, err := queue.New(client, name, queue.Config{})
	if err != nil {
		return "", err
	}
	paused, err := q.IsPaused(ctx)
	if err != nil || !paused {
		return "", err
	}
	flag, err := client.Exists(ctx, fleetstate.PausedKey).Result()
	if err != nil {
		return "", err
	}
	if flag == 1 {
		return "the fleet is paused", nil
	}
	return "its queue " + name + " is paused", nil
}
