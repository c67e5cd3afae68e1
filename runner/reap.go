package runner

import (
	"context"
	"errors"
	"fmt"

	"github.com/pidispatch/pidispatch/dispatch/container"
)

// Reap force-removes every container, in any state, labelled as owned by
// worker (LabelWorker), for the worker's boot sweep, and reports the exit
// codes of those that had exited. Containers are matched
// by the label only, never by name, so other owners' containers and
// unlabelled ones named like ours are left alone. The error is non-nil only
// when the containers could not be listed (Enumerated false); failures to
// remove single containers are in the report.
func (d *Docker) Reap(ctx context.Context, worker string) (ReapReport, error) {
	return d.reap(ctx, worker, false)
}

// ReapRunning is Reap that leaves exited containers in place (still listed
// in Exited, not counted in Found): a worker records their jobs' outcomes
// first, then removes them with RemoveContainer, so a boot killed in between
// still finds the exit codes.
func (d *Docker) ReapRunning(ctx context.Context, worker string) (ReapReport, error) {
	return d.reap(ctx, worker, true)
}

func (d *Docker) reap(ctx context.Context, worker string, keepExited bool) (ReapReport, error) {
	var rep ReapReport
	if err := checkText("worker name", worker, 256); err != nil {
		return rep, fmt.Errorf("%w: %v", ErrInvalidSpec, err)
	}
	found, err := d.eng.list(ctx, LabelWorker, worker)
	if err != nil {
		return rep, fmt.Errorf("list containers of worker %s: %w", worker, err)
	}
	rep.Enumerated = true
	for _, c := range found {
		if c.Labels[LabelWorker] != worker {
			continue // an engine that filters loosely must not widen the sweep
		}
		if !c.Running {
			if info, err := d.eng.inspect(ctx, c.ID); err == nil && info.Exited {
				rep.Exited = append(rep.Exited, ExitedJob{JobID: c.Labels[LabelJob], Container: c.Name, ExitCode: info.ExitCode,
					OOMKilled: info.OOMKilled, Stdout: d.exitedStdout(ctx, worker, c)})
				if keepExited {
					continue
				}
			}
		}
		rep.Found++
		if err := d.eng.remove(ctx, c.ID); err != nil && !errors.Is(err, errNotFound) {
			rep.Errors = append(rep.Errors, fmt.Errorf("remove container %s (%s): %w", c.Name, c.ID, err))
			continue
		}
		rep.Removed++
		d.log.Info("reaped_container", "host", worker, "container", c.Name, "id", c.ID, "job", c.Labels[LabelJob], "was_running", c.Running)
	}
	return rep, nil
}

// exitedStdout is the end of an exited container's stdout from the engine's
// log; nil, logged, when the engine has none (a logging driver that keeps
// nothing readable) or cannot read it.
func (d *Docker) exitedStdout(ctx context.Context, worker string, c containerInfo) []byte {
	out, err := d.eng.stdoutTail(ctx, c.ID, container.TelemetryScanBytes)
	if err != nil {
		d.log.Warn("reap_log_unreadable", "host", worker, "container", c.Name, "job", c.Labels[LabelJob], "err", err)
		return nil
	}
	return out
}
