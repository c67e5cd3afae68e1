package fleetstate

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/internal/bounded"
	"github.com/pidispatch/pidispatch/internal/check"
)

// Defaults of a Threads.
const (
	// DefaultThreadsCallTimeout bounds each Valkey call of a Threads.
	DefaultThreadsCallTimeout = 2 * time.Second
	// DefaultThreadStaleAfter is how long a job of a thread's line may go
	// without asking for its turn before it is dropped from the line. A
	// waiting job asks again at every pickup, which a deferral makes every
	// few seconds; one its queue lost (removed, failed elsewhere) stops.
	DefaultThreadStaleAfter = 10 * time.Minute
	// DefaultThreadLineMax is the most jobs one thread's line holds.
	DefaultThreadLineMax = 1000
	// threadKeyLives is how many StaleAfter windows (at least the holder's
	// ttl) a thread's line outlives its last ask: an abandoned thread
	// disappears.
	threadKeyLives = 3
)

// ErrThreadsUnavailable wraps every Threads call Valkey did not answer, or
// answered with a line that cannot be read: the caller defers the job, as a
// thread whose order cannot be read must not run two of its jobs at once.
var ErrThreadsUnavailable = errors.New("threads unavailable")

// ThreadsConfig tunes a Threads. The zero value is valid.
type ThreadsConfig struct {
	// CallTimeout bounds every Valkey call. Defaults to 2s.
	CallTimeout time.Duration
	// StaleAfter is how long a job of a line may go without asking before it
	// is dropped (unless it holds the thread). Defaults to 10 minutes.
	StaleAfter time.Duration
	// Settle is how long after its enqueue a thread's first job waits before
	// it takes the thread, so a job enqueued a moment before it (on another
	// host, say) lines up first and the thread's jobs run in the order they
	// were enqueued. Defaults to 0: none.
	Settle time.Duration
	// MaxLine is the most jobs one thread's line holds; a job past it waits
	// without joining the line, and the refusal is logged. Defaults to 1000.
	MaxLine int
	// Logger receives reachability transitions (threads_unreachable,
	// threads_restored, once each), a full line (thread_line_full), stale
	// jobs dropped (thread_stale_dropped) and values that do not read
	// (thread_unreadable). Defaults to discarding.
	Logger *slog.Logger
	// Host is this worker's name, the host attribute of every log line.
	Host string
}

// Threads lines up the jobs of each forge thread (an issue or a pull
// request) on Valkey, so they run one at a time fleet-wide, oldest first
// (dispatch.Threads). A thread has three keys sharing a hash tag
// (ThreadLineKey, ThreadSeenKey, ThreadHolderKey) and one script decides
// each turn on the server's clock (threadTurnScript in scripts.go). What a
// key holds is read again and never trusted to decide more than "wait".
//
// A Threads is safe for concurrent use. It does not own the client.
type Threads struct {
	client redis.UniversalClient
	cfg    ThreadsConfig
	log    *slog.Logger
	health budgetHealth
	calls  *bounded.Calls
}

var _ dispatch.Threads = (*Threads)(nil)

