package dispatch

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/pidispatch/pidispatch/capabilities"
	"github.com/pidispatch/pidispatch/queue"
	"github.com/pidispatch/pidispatch/registry"
)

// Directory reaches every queue of the fleet by name. *queue.Directory
// implements it.
type Directory interface {
	HostQueues(ctx context.Context) ([]string, error)
	Pending(ctx context.Context, queueName string, limit int) ([]*queue.Job, error)
	Move(ctx context.Context, from, to, id string) error
}

var _ Directory = (*queue.Directory)(nil)

// rehomeBatch bounds the jobs looked at per stranded queue per pass.
const rehomeBatch = 200

// rehomeLoop re-homes stranded jobs every Tuning.RehomeInterval until ctx
// ends.
func (w *Worker) rehomeLoop(ctx context.Context) {
	t := time.NewTicker(w.tune.RehomeInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if _, err := w.Rehome(ctx); err != nil && ctx.Err() == nil {
			w.log.Warn("rehome_skipped", "err", err)
		}
	}
}

// Rehome moves jobs stranded on the queue of a host whose registry row has
// expired (ARCHITECTURE section 10, item 8): a forge job that needs only
// profiles (no folder, no resume) goes to a live capable host's queue, or to
// the shared queue when the route abstains. Folder jobs stay: only their
// host has the folder. It returns how many jobs moved. It needs the registry
// (a dead host is one whose row is gone) and does nothing when it cannot be
// read: absence of evidence is not a dead host.
func (w *Worker) Rehome(ctx context.Context) (int, error) {
	if w.deps.Directory == nil || w.deps.Registry == nil {
		return 0, nil
	}
	live, err := w.deps.Registry.ReadLive(ctx)
	if err != nil {
		return 0, err
	}
	alive := map[string]bool{w.cfg.WorkerName: true}
	for _, h := range live {
		alive[h.Name] = true
	}
	names, err := w.deps.Directory.HostQueues(ctx)
	var de *queue.DiscoveryError
	if err != nil {
		if !errors.As(err, &de) {
			return 0, err
		}
		names = de.Found // act on what was seen; never claim completeness
	}
	hosts := registry.CapabilityHosts(live)
	moved := 0
	for _, name := range names {
		host, ok := strings.CutPrefix(name, "pi-jobs@")
		if !ok || alive[host] {
			continue
		}
		jobs, err := w.deps.Directory.Pending(ctx, name, rehomeBatch)
		if err != nil {
			w.log.Warn("rehome_read_failed", "queue", name, "err", err)
			continue
		}
		for _, job := range jobs {
			spec, err := ParseJob(job.Data)
			if err != nil || spec.Folder != "" || spec.Resume || job.SchedulerID != "" {
				continue
			}
			needs := spec.Needs()
			if len(needs) == 0 {
				continue
			}
			target := queue.SharedQueue
			if h := capabilities.Route(hosts, needs, job.ID, capabilities.RouteFresh); h != "" && h != host {
				target = queue.HostQueueName(h)
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
	return moved, nil
}
