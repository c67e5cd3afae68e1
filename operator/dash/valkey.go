package dash

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pidispatch/pidispatch/config"
	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/fleetstate"
	"github.com/pidispatch/pidispatch/jobs"
	"github.com/pidispatch/pidispatch/observe/transcript"
	"github.com/pidispatch/pidispatch/operator"
	"github.com/pidispatch/pidispatch/queue"
	"github.com/pidispatch/pidispatch/registry"
)

// ValkeyConfig tunes a Valkey source.
type ValkeyConfig struct {
	// DailyCap and WeeklyCap are the caps Starts reports (PI_DAILY_CAP,
	// PI_WEEKLY_CAP). DailyCap 0 is the default cap (25); WeeklyCap 0 is none.
	DailyCap, WeeklyCap int
	// Host names the canceller in the record of a job Cancel removes; "" is
	// this machine's name (operator.CancelOptions.Host).
	Host string
	// CancelWait is how long Cancel waits for a running job's worker
	// (operator.DefaultCancelWait when 0).
	CancelWait time.Duration
	// LogsDir is this host's records folder (PI_LOGS_DIR): its records the
	// mirror lacks are shown too, and counted in the runs note, and the job
	// page reads stored transcripts and records there (valkey_job.go). ""
	// reads the mirror alone.
	LogsDir string
	// Explain is the host's view the job page explains a job with.
	Explain operator.ExplainOptions
	// FleetKey is the fleet key (PI_FLEET_KEY_FILE): set, the job page shows
	// only live transcript entries it signed, so no Valkey writer without
	// it can put lines there.
	FleetKey fleet.Key
	// Logger receives transcript_live_unsigned when the job page drops such
	// an entry. Default: discarded.
	Logger *slog.Logger
}

// Valkey is the Source and Actions over a fleet's Valkey. It reads through
// the operator, registry, queue and fleetstate readers, and writes only in
// its Actions. It does not own the client.
type Valkey struct {
	client redis.UniversalClient
	cfg    ValkeyConfig
	mirror *fleetstate.Mirror
	budget *fleetstate.Budget
	live   *transcript.Live
}

var (
	_ Source  = (*Valkey)(nil)
	_ Actions = (*Valkey)(nil)
)

// NewValkey returns the dashboard's source over client.
func NewValkey(client redis.UniversalClient, cfg ValkeyConfig) (*Valkey, error) {
	if client == nil {
		return nil, errors.New("dash: nil client")
	}
	if cfg.DailyCap == 0 {
		cfg.DailyCap = config.DefaultDailyCap // as fleetstate.Budget counts it
	}
	return &Valkey{
		client: client, cfg: cfg,
		mirror: fleetstate.NewMirror(client, fleetstate.MirrorConfig{}),
		budget: fleetstate.NewBudget(client, fleetstate.BudgetConfig{DailyCap: cfg.DailyCap, WeeklyCap: cfg.WeeklyCap}),
		live:   transcript.NewLiveWith(client, transcript.LiveConfig{Key: cfg.FleetKey, Logger: cfg.Logger}),
	}, nil
}

// Close waits, until ctx ends, for Valkey calls of the mirror and budget
// readers that overran their bound. It does not close the client.
func (v *Valkey) Close(ctx context.Context) error {
	return errors.Join(v.mirror.Close(ctx), v.budget.Close(ctx))
}

// Hosts reads the registry's live rows.
func (v *Valkey) Hosts(ctx context.Context) ([]registry.Host, error) {
	return operator.Hosts(ctx, v.client)
}

// Queues reads the status of every queue of the fleet, as `pi-dispatch
// status --per-queue` does.
func (v *Valkey) Queues(ctx context.Context) (operator.StatusReport, error) {
	set, err := operator.FleetQueues(ctx, v.client)
	if err != nil {
		return operator.StatusReport{}, err
	}
	return operator.StatusPerQueue(ctx, v.client, set)
}

// Running reads the active list of every queue of the fleet.
func (v *Valkey) Running(ctx context.Context, limit int) ([]Running, error) {
	set, err := operator.FleetQueues(ctx, v.client)
	if err != nil {
		return nil, err
	}
	var out []Running
	for _, name := range set.Names {
		q, err := queue.New(v.client, name, queue.Config{})
		if err != nil {
			return out, err
		}
		active, err := q.Active(ctx, limit-len(out))
		if err != nil {
			return out, err
		}
		for _, j := range active {
			out = append(out, running(name, j))
		}
		if len(out) >= limit {
			break
		}
	}
	return out, nil
}

// running describes one active job; a worker name that breaks the name rule
// is shown as unknown.
func running(queueName string, j *queue.Job) Running {
	r := Running{JobID: j.ID, Queue: queueName, Since: j.ProcessedOn}
	if fleet.ValidateName(j.ProcessedBy) == nil {
		r.Host = j.ProcessedBy
	}
	if spec, err := jobs.ParseJob(j.Data); err == nil {
		r.Kind, r.Target = string(spec.Kind), spec.Target()
	}
	return r
}