// NewThreads returns a Threads over client.
func NewThreads(client redis.UniversalClient, cfg ThreadsConfig) *Threads {
	if cfg.CallTimeout <= 0 {
		cfg.CallTimeout = DefaultThreadsCallTimeout
	}
	if cfg.StaleAfter < time.Millisecond {
		cfg.StaleAfter = DefaultThreadStaleAfter
	}
	if cfg.MaxLine <= 0 {
		cfg.MaxLine = DefaultThreadLineMax
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.Host != "" {
		log = log.With("host", cfg.Host)
	}
	return &Threads{
		client: client, cfg: cfg, log: log,
		health: storeHealth(cfg.Logger, cfg.Host, "threads"),
		calls:  &bounded.Calls{},
	}
}

// WithStaleAfter is a Threads over the same client, logger and calls whose
// jobs go stale after d (at least a millisecond) instead: a test sees a job
// go stale without waiting ten minutes. The stale window is each caller's
// own argument to the turn script, so hosts with different windows share a
// line safely.
func (t *Threads) WithStaleAfter(d time.Duration) dispatch.Threads {
	c := *t
	c.cfg.StaleAfter = max(d, time.Millisecond)
	return &c
}

// Turn puts jobID, enqueued at enqueuedAt, in thread's line once and answers
// whether it may run now, holding the thread for ttl when it may
// (dispatch.Threads). A zero enqueuedAt counts as the server's now.
func (t *Threads) Turn(ctx context.Context, thread, jobID string, enqueuedAt time.Time, ttl time.Duration) (dispatch.ThreadTurn, error) {
	if err := threadArgs(thread, jobID); err != nil {
		return dispatch.ThreadTurn{}, err
	}
	if ttl < time.Millisecond {
		return dispatch.ThreadTurn{}, fmt.Errorf("threads: turn of %s: ttl %s is under a millisecond", jobID, ttl)
	}
	life := max(threadKeyLives*t.cfg.StaleAfter, ttl)
	keys := []string{ThreadLineKey(thread), ThreadSeenKey(thread), ThreadHolderKey(thread)}
	res, err := bounded.Call(ctx, t.cfg.CallTimeout, t.calls, nil, func(ctx context.Context) (any, error) {
		return threadTurnScript.Run(ctx, t.client, keys,
			jobID, enqueuedMs(enqueuedAt), ttl.Milliseconds(), t.cfg.StaleAfter.Milliseconds(), t.cfg.MaxLine, life.Milliseconds(),
			max(t.cfg.Settle, 0).Milliseconds()).Result()
	})
	t.health.observe(err)
	if err != nil {
		return dispatch.ThreadTurn{}, fmt.Errorf("%w: turn of %s in %s: %w", ErrThreadsUnavailable, jobID, check.Quote(thread), err)
	}
	r, ok := parseTurn(res)
	if !ok {
		return dispatch.ThreadTurn{}, fmt.Errorf("%w: turn of %s in %s: a reply that does not read as a turn", ErrThreadsUnavailable, jobID, check.Quote(thread))
	}
	if r.full {
		t.log.Warn("thread_line_full", "thread", thread, "jobId", jobID, "max", t.cfg.MaxLine,
			"fix", "the job waits without joining the line; it joins once older jobs are done or dropped")
	}
	if r.dropped > 0 {
		t.log.Info("thread_stale_dropped", "thread", thread, "jobId", jobID, "dropped", r.dropped, "staleAfter", t.cfg.StaleAfter.String())
	}
	turn := dispatch.ThreadTurn{Granted: r.granted, Behind: r.behind} // behind itself: settling
	if !turn.Granted && fleet.CheckJobID(turn.Behind) != nil {
		// A holder or a line member no job id rule allows: the job waits
		// (until that value expires or goes stale), behind no name.
		t.log.Warn("thread_unreadable", "thread", thread, "jobId", jobID, "behind", check.Quote(truncate(turn.Behind, 64)))
		turn.Behind = ""
	}
	if r.repaired > 0 {
		t.log.Warn("thread_unreadable", "thread", thread, "jobId", jobID, "seenRewritten", r.repaired)
	}
	return turn, nil
}

// Done takes jobID out of thread's line and frees the thread when jobID
// holds it (dispatch.Threads). Calling it again does nothing.
func (t *Threads) Done(ctx context.Context, thread, jobID string) error {
	if err := threadArgs(thread, jobID); err != nil {
		return err
	}
	keys := []string{ThreadLineKey(thread), ThreadSeenKey(thread), ThreadHolderKey(thread)}
	_, err := bounded.Call(ctx, t.cfg.CallTimeout, t.calls, nil, func(ctx context.Context) (any, error) {
		return threadDoneScript.Run(ctx, t.client, keys, jobID).Result()
	})
	t.health.observe(err)
	if err != nil {
		return fmt.Errorf("%w: done of %s in %s: %w", ErrThreadsUnavailable, jobID, check.Quote(thread), err)
	}
	return nil
}

// Close waits, until ctx ends, for Valkey calls that overran CallTimeout. It
// does not close the client.
func (t *Threads) Close(ctx context.Context) error { return t.calls.Wait(ctx) }

// threadArgs refuses an empty thread and a job id the fleet's rule refuses:
// neither names a key or a line member.
func threadArgs(thread, jobID string) error {
	if thread == "" {
		return errors.New("threads: empty thread")
	}
	if err := fleet.CheckJobID(jobID); err != nil {
		return fmt.Errorf("threads: job id: %w", err)
	}
	return nil
}

// maxEnqueuedMs is the latest enqueue time a line scores (9999-12-31).
const maxEnqueuedMs = 253402300799999

// enqueuedMs is enqueuedAt as the script's ARGV[2]: epoch ms held to
// [0, maxEnqueuedMs], or "" for the zero time (the server's now).
func enqueuedMs(at time.Time) string {
	if at.IsZero() {
		return ""
	}
	return strconv.FormatInt(min(max(at.UnixMilli(), 0), maxEnqueuedMs), 10)
}

// turnReply is threadTurnScript's reply.
type turnReply struct {
	granted           bool
	behind            string
	full              bool
	dropped, repaired int64
}

// parseTurn reads threadTurnScript's reply, refusing any other shape.
func parseTurn(res any) (turnReply, bool) {
	arr, ok := res.([]any)
	if !ok || len(arr) != 5 {
		return turnReply{}, false
	}
	granted, ok1 := arr[0].(int64)
	behind, ok2 := arr[1].(string)
	full, ok3 := arr[2].(int64)
	dropped, ok4 := arr[3].(int64)
	repaired, ok5 := arr[4].(int64)
	if !ok1 || !ok2 || !ok3 || !ok4 || !ok5 || granted < 0 || granted > 1 {
		return turnReply{}, false
	}
	r := turnReply{granted: granted == 1, behind: behind, full: full == 1, dropped: dropped, repaired: repaired}
	if r.granted {
		r.behind = ""
	}
	return r, true
}

// truncate cuts s to at most n bytes, for a log line.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

// ReadThread reads thread's line, oldest first, and its holder ("" when
// none), without lining anyone up: what `explain` shows of a waiting job.
// Members and a holder that break the job id rule are left out.
func ReadThread(ctx context.Context, client redis.Cmdable, thread string) (line []string, holder string, err error) {
	members, err := client.ZRange(ctx, ThreadLineKey(thread), 0, DefaultThreadLineMax-1).Result()
	if err != nil {
		return nil, "", err
	}
	for _, m := range members {
		if fleet.CheckJobID(m) == nil {
			line = append(line, m)
		}
	}
	holder, err = client.Get(ctx, ThreadHolderKey(thread)).Result()
	if errors.Is(err, redis.Nil) || err == nil && fleet.CheckJobID(holder) != nil {
		return line, "", nil
	}
	return line, holder, err
}
