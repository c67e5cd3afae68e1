package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/pidispatch/pidispatch/fleet"
	"github.com/redis/go-redis/v9"
)

// Defaults of Config.
const (
	DefaultPrefix  = "bull"
	DefaultLockTTL = 30 * time.Second
)

// Config tunes a Queue. The zero value is usable.
type Config struct {
	// Prefix is the key prefix shared with BullMQ clients. Defaults to
	// "bull".
	Prefix string
	// LockTTL is how long a fetched job stays locked without ExtendLock.
	// Defaults to 30s.
	LockTTL time.Duration
	// MaxStalledCount is how many times a job may stall (its lock expires
	// while active) and still be re-run by CheckStalled. Defaults to 0: the
	// first stall fails it, so a paid job never silently runs twice.
	MaxStalledCount int
	// WorkerName, when set, is recorded on fetched jobs as processedBy
	// (BullMQ's "pb"). Defaults to none.
	WorkerName string
	// Layout is the BullMQ key layout of a queue whose meta hash names no
	// BullMQ version yet (no BullMQ Queue was ever constructed on it): the
	// first call or Declare records it there ("pidispatch:bullmq6"), so
	// every host agrees from then on. A queue whose meta names a version
	// follows it: BullMQ writes "bullmq:<version>" each time a Queue is
	// constructed. Unset (zero), a queue nobody recorded is handled in 6's
	// layout and nothing is recorded: for tools that inspect or pause
	// queues (the operator commands, the dashboard) and must not choose a
	// layout for the fleet. Workers and producers set it (DefaultLayout,
	// unless their fleet's Node clients run BullMQ 5).
	Layout Layout
	// Logger receives the few events the queue logs rather than returns
	// (a scheduler whose next run could not be recorded). The queue adds
	// queue=<name> and nothing else: give it a logger that already carries
	// the host, so no line holds a key twice. Defaults to discarding.
	Logger *slog.Logger
}

