package dispatch

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/pidispatch/pidispatch/capabilities"
	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/jobs"
)

// Directory reaches every queue of the fleet by name.
// Package stack adapts the Valkey directory of queues to it.
type Directory interface {
	HostQueues(ctx context.Context) ([]string, error)
	Pending(ctx context.Context, queueName string, limit int) ([]*HeldJob, error)
	Move(ctx context.Context, from, to, id string) error
	Queue(name string) (JobQueue, error)
}

// rehomeBatch bounds the jobs looked at per stranded queue per pass.
const rehomeBatch = 200

// rehomeLoop tends the queues of dead hosts every Tuning.RehomeInterval
// until ctx ends.
func (w *Worker) rehomeLoop(ctx context.Context) {
	t := time.NewTicker(w.tune.RehomeInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		w.tendDeadHosts(ctx)
	}
}

// tendDeadHosts does for the queues of hosts whose registry row has expired
// what their hosts no longer do: it re-homes their stranded waiting jobs and
// runs the stalled check on them. A host that hangs without dying stops
// beating and checking its own queue alike, so without this its running
// jobs would stay active, unrecorded, for as long as it hangs.
func (w *Worker) tendDeadHosts(ctx context.Context) {
	dead, err := w.deadHosts(ctx)
	if err != nil {
		if ctx.Err() == nil {
			w.log.Warn("rehome_skipped", "err", err)
		}
		return
	}
	w.rehome(ctx, dead)
	for _, name := range dead.queues {
		q, err := w.deps.Directory.Queue(name)
		if err != nil {
			continue // a discovered name is valid; nothing to check otherwise
		}
		w.checkQueueStalled(ctx, q)
	}
}

// deadQueues are the host queues of hosts without a registry row, with the
// rows that were live when they were read.
type deadQueues struct {
	queues []string
	live   []capabilities.Host
}

// deadHosts reads the registry and finds the host queues whose host has no
// row. It needs the registry (a dead host is one whose row is gone) and
// finds nothing when it has none or cannot read it: absence of evidence is
// not a dead host.
func (w *Worker) deadHosts(ctx context.Context) (deadQueues, error) {
	if w.deps.Directory == nil || w.deps.Registry == nil {
		return deadQueues{}, nil
	}
	live, err := w.deps.Registry.ReadLive(ctx)
	if err != nil {
		return deadQueues{}, err
	}
	alive := map[string]bool{w.cfg.WorkerName: true}
	for _, h := range live {
		alive[h.Name] = true
	}
	names, err := w.deps.Directory.HostQueues(ctx)
	var de *DiscoveryError
	if err != nil {
		if !errors.As(err, &de) {
			return deadQueues{}, err
		}
		names = de.Found // act on what was seen; never claim completeness
	}
	dead := deadQueues{live: live}
	for _, name := range names {
		if host, ok := strings.CutPrefix(name, "pi-jobs@"); ok && !alive[host] {
			dead.queues = append(dead.queues, name)
		}
	}
	return dead, nil
}

// Rehome moves jobs stranded on the queue of a host whose registry row has
// expired (docs/fleet.md): a forge job that needs only
// profiles (no folder, no resume) goes to a live capable host's queue, or to
// the shared queue when the route abstains. Folder jobs stay: only their
// host has the folder. It returns how many jobs moved. It needs the registry
// and does nothing when it cannot be read (see deadHosts).
func (w *Worker) Rehome(ctx context.Context) (int, error) {
	dead, err := w.deadHosts(ctx)
	if err != nil {
		return 0, err
	}
	return w.rehome(ctx, dead), nil
}

// rehome moves the stranded jobs of dead's queues (see Rehome).
func (w *Worker) rehome(ctx context.Context, dead deadQueues) int {
	hosts := dead.live
	moved := 0
	for _, name := range dead.queues {
		host := strings.TrimPrefix(name, "pi-jobs@")
		pending, err := w.deps.Directory.Pending(ctx, name, rehomeBatch)
		if err != nil {
			w.log.Warn("rehome_read_failed", "queue", name, "err", err)
			continue
		}
		for _, job := range pending {
			spec, err := jobs.ParseJob(job.Data)
			if err != nil || spec.Folder != "" || spec.Resume || job.SchedulerID != "" {
				continue
			}
			needs := spec.Needs()
			if len(needs) == 0 {
				continue
			}
			target := fleet.SharedQueue
			if h := capabilities.Route(hosts, needs, job.ID, capabilities.RouteFresh); h != "" && h != host {
				target = fleet.HostQueueName(h)
			}
			if err := w.deps.Directory.Move(ctx, name, target, job.ID); err != nil {
				w.log.Warn("job_rehome_failed", "jobId", job.ID, "from", name, "to", target, "err", err)
				continue
			}
			moved++
			w.log.Info("job_rehomed", "jobId", job.ID, "from", name, "to", target,
				"needs", slices.Clone(needs), "reason", "host-row-expired")
		}
	}
	return moved
}
