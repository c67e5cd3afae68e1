package transcript

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/fleetstate"
)

// Defaults of Live.
const (
	// LiveMaxLenDefault caps a job's live stream (XADD MAXLEN ~).
	LiveMaxLenDefault = 2000
	// LiveTTLDefault is how long a live stream outlives its last entry.
	LiveTTLDefault = time.Hour
)

// entryField is the stream field holding an encoded Entry; sigField holds
// its fleet signature (fleet.Key.SignEntry over the stream's key and the
// entry field) when the writer holds the fleet key.
const (
	entryField = "e"
	sigField   = "s"
)

// Live is the live stream of running jobs' transcripts in Valkey: one
// capped stream per job (fleetstate.RunLiveKey), expiring LiveTTLDefault
// after its last entry. It holds only redacted entries.
//
// Anyone who can write to Valkey can add to a stream, and what a reader
// shows an operator may be taken for the job's own output. With the fleet
// key (LiveConfig.Key) the writer signs each entry and the reader shows only
// entries the key signed for that stream; without it, nothing is signed or
// checked.
type Live struct {
	rc      redis.UniversalClient
	maxLen  int64
	ttl     time.Duration
	key     fleet.Key
	log     *slog.Logger
	dropped atomic.Int64
	warned  atomic.Bool
}

var _ Sink = (*Live)(nil)

// LiveConfig configures a Live beyond its client.
type LiveConfig struct {
	// Key is the fleet's signing key (PI_FLEET_KEY_FILE). Set, every entry
	// written is signed and every entry read must be; the zero Key signs and
	// checks nothing.
	Key fleet.Key
	// Logger receives transcript_live_unsigned, once per Live, when a read
	// drops an entry without a valid signature. Default: discarded.
	Logger *slog.Logger
}

// NewLive returns the live stream on rc, unsigned: for a fleet without a key.
func NewLive(rc redis.UniversalClient) *Live { return NewLiveWith(rc, LiveConfig{}) }

// NewLiveWith returns the live stream on rc, signed and checked with
// cfg.Key when it is set.
func NewLiveWith(rc redis.UniversalClient, cfg LiveConfig) *Live {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Live{rc: rc, maxLen: LiveMaxLenDefault, ttl: LiveTTLDefault, key: cfg.Key, log: log}
}

// Dropped is how many entries this Live's reads dropped for a missing or
// wrong signature.
func (l *Live) Dropped() int64 { return l.dropped.Load() }

// Append adds entries to the job's stream, trims it and renews its TTL, in
// one round trip. With the fleet key each entry is signed; an entry that
// cannot be signed is not written.
func (l *Live) Append(ctx context.Context, jobID string, entries []Entry) error {
	key := fleetstate.RunLiveKey(jobID)
	pipe := l.rc.Pipeline()
	for _, e := range entries {
		b, err := json.Marshal(e)
		if err != nil {
			continue
		}
		values := []any{entryField, b}
		if l.key.IsSet() {
			sig, err := l.key.SignEntry(key, map[string]string{entryField: string(b)})
			if err != nil {
				continue
			}
			values = append(values, sigField, sig)
		}
		pipe.XAdd(ctx, &redis.XAddArgs{Stream: key, MaxLen: l.maxLen, Approx: true, Values: values})
	}
	pipe.Expire(ctx, key, l.ttl)
	_, err := pipe.Exec(ctx)
	return err
}

// latestScan bounds how many of the newest entries Latest looks through
// for one that reads (and, with the key, verifies).
const latestScan = 100

// Latest is the attempt of the newest valid entry of the job's stream; 0
// when there is none.
func (l *Live) Latest(ctx context.Context, jobID string) (int, error) {
	key := fleetstate.RunLiveKey(jobID)
	msgs, err := l.rc.XRevRangeN(ctx, key, "+", "-", latestScan).Result()
	if err != nil {
		return 0, err
	}
	for _, m := range msgs {
		if e, err := l.entryOf(key, jobID, m); err == nil {
			return e.Attempt, nil
		}
	}
	return 0, nil
}

// Follow calls fn with each entry of the job's stream, from its oldest kept
// entry on, waiting for new ones, until fn returns false or ctx ends (then
// it returns ctx's error). Entries that do not validate are skipped.
func (l *Live) Follow(ctx context.Context, jobID string, fn func(Entry) bool) error {
	key := fleetstate.RunLiveKey(jobID)
	last := "0"
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		res, err := l.rc.XRead(ctx, &redis.XReadArgs{Streams: []string{key, last}, Count: 200, Block: 2 * time.Second}).Result()
		if errors.Is(err, redis.Nil) {
			continue
		}
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return err
		}
		for _, s := range res {
			for _, m := range s.Messages {
				last = m.ID
				e, err := l.entryOf(key, jobID, m)
				if err != nil {
					continue
				}
				if !fn(e) {
					return nil
				}
			}
		}
	}
}

// Recent returns the job's stream as it is now, oldest first.
func (l *Live) Recent(ctx context.Context, jobID string) ([]Entry, error) {
	key := fleetstate.RunLiveKey(jobID)
	msgs, err := l.rc.XRange(ctx, key, "-", "+").Result()
	if err != nil {
		return nil, err
	}
	out := make([]Entry, 0, len(msgs))
	for _, m := range msgs {
		if e, err := l.entryOf(key, jobID, m); err == nil {
			out = append(out, e)
		}
	}
	return out, nil
}

// errUnsigned marks an entry the fleet key did not sign for its stream.
var errUnsigned = errors.New("transcript: live entry not signed by the fleet key")

// entryOf reads one stream message: with the key, only one signed for the
// stream, holding the entry field and its signature and nothing else.
func (l *Live) entryOf(stream, jobID string, m redis.XMessage) (Entry, error) {
	v, ok := m.Values[entryField].(string)
	if l.key.IsSet() {
		sig, sok := m.Values[sigField].(string)
		if !ok || !sok || len(m.Values) != 2 || !l.key.VerifyEntry(stream, map[string]string{entryField: v}, sig) {
			l.drop(stream, jobID)
			return Entry{}, errUnsigned
		}
	}
	if !ok {
		return Entry{}, errBadEntry
	}
	return decodeEntry([]byte(v))
}

// drop counts an unsigned entry and says so once: a stream a writer without
// the key reached may hold many.
func (l *Live) drop(stream, jobID string) {
	l.dropped.Add(1)
	if l.warned.CompareAndSwap(false, true) {
		l.log.Warn("transcript_live_unsigned", "job", jobID, "stream", stream,
			"why", "an entry without a valid fleet signature was dropped: something without the fleet key wrote to the live stream")
	}
}