func (c Config) withDefaults() (Config, error) {
	if c.Prefix == "" {
		c.Prefix = DefaultPrefix
	}
	if c.LockTTL == 0 {
		c.LockTTL = DefaultLockTTL
	}
	if c.Layout != 0 && c.Layout != Layout6 && c.Layout != Layout5 {
		return c, optErr("Config.Layout", "must be 6 or 5 (BullMQ's major version), or unset")
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if err := checkString("Config.Prefix", c.Prefix, 128); err != nil {
		return c, err
	}
	if strings.ContainsAny(c.Prefix, "{}") {
		return c, optErr("Config.Prefix", "must not contain braces")
	}
	if c.LockTTL < time.Millisecond {
		return c, optErr("Config.LockTTL", "must be at least 1ms")
	}
	if c.MaxStalledCount < 0 {
		return c, optErr("Config.MaxStalledCount", "negative")
	}
	if c.WorkerName != "" {
		if err := checkString("Config.WorkerName", c.WorkerName, 256); err != nil {
			return c, err
		}
	}
	return c, nil
}

// Queue is one BullMQ-layout queue on Valkey. It is safe for concurrent use.
// New does not take ownership of the client; nothing here closes it.
type Queue struct {
	client redis.UniversalClient
	name   string
	cfg    Config
	keys   keys
	log    *slog.Logger
	batch  completionBatcher // shares complete.lua calls between concurrent completions
}

// New returns the queue called name (fleet.SharedQueue or a fleet.HostQueueName). It
// does no I/O; Declare records the queue in Valkey.
func New(client redis.UniversalClient, name string, cfg Config) (*Queue, error) {
	if client == nil {
		return nil, errors.New("queue: nil client")
	}
	if err := ValidateQueueName(name); err != nil {
		return nil, err
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	log := cfg.Logger.With("queue", name)
	return &Queue{client: client, name: name, cfg: cfg, keys: newKeys(cfg.Prefix, name), log: log}, nil
}

// Name is the queue's name.
func (q *Queue) Name() string { return q.name }

// run executes a job-state script with the queue keys plus extra keys, and
// the job key prefix as ARGV[1].
func (q *Queue) run(ctx context.Context, s layoutScript, extra []string, args ...any) (any, error) {
	argv := make([]any, 0, len(args)+1)
	argv = append(argv, q.keys.jobPrefix())
	argv = append(argv, args...)
	return s.of(q.cfg.Layout).Run(ctx, q.client, q.keys.scriptKeys(extra...), argv...).Result()
}

// Declare records the queue in Valkey the way a BullMQ Queue does when it
// is constructed (its meta hash), so that Discover and dashboards see a
// host queue before its first job.
func (q *Queue) Declare(ctx context.Context) error {
	_, err := q.client.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.HSetNX(ctx, q.keys.meta(), "opts.maxLenEvents", 10000)
		if q.cfg.Layout != 0 {
			p.HSetNX(ctx, q.keys.meta(), "version", q.cfg.Layout.version())
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("declare %s: %w", q.name, err)
	}
	return nil
}

// Add adds a job. It returns the job's id and added=true, or, when a job
// with opts.JobID already exists or opts.Dedup's id is held, the id of that
// job and added=false. Bad arguments give an *OptionError and write
// nothing.
func (q *Queue) Add(ctx context.Context, name string, data json.RawMessage, opts AddOptions) (id string, added bool, err error) {
	if err := checkJobName("name", name); err != nil {
		return "", false, err
	}
	payload, err := checkData("data", data)
	if err != nil {
		return "", false, err
	}
	optsJSON, err := opts.validate()
	if err != nil {
		return "", false, err
	}
	var extra []string
	dedupID, dedupTTL := "", int64(0)
	if opts.Dedup != nil {
		dedupID, dedupTTL = opts.Dedup.ID, durationMs(opts.Dedup.TTL)
		if opts.Dedup.KeepLastIfActive {
			dedupTTL = -1 // add.lua's keep-last mode
		}
		extra = []string{q.keys.dedup(dedupID)}
	}
	res, err := q.run(ctx, addScript, extra, opts.JobID, name, payload, optsJSON,
		durationMs(opts.Delay), opts.Priority, dedupID, dedupTTL)
	if err != nil {
		return "", false, fmt.Errorf("add to %s: %w", q.name, err)
	}
	reply, ok := res.([]any)
	if !ok || len(reply) != 2 {
		return "", false, fmt.Errorf("add to %s: unexpected reply %v", q.name, res)
	}
	id, _ = reply[0].(string)
	status, _ := reply[1].(int64)
	return id, status == 1, nil
}

// Get returns the job with its state, or ErrNotFound.
func (q *Queue) Get(ctx context.Context, id string) (*Job, error) {
	if id == "" {
		return nil, optErr("id", "empty")
	}
	res, err := q.run(ctx, getScript, nil, id)
	if err != nil {
		return nil, fmt.Errorf("get %q from %s: %w", id, q.name, err)
	}
	reply, ok := res.([]any)
	if !ok || len(reply) != 2 {
		return nil, fmt.Errorf("get %q from %s: %w", id, q.name, ErrNotFound)
	}
	fields, _ := reply[0].([]any)
	job := parseJob(id, fields)
	state, _ := reply[1].(string)
	job.State = State(state)
	return job, nil
}

// Remove deletes a job that no consumer holds, in any state. A held job
// gives ErrJobLocked, a scheduler's pending run ErrSchedulerJob, a missing
// one ErrNotFound.
func (q *Queue) Remove(ctx context.Context, id string) error {
	if id == "" {
		return optErr("id", "empty")
	}
	res, err := q.run(ctx, removeScript, nil, id)
	if err != nil {
		return fmt.Errorf("remove %q from %s: %w", id, q.name, err)
	}
	code, _ := res.(int64)
	switch code {
	case 1:
		return nil
	case 0:
		return fmt.Errorf("remove %q from %s: %w", id, q.name, ErrNotFound)
	}
	return scriptError(code, "remove", id)
}

// Pause stops every consumer (ours and BullMQ's) from taking jobs of this
// queue; producers can still add. Jobs already held run on.
func (q *Queue) Pause(ctx context.Context) error { return SetPaused(ctx, true, q) }

// Resume undoes Pause.
func (q *Queue) Resume(ctx context.Context) error { return SetPaused(ctx, false, q) }

// IsPaused reads the flag BullMQ's isPaused() reads.
func (q *Queue) IsPaused(ctx context.Context) (bool, error) {
	ok, err := q.client.HExists(ctx, q.keys.meta(), "paused").Result()
	if err != nil {
		return false, fmt.Errorf("is-paused %s: %w", q.name, err)
	}
	return ok, nil
}

// SetPaused pauses or resumes several queues in one round trip. The queues
// must share one Valkey (the first queue's client is used). Each queue
// changes atomically; on error some may have changed, and the error says
// which did not.
func SetPaused(ctx context.Context, paused bool, queues ...*Queue) error {
	if len(queues) == 0 {
		return nil
	}
	verb := "resume"
	if paused {
		verb = "pause"
	}
	exec := func(eval bool) ([]redis.Cmder, error) {
		pipe := queues[0].client.Pipeline()
		for _, q := range queues {
			keys := q.keys.scriptKeys()
			if eval {
				pauseScript.of(q.cfg.Layout).Eval(ctx, pipe, keys, q.keys.jobPrefix(), verb)
			} else {
				pauseScript.of(q.cfg.Layout).EvalSha(ctx, pipe, keys, q.keys.jobPrefix(), verb)
			}
		}
		return pipe.Exec(ctx)
	}
	cmds, err := exec(false)
	if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		cmds, err = exec(true)
	}
	if err == nil {
		return nil
	}
	var failed []string
	for i, c := range cmds {
		if c.Err() != nil && i < len(queues) {
			failed = append(failed, queues[i].name)
		}
	}
	if len(failed) == 0 { // the round trip itself failed: state unknown
		for _, q := range queues {
			failed = append(failed, q.name)
		}
	}
	return fmt.Errorf("%s %s: %w", verb, strings.Join(failed, ","), err)
}

// Counts are the number of jobs in each state, as BullMQ's getJobCounts
// reports them.
type Counts struct {
	Waiting int64
	Active  int64
	// Paused counts the paused list: a paused queue's ready jobs in BullMQ
	// 5's layout (in 6's they stay in Waiting), or ones a BullMQ 5 client
	// left there until the next resume.
	Paused      int64
	Delayed     int64
	Prioritized int64
	Completed   int64
	Failed      int64
}

// Counts reads all counts in one atomic round trip.
func (q *Queue) Counts(ctx context.Context) (Counts, error) {
	var c Counts
	var cmds [7]*redis.IntCmd
	_, err := q.client.TxPipelined(ctx, func(p redis.Pipeliner) error {
		cmds[0] = p.LLen(ctx, q.keys.wait())
		cmds[1] = p.LLen(ctx, q.keys.active())
		cmds[2] = p.LLen(ctx, q.keys.paused())
		cmds[3] = p.ZCard(ctx, q.keys.delayed())
		cmds[4] = p.ZCard(ctx, q.keys.prioritized())
		cmds[5] = p.ZCard(ctx, q.keys.completed())
		cmds[6] = p.ZCard(ctx, q.keys.failed())
		return nil
	})
	if err != nil {
		return c, fmt.Errorf("counts %s: %w", q.name, err)
	}
	c.Waiting, c.Active, c.Paused = cmds[0].Val(), cmds[1].Val(), cmds[2].Val()
	c.Delayed, c.Prioritized = cmds[3].Val(), cmds[4].Val()
	c.Completed, c.Failed = cmds[5].Val(), cmds[6].Val()
	return c, nil
}

// NewToken returns a random lock token for Fetch. It is fleet.NewToken, the
// one generator every consumer uses.
func NewToken() string { return fleet.NewToken() }
