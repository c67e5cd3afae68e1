package inbox

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pidispatch/pidispatch/jobs"
)

// Defaults of the Valkey side.
const (
	// DefaultSeenTTL is how long a delivery's key is remembered: longer than
	// the 31 days a forge job is kept, so a replay is refused even after its
	// job is gone, and while the job exists its id (the key) refuses it too.
	DefaultSeenTTL = 35 * 24 * time.Hour
	// DefaultMaxLength bounds the deliveries an inbox holds per forge
	// (waiting and being processed); past it a delivery is answered 503.
	DefaultMaxLength = 10000
)

// Outcome is what storing a delivery came to.
type Outcome string

// Outcomes of Put.
const (
	Stored    Outcome = "stored"     // in Valkey, to be processed
	Spooled   Outcome = "spooled"    // on the local disk, to be moved to Valkey
	Duplicate Outcome = "duplicate"  // the delivery's body was stored before; nothing stored
	Full      Outcome = "inbox-full" // the inbox holds its bound; nothing stored
)

// Store keeps deliveries in Valkey: stored once by key (Delivery.Key), claimed
// under a lease, finished or put back to retry. Every key is formatted in
// keys.go, every script documented in scripts.go.
type Store struct {
	Client redis.UniversalClient
	// SeenTTL is how long a delivery's key is remembered. Default DefaultSeenTTL.
	SeenTTL time.Duration
	// EntryTTL bounds how long a stored delivery lives even if nothing ends
	// it. Default 2 days.
	EntryTTL time.Duration
	// MaxLength bounds each forge's inbox. Default DefaultMaxLength.
	MaxLength int
	// MaxBody bounds a stored delivery's body, re-checked on read.
	MaxBody int64
}

func (s *Store) seenTTL() time.Duration  { return orDefault(s.SeenTTL, DefaultSeenTTL) }
func (s *Store) entryTTL() time.Duration { return orDefault(s.EntryTTL, 48*time.Hour) }

func (s *Store) maxLength() int {
	if s.MaxLength <= 0 {
		return DefaultMaxLength
	}
	return s.MaxLength
}

