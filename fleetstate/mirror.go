package fleetstate

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/internal/bounded"
	"github.com/pidispatch/pidispatch/internal/reach"
	"github.com/pidispatch/pidispatch/jobs"
	"github.com/redis/go-redis/v9"
)

// Defaults and bounds of the run mirror.
const (
	// MaxMirrorRetentionDays caps the mirror's window: the mirror is a recent
	// view, never an archive.
	MaxMirrorRetentionDays   = 92
	DefaultMirrorIndexMax    = 5000
	DefaultMirrorCallTimeout = 2 * time.Second
	// DefaultMirrorReadLimit is Read's limit when the caller passes 0 or less.
	DefaultMirrorReadLimit = 50
	// MaxMirrorReadLimit bounds one Read, whatever the caller asks.
	MaxMirrorReadLimit = 10000
)

// Degraded states of a mirror read (Read's second result).
const (
	MirrorOK        = "ok"
	MirrorOff       = "off"       // no index: a single host, or no named worker wrote one
	MirrorTruncated = "truncated" // more runs match than were returned, or the index lost some to its size cap
	// A read that failed is "unreachable (<cause>)".
	mirrorUnreachablePrefix = "unreachable"
)

// ErrMirrorUnreachable is a run mirror that could not be written or read. It
// wraps the cause.
var ErrMirrorUnreachable = errors.New("run mirror unreachable")

// MirrorConfig tunes a Mirror. The zero value is valid; NewMirror applies the
// defaults to a copy.
type MirrorConfig struct {
	// RetentionDays is PI_LOG_RETENTION_DAYS. The mirror keeps a record for
	// min(RetentionDays, 92) days, so it never outlives the file it mirrors;
	// 0 (or less) counts as 92, as in the original.
	RetentionDays int
	// IndexMax is how many runs the index keeps, newest first. Defaults to 5000.
	IndexMax int
	// CallTimeout bounds every Valkey call. Defaults to 2s.
	CallTimeout time.Duration
	// Logger receives run_mirror_failed and run_mirror_restored, once per
	// transition. Defaults to discarding.
	Logger *slog.Logger
	// Host is this worker's name, the host attribute of every log line.
	Host string
}

func (c MirrorConfig) withDefaults() MirrorConfig {
	if c.RetentionDays <= 0 || c.RetentionDays > MaxMirrorRetentionDays {
		c.RetentionDays = MaxMirrorRetentionDays
	}
	if c.IndexMax <= 0 {
		c.IndexMax = DefaultMirrorIndexMax
	}
	if c.CallTimeout <= 0 {
		c.CallTimeout = DefaultMirrorCallTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Mirror copies run records to Valkey (runs:rec:<stem>.attempt-<n> and
// runs:index, one entry per attempt), so any
// host of a fleet can list the runs of all of them. The record file is the
// record; the mirror is a view of it, and a failure to mirror never fails a job.
// Only named workers arm it (the caller decides): an unnamed worker's runs have
// no host a reader could name.
//
// A Mirror is safe for concurrent use. It does not own the client.
type Mirror struct {
	client redis.UniversalClient
	cfg    MirrorConfig
	window time.Duration
	log    *slog.Logger

	mu     sync.Mutex // guards closed against Go
	closed bool
	// inflight counts Go's goroutines and Valkey calls that overran their bound.
	inflight bounded.Calls

	// health logs the mirror's failure and recovery once per transition.
	health *reach.Tracker
}

var _ dispatch.RunMirror = (*Mirror)(nil)

// NewMirror returns a Mirror over client.
func NewMirror(client redis.UniversalClient, cfg MirrorConfig) *Mirror {
	cfg = cfg.withDefaults()
	log := cfg.Logger
	if cfg.Host != "" {
		log = log.With("host", cfg.Host)
	}
	return &Mirror{
		client: client,
		cfg:    cfg,
		window: time.Duration(cfg.RetentionDays) * 24 * time.Hour,
		log:    log,
		health: reach.New(log, reach.Events{
			Down: "run_mirror_failed", DownLevel: slog.LevelWarn, ErrKey: "reason",
			Up: "run_mirror_restored",
		}),
	}
}

// Mirror writes rec to the mirror in one script: the body with the window as
// its expiry, the index entry scored by endedAt, and the trims of the index by
// age and by IndexMax. A record already older than the window is not written. An
// invalid record is an error and nothing is written.
//
// A Valkey failure is returned wrapping ErrMirrorUnreachable; it is also logged,
// but only on the transition (run_mirror_failed, then run_mirror_restored on the
// next success), so a long outage is one line, not one per job.
func (m *Mirror) Mirror(ctx context.Context, rec jobs.Record) error {
	body, err := mirrorBody(rec)
	if err != nil {
		return err
	}
	member := jobs.RecordMember(rec.Queue, rec.JobID, rec.Attempt)
	score := rec.EndedAt.UnixMilli()
	keys := []string{runRecordPrefix + member, RunIndexKey}
	_, err = bounded.Call(ctx, m.cfg.CallTimeout, &m.inflight, nil, func(ctx context.Context) (any, error) {
		return mirrorScript.Run(ctx, m.client, keys, body, m.window.Milliseconds(), score, member, m.cfg.IndexMax).Result()
	})
	// Only a failed Valkey call gets here: an invalid record (returned
	// above) says nothing about Valkey.
	m.health.Observe(err)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrMirrorUnreachable, err)
	}
	return nil
}

// recordClaimTTL is how long a record claim lasts: longer than any freeze a
// worker wakes from with a run to report.
const recordClaimTTL = 7 * 24 * time.Hour

// Claim takes, fleet-wide, the right to write the record of one attempt of
// jobID taken from queue for host, and returns the claim's owner: host when it is host's
// (taken now or before), else the host that took it first. The error wraps
// ErrMirrorUnreachable; a caller that cannot claim writes its record all the
// same (a duplicate is better than none).
func (m *Mirror) Claim(ctx context.Context, queue, jobID string, attempt int, host string) (string, error) {
	key := RunClaimKey(queue, jobID, attempt)
	owner, err := bounded.Call(ctx, m.cfg.CallTimeout, &m.inflight, nil, func(ctx context.Context) (string, error) {
		return claimScript.Run(ctx, m.client, []string{key}, host, recordClaimTTL.Milliseconds()).Text()
	})
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrMirrorUnreachable, err)
	}
	return owner, nil
}

