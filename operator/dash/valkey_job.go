package dash

import (
	"context"
	"errors"

	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/observe/transcript"
	"github.com/pidispatch/pidispatch/operator"
	"github.com/pidispatch/pidispatch/queue"
)

var _ JobReader = (*Valkey)(nil)

// Job explains the job (operator.Explain with ValkeyConfig.Explain) and
// reads its newest transcript: from ValkeyConfig.LogsDir when this machine
// keeps it, else what the live stream still holds.
func (v *Valkey) Job(ctx context.Context, jobID string) (JobDetail, error) {
	opts := v.cfg.Explain
	if opts.LogsDir == "" {
		opts.LogsDir = v.cfg.LogsDir
	}
	ex, err := operator.Explain(ctx, v.client, jobID, opts)
	d := JobDetail{Explanation: ex}
	if err != nil && !errors.Is(err, operator.ErrJobNotFound) {
		return d, err
	}
	running := ex.State == string(queue.StateActive)
	if v.cfg.LogsDir != "" && !running {
		if all, aerr := transcript.Attempts(v.cfg.LogsDir, jobID); aerr == nil && len(all) > 0 {
			n := all[len(all)-1]
			if entries, rerr := transcript.Read(v.cfg.LogsDir, jobID, n); rerr == nil {
				d.Attempt, d.TranscriptFrom, d.Transcript = n, "logs-dir", entries
				return d, err
			}
		}
	}
	entries, lerr := v.live.Recent(ctx, jobID)
	if lerr != nil {
		return d, errors.Join(err, lerr)
	}
	for _, e := range entries {
		d.Attempt = max(d.Attempt, e.Attempt)
	}
	for _, e := range entries {
		if e.Attempt == d.Attempt && e.Kind != transcript.KindEnd {
			d.Transcript = append(d.Transcript, e)
		}
	}
	if len(d.Transcript) > 0 {
		d.TranscriptFrom = "live"
	}
	return d, err
}

// Queued lists the waiting and delayed jobs of every queue of the fleet.
func (v *Valkey) Queued(ctx context.Context, limit int) ([]QueuedList, error) {
	set, err := operator.FleetQueues(ctx, v.client)
	if err != nil {
		return nil, err
	}
	var out []QueuedList
	for _, name := range set.Names {
		q, err := queue.New(v.client, name, queue.Config{})
		if err != nil {
			return out, err
		}
		l, err := q.List(ctx, limit)
		if err != nil {
			return out, err
		}
		ql := QueuedList{Queue: name}
		for _, id := range l.Waiting {
			if fleet.CheckJobID(id) == nil {
				ql.Waiting = append(ql.Waiting, id)
			}
		}
		for _, d := range l.Delayed {
			if fleet.CheckJobID(d.ID) == nil {
				ql.Delayed = append(ql.Delayed, d)
			}
		}
		out = append(out, ql)
	}
	return out, nil
}