func orDefault(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

// Put stores d under its Key unless its body was stored before, under any
// delivery id (Duplicate), or the forge's inbox is full (Full). An error
// means Valkey did not answer: nothing is known to be stored.
func (s *Store) Put(ctx context.Context, d Delivery) (Outcome, error) {
	if err := d.check(s.MaxBody); err != nil {
		return "", err
	}
	key := d.Key()
	keys := []string{bodyKey(d.Forge, key), entryKey(d.Forge, key), dueKey(d.Forge), runKey(d.Forge), seenKey(d.Forge, d.ID)}
	res, err := storeScript.Run(ctx, s.Client, keys, key, d.Encode(),
		int64(s.seenTTL()/time.Second), int64(s.entryTTL()/time.Second), s.maxLength()).Slice()
	if err != nil {
		return "", err
	}
	if len(res) != 2 {
		return "", fmt.Errorf("inbox: store answered %d values", len(res))
	}
	switch st, _ := res[0].(string); st {
	case "stored":
		return Stored, nil
	case "duplicate":
		return Duplicate, nil
	case "full":
		return Full, nil
	default:
		return "", fmt.Errorf("inbox: store answered %q", st)
	}
}

// Claimed is a delivery a processor holds under a lease.
type Claimed struct {
	Forge jobs.Forge
	// ID is what it is stored under: its Key (or, stored before keys
	// existed, its delivery id).
	ID string
	// Env is the stored form, not yet decoded.
	Env []byte
	// Received and Now are the server's times of receipt and of the claim.
	Received, Now time.Time
	// Tries counts the claims, this one included.
	Tries int
	token string
}

// Age is how long the delivery has been in the inbox, by the server's clock.
func (c *Claimed) Age() time.Duration { return c.Now.Sub(c.Received) }

// Claim takes f's next due delivery under a lease of lease, with token as its
// holder. (nil, wait, nil): nothing is due; the first waiting one is due in
// wait (0: the inbox is empty or was raced).
func (s *Store) Claim(ctx context.Context, f jobs.Forge, token string, lease time.Duration) (*Claimed, time.Duration, error) {
	first, err := s.Client.ZRangeWithScores(ctx, dueKey(f), 0, 0).Result()
	if err != nil || len(first) == 0 {
		return nil, 0, err
	}
	id, ok := first[0].Member.(string)
	if !ok || !ValidID(id) {
		// Never written by Put: take it out, or it blocks the queue.
		return nil, 0, s.Client.ZRem(ctx, dueKey(f), first[0].Member).Err()
	}
	res, err := claimScript.Run(ctx, s.Client, []string{dueKey(f), runKey(f), entryKey(f, id)},
		id, lease.Milliseconds(), token).Slice()
	if err != nil {
		return nil, 0, err
	}
	status, _ := str(res, 0)
	switch status {
	case "wait":
		us, _ := num(res, 1)
		return nil, time.Duration(max(us, 1)) * time.Microsecond, nil
	case "none", "gone":
		return nil, 0, nil
	case "claimed":
	default:
		return nil, 0, fmt.Errorf("inbox: claim answered %q", status)
	}
	c := &Claimed{Forge: f, ID: id, token: token}
	env, _ := str(res, 1)
	recv, _ := strconv.ParseInt(mustStr(res, 2), 10, 64)
	tries, ok1 := num(res, 3)
	now, ok2 := num(res, 4)
	if !ok1 || !ok2 || recv <= 0 || recv > now || tries < 1 {
		// A changed entry: hand it over as is; its decode fails and it is given up.
		recv = max(min(recv, now), 1)
		tries = max(tries, 1)
	}
	c.Env, c.Received, c.Now, c.Tries = []byte(env), time.UnixMicro(recv), time.UnixMicro(now), int(tries)
	return c, 0, nil
}

// Done ends c: processed or given up. false: the lease had ended and another
// processor holds the delivery now; nothing changed.
func (s *Store) Done(ctx context.Context, c *Claimed) (bool, error) {
	n, err := doneScript.Run(ctx, s.Client, []string{runKey(c.Forge), dueKey(c.Forge), entryKey(c.Forge, c.ID)},
		c.ID, c.token).Int64()
	return n == 1, err
}

// Retry puts c back, due after delay, keeping why. false: the lease had
// ended and another processor holds the delivery now; nothing changed.
func (s *Store) Retry(ctx context.Context, c *Claimed, delay time.Duration, why string) (bool, error) {
	due, err := retryScript.Run(ctx, s.Client, []string{runKey(c.Forge), dueKey(c.Forge), entryKey(c.Forge, c.ID)},
		c.ID, c.token, max(delay.Milliseconds(), 0), why).Int64()
	return due != 0, err
}

// Requeue gives f's deliveries whose lease ended back to due, at most limit
// of them, and says how many.
func (s *Store) Requeue(ctx context.Context, f jobs.Forge, limit int) (int, error) {
	n, err := requeueScript.Run(ctx, s.Client, []string{runKey(f), dueKey(f)}, limit).Int64()
	return int(n), err
}

// Length is how many deliveries f's inbox holds: waiting and being processed.
func (s *Store) Length(ctx context.Context, f jobs.Forge) (int64, error) {
	var due, run *redis.IntCmd
	_, err := s.Client.Pipelined(ctx, func(p redis.Pipeliner) error {
		due = p.ZCard(ctx, dueKey(f))
		run = p.ZCard(ctx, runKey(f))
		return nil
	})
	if err != nil {
		return 0, err
	}
	return due.Val() + run.Val(), nil
}

func str(res []any, i int) (string, bool) {
	if i >= len(res) {
		return "", false
	}
	s, ok := res[i].(string)
	return s, ok
}

func mustStr(res []any, i int) string {
	s, _ := str(res, i)
	return s
}

func num(res []any, i int) (int64, bool) {
	if i >= len(res) {
		return 0, false
	}
	n, ok := res[i].(int64)
	return n, ok
}