// ReleaseClaim drops host's claim of one attempt (a record it wrote for an
// attempt that then ran again); another host's claim is left alone.
func (m *Mirror) ReleaseClaim(ctx context.Context, queue, jobID string, attempt int, host string) error {
	_, err := bounded.Call(ctx, m.cfg.CallTimeout, &m.inflight, nil, func(ctx context.Context) (any, error) {
		return releaseClaimScript.Run(ctx, m.client, []string{RunClaimKey(queue, jobID, attempt)}, host).Result()
	})
	if err != nil {
		return fmt.Errorf("%w: %w", ErrMirrorUnreachable, err)
	}
	return nil
}

// mirrorBody renders rec exactly as WriteRecord writes the file: validated,
// times in UTC at millisecond precision, telemetry compacted.
func mirrorBody(rec jobs.Record) ([]byte, error) {
	if err := rec.Validate(); err != nil {
		return nil, fmt.Errorf("run mirror: %w", err)
	}
	rec.StartedAt = rec.StartedAt.UTC().Truncate(time.Millisecond)
	rec.EndedAt = rec.EndedAt.UTC().Truncate(time.Millisecond)
	if len(rec.Telemetry) > 0 {
		var buf bytes.Buffer
		if err := json.Compact(&buf, rec.Telemetry); err != nil {
			return nil, fmt.Errorf("run mirror: telemetry: %w", err)
		}
		rec.Telemetry = buf.Bytes()
	}
	body, err := json.Marshal(rec)
	if err != nil {
		return nil, fmt.Errorf("run mirror: %w", err)
	}
	return body, nil
}

// Go mirrors rec in the background, the way the worker calls it after writing
// the record file: never awaited, never failing the job. The goroutine is
// tracked; Close waits for it. After Close, Go does nothing.
func (m *Mirror) Go(ctx context.Context, rec jobs.Record) {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return
	}
	m.inflight.Add()
	m.mu.Unlock()
	go func() {
		defer m.inflight.Done()
		if err := m.Mirror(context.WithoutCancel(ctx), rec); err != nil && !errors.Is(err, ErrMirrorUnreachable) {
			// An outage is logged by the transition; a record the mirror refused
			// is logged here, since no caller sees this error.
			m.log.Warn("run_mirror_skipped", "reason", err.Error())
		}
	}()
}

// Close stops Go from starting mirrors and waits, until ctx ends, for those in
// flight (each bounded by CallTimeout) and for calls that overran their bound.
// It does not close the client.
func (m *Mirror) Close(ctx context.Context) error {
	m.mu.Lock()
	m.closed = true
	m.mu.Unlock()
	return m.inflight.Wait(ctx)
}

