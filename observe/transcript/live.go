package transcript

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pidispatch/pidispatch/fleetstate"
)

// Defaults of Live.
const (
	// LiveMaxLenDefault caps a job's live stream (XADD MAXLEN ~).
	LiveMaxLenDefault = 2000
	// LiveTTLDefault is how long a live stream outlives its last entry.
	LiveTTLDefault = time.Hour
)

// entryField is the stream field holding an encoded Entry.
const entryField = "e"

// Live is the live stream of running jobs' transcripts in Valkey: one
// capped stream per job (fleetstate.RunLiveKey), expiring LiveTTLDefault
// after its last entry. It holds only redacted entries.
type Live struct {
	rc     redis.UniversalClient
	maxLen int64
	ttl    time.Duration
}

var _ Sink = (*Live)(nil)

// NewLive returns the live stream on rc.
func NewLive(rc redis.UniversalClient) *Live {
	return &Live{rc: rc, maxLen: LiveMaxLenDefault, ttl: LiveTTLDefault}
}

// Append adds entries to the job's stream, trims it and renews its TTL, in
// one round trip.
func (l *Live) Append(ctx context.Context, jobID string, entries []Entry) error {
	key := fleetstate.RunLiveKey(jobID)
	pipe := l.rc.Pipeline()
	for _, e := range entries {
		b, err := json.Marshal(e)
		if err != nil {
			continue
		}
		pipe.XAdd(ctx, &redis.XAddArgs{Stream: key, MaxLen: l.maxLen, Approx: true, Values: []any{entryField, b}})
	}
	pipe.Expire(ctx, key, l.ttl)
	_, err := pipe.Exec(ctx)
	return err
}

// Latest is the attempt of the newest entry of the job's stream; 0 when
// there is none.
func (l *Live) Latest(ctx context.Context, jobID string) (int, error) {
	msgs, err := l.rc.XRevRangeN(ctx, fleetstate.RunLiveKey(jobID), "+", "-", 1).Result()
	if err != nil || len(msgs) == 0 {
		return 0, err
	}
	e, err := entryOf(msgs[0])
	if err != nil {
		return 0, nil
	}
	return e.Attempt, nil
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
				e, err := entryOf(m)
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
	msgs, err := l.rc.XRange(ctx, fleetstate.RunLiveKey(jobID), "-", "+").Result()
	if err != nil {
		return nil, err
	}
	out := make([]Entry, 0, len(msgs))
	for _, m := range msgs {
		if e, err := entryOf(m); err == nil {
			out = append(out, e)
		}
	}
	return out, nil
}

func entryOf(m redis.XMessage) (Entry, error) {
	v, ok := m.Values[entryField].(string)
	if !ok {
		return Entry{}, errBadEntry
	}
	return decodeEntry([]byte(v))
}
