package dash

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/pidispatch/pidispatch/fleetstate"
	"github.com/pidispatch/pidispatch/jobs"
	"github.com/pidispatch/pidispatch/operator"
	"github.com/pidispatch/pidispatch/registry"
)

var (
	_ RecordReader   = (*Valkey)(nil)
	_ CapacityReader = (*Valkey)(nil)
)

// Records reads, as Runs does, every record that ended after since, up to
// the run mirror's read limit; the note says when some were left out.
func (v *Valkey) Records(ctx context.Context, since time.Time) ([]jobs.Record, string, error) {
	recs, tot, err := operator.Runs(ctx, v.client, operator.RunsFilter{Since: since,
		Limit: fleetstate.MaxMirrorReadLimit, LogsDir: v.cfg.LogsDir})
	if errors.Is(err, operator.ErrNoRunSource) {
		return nil, okOrOff(tot.Degraded), nil
	}
	if err != nil {
		return nil, "", err
	}
	note := ""
	if d := okOrOff(tot.Degraded); d != "" {
		note = "run mirror " + d
	}
	if tot.Runs > tot.Shown {
		note = fmt.Sprintf("the newest %d of %d runs are charted", tot.Shown, tot.Runs)
	}
	return recs, note, nil
}

// Capacity is operator.Capacity over the fleet, with this host's records
// merged. With a fleet key, a registry row it did not sign adds no slots.
func (v *Valkey) Capacity(ctx context.Context) (operator.CapacityReport, error) {
	opts := operator.CapacityOptions{LogsDir: v.cfg.LogsDir}
	if v.cfg.FleetKey.IsSet() {
		opts.Trust = func(hosts []registry.Host) []registry.Host { return registry.Trust(hosts, v.cfg.FleetKey, nil) }
	}
	return operator.Capacity(ctx, v.client, opts)
}