// Runs reads the run mirror merged with this host's records folder, as
// `pi-dispatch runs` does (operator.Runs), every record validated again:
// the page shows only records a worker could have written, and says when
// some are only on this host.
func (v *Valkey) Runs(ctx context.Context, limit int) ([]jobs.Record, string, error) {
	runs, tot, err := operator.Runs(ctx, v.client, operator.RunsFilter{Limit: limit, LogsDir: v.cfg.LogsDir})
	if errors.Is(err, operator.ErrNoRunSource) {
		return []jobs.Record{}, okOrOff(tot.Degraded), nil
	}
	if err != nil {
		return nil, tot.Degraded, err
	}
	var notes []string
	if d := okOrOff(tot.Degraded); d != "" {
		notes = append(notes, "run mirror "+d)
	}
	if tot.Source == operator.RunsFromLogsDir && v.cfg.LogsDir != "" {
		notes = append(notes, "this host's records only: no run mirror to read")
	}
	if tot.LocalOnly > 0 {
		notes = append(notes, fmt.Sprintf("%d run(s) only in this host's records, not mirrored", tot.LocalOnly))
	}
	return runs, strings.Join(notes, "; "), nil
}

// okOrOff is a mirror state worth a note: neither ok nor merely empty.
func okOrOff(state string) string {
	if state == fleetstate.MirrorOK || state == fleetstate.MirrorOff {
		return ""
	}
	return state
}

// Starts reads the global container-start counts.
func (v *Valkey) Starts(ctx context.Context) (Starts, error) {
	day, week, err := v.budget.Counts(ctx)
	if err != nil {
		return Starts{}, err
	}
	return Starts{Day: day, Week: week, DailyCap: v.cfg.DailyCap, WeeklyCap: v.cfg.WeeklyCap}, nil
}

// heldBatch is how many held ids Held reads per round trip.
const heldBatch = 200

// Held reads the held set and each hold's state. Unlike
// fleetstate.HeldCount it prunes nothing: the dashboard only reads. An id
// whose hold state is gone is left out.
func (v *Valkey) Held(ctx context.Context, limit int) ([]Held, error) {
	var out []Held
	seen := map[string]bool{}
	var cursor uint64
	for {
		ids, next, err := v.client.SScan(ctx, fleetstate.WaitHeldKey, cursor, "", heldBatch).Result()
		if err != nil {
			return out, fmt.Errorf("held jobs: %w", err)
		}
		var fresh []string
		for _, id := range ids {
			if !seen[id] && fleet.CheckJobID(id) == nil {
				seen[id] = true
				fresh = append(fresh, id)
			}
		}
		held, err := v.holds(ctx, fresh)
		if err != nil {
			return out, err
		}
		out = append(out, held...)
		if cursor = next; cursor == 0 || len(out) >= limit {
			break
		}
	}
	return out[:min(len(out), limit)], nil
}

// holds reads the hold state of ids in one round trip.
func (v *Valkey) holds(ctx context.Context, ids []string) ([]Held, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	pipe := v.client.Pipeline()
	cmds := make([]*redis.SliceCmd, len(ids))
	for i, id := range ids {
		cmds[i] = pipe.HMGet(ctx, fleetstate.WaitJobKey(id), "since", "checks")
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("held jobs: %w", err)
	}
	var out []Held
	for i, id := range ids {
		vals := cmds[i].Val()
		if len(vals) != 2 || vals[0] == nil && vals[1] == nil {
			continue // the hold ended
		}
		h := Held{JobID: id}
		if ms, ok := count(vals[0]); ok && ms > 0 {
			h.Since = time.UnixMilli(ms).UTC()
		}
		if n, ok := count(vals[1]); ok {
			h.Checks = int(n)
		}
		out = append(out, h)
	}
	return out, nil
}

// count reads a hold field; junk a peer wrote is not a count.
func count(v any) (int64, bool) {
	s, ok := v.(string)
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil && n >= 0 && n < 1e15
}

// Pause is operator.Pause over the fleet's queues.
func (v *Valkey) Pause(ctx context.Context) (string, error) { return v.kill(ctx, true) }

// Resume is operator.Resume over the fleet's queues.
func (v *Valkey) Resume(ctx context.Context) (string, error) { return v.kill(ctx, false) }

func (v *Valkey) kill(ctx context.Context, pause bool) (string, error) {
	set, err := operator.FleetQueues(ctx, v.client)
	if err != nil {
		return "", err
	}
	act, verb := operator.Resume, "resumed"
	if pause {
		act, verb = operator.Pause, "paused"
	}
	res, err := act(ctx, v.client, set)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%s %d %s", verb, len(res.Queues), plural(len(res.Queues), "queue", "queues")), nil
}

// Cancel is operator.CancelWith.
func (v *Valkey) Cancel(ctx context.Context, jobID string) (string, error) {
	res, err := operator.CancelWith(ctx, v.client, jobID, operator.CancelOptions{Wait: v.cfg.CancelWait, Host: v.cfg.Host})
	if err != nil {
		return "", err
	}
	switch res.Where {
	case operator.CancelRunningStopped:
		return "stopped by " + orUnknown(res.Host), nil
	case operator.CancelRemoved:
		return "removed from " + res.Queue, nil
	}
	return res.Where, nil
}

func orUnknown(s string) string {
	if s == "" {
		return "an unnamed worker"
	}
	return s
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