// Read lists the mirrored runs that ended after since (exclusive; the zero time
// reads all), newest first, at most limit (0 or less means 50; at most 10000).
// A member whose body is missing, unparsable or not a valid record is pruned
// from the index and skipped: junk written by a peer never reaches the caller.
//
// degraded is MirrorOff when there is no index at all, MirrorTruncated when
// more runs match than were returned or the index's size cap dropped runs newer
// than since, MirrorOK otherwise, and "unreachable (<cause>)" when Valkey
// failed, with runs nil and err wrapping ErrMirrorUnreachable. A display may
// ignore err and show degraded; a caller that branches uses err.
func (m *Mirror) Read(ctx context.Context, limit int, since time.Time) (runs []jobs.Record, degraded string, err error) {
	if limit <= 0 {
		limit = DefaultMirrorReadLimit
	}
	limit = min(limit, MaxMirrorReadLimit)
	var sinceMs int64
	if !since.IsZero() {
		sinceMs = since.UnixMilli()
	}
	unreachable := func(err error) ([]jobs.Record, string, error) {
		return nil, mirrorUnreachablePrefix + " (" + err.Error() + ")", fmt.Errorf("%w: %w", ErrMirrorUnreachable, err)
	}

	type head struct {
		members []string
		card    int64
		oldest  []redis.Z
	}
	h, err := bounded.Call(ctx, m.cfg.CallTimeout, &m.inflight, nil, func(ctx context.Context) (head, error) {
		pipe := m.client.Pipeline()
		members := pipe.ZRevRangeByScore(ctx, RunIndexKey, &redis.ZRangeBy{
			Min: "(" + strconv.FormatInt(sinceMs, 10), Max: "+inf", Count: int64(limit) + 1,
		})
		card := pipe.ZCard(ctx, RunIndexKey)
		oldest := pipe.ZRangeWithScores(ctx, RunIndexKey, 0, 0)
		if _, err := pipe.Exec(ctx); err != nil {
			return head{}, err
		}
		return head{members.Val(), card.Val(), oldest.Val()}, nil
	})
	if err != nil {
		return unreachable(err)
	}
	if h.card == 0 {
		return nil, MirrorOff, nil
	}
	degraded = MirrorOK
	members := h.members
	if len(members) > limit {
		members = members[:limit]
		degraded = MirrorTruncated
	}
	if h.card >= int64(m.cfg.IndexMax) && len(h.oldest) == 1 && h.oldest[0].Score > float64(sinceMs) {
		degraded = MirrorTruncated
	}
	if len(members) == 0 {
		return []jobs.Record{}, degraded, nil
	}

	keys := make([]string, len(members))
	for i, member := range members {
		keys[i] = runRecordPrefix + member
	}
	bodies, err := bounded.Call(ctx, m.cfg.CallTimeout, &m.inflight, nil, func(ctx context.Context) ([]any, error) {
		return m.client.MGet(ctx, keys...).Result()
	})
	if err != nil {
		return unreachable(err)
	}
	runs = make([]jobs.Record, 0, len(members))
	var junk []any
	for i, member := range members {
		rec, ok := parseMirrored(bodies, i)
		if !ok || !jobs.OwnName(member, rec) {
			// Junk, or a record under a name not its own (another queue's,
			// another job's): a Valkey writer must not make one run pass
			// for another.
			junk = append(junk, member)
			continue
		}
		runs = append(runs, rec)
	}
	if len(junk) > 0 {
		// Best effort: a failed prune is retried by the next read, which skips
		// the same junk again.
		_, _ = bounded.Call(ctx, m.cfg.CallTimeout, &m.inflight, nil, func(ctx context.Context) (int64, error) {
			return m.client.ZRem(ctx, RunIndexKey, junk...).Result()
		})
	}
	return runs, degraded, nil
}

// parseMirrored reads body i of an MGET: a valid record, or not.
func parseMirrored(bodies []any, i int) (jobs.Record, bool) {
	if i >= len(bodies) {
		return jobs.Record{}, false
	}
	s, ok := bodies[i].(string)
	if !ok {
		return jobs.Record{}, false
	}
	var rec jobs.Record
	if err := json.Unmarshal([]byte(s), &rec); err != nil || rec.Validate() != nil {
		return jobs.Record{}, false
	}
	return rec, true
}
