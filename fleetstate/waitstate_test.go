package fleetstate

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
)

var testBounds = dispatch.HoldBounds{AfterMax: 30 * 24 * time.Hour, WaitMax: time.Hour}

// The hold state's transitions, against a live Valkey: a fresh hold, rounds
// that count and reset, a release, and the end that leaves nothing behind.
func TestHoldsLifecycle(t *testing.T) {
	t.Parallel()
	db := livetest.Valkey(t)
	ctx := context.Background()
	h := NewHolds(db.Client, HoldsConfig{})
	t.Cleanup(func() { require.NoError(t, h.Close(context.Background())) })

	st, err := h.Begin(ctx, "gh-1", "", testBounds)
	require.NoError(t, err)
	require.True(t, st.Fresh)
	require.False(t, st.Lost || st.Released || st.Superseded)
	require.Zero(t, st.Checks)
	require.WithinDuration(t, time.Now(), st.Since, 5*time.Second, "server time")
	require.Equal(t, st.Since, st.Now)
	require.True(t, st.AfterAt.IsZero())
	since := st.Since
	n, err := HeldCount(ctx, db.Client)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	pttl := db.Client.PTTL(ctx, WaitJobKey("gh-1")).Val()
	require.InDelta(t, (time.Hour + holdStateMargin).Seconds(), pttl.Seconds(), 10, "expires at the deadline plus the margin")

	// Rounds: not met, fault, fault, then a throttle and a round that met one.
	st, err = h.Checked(ctx, "gh-1", "", dispatch.CheckOutcome{})
	require.NoError(t, err)
	require.Equal(t, 1, st.Checks)
	for want := 1; want <= 2; want++ {
		st, err = h.Checked(ctx, "gh-1", "", dispatch.CheckOutcome{Fault: true})
		require.NoError(t, err)
		require.Equal(t, want, st.Faults, "faults in a row")
	}
	st, err = h.Throttled(ctx, "gh-1", "")
	require.NoError(t, err)
	require.Equal(t, 1, st.Throttles)
	st, err = h.Throttled(ctx, "gh-1", "")
	require.NoError(t, err)
	require.Equal(t, 2, st.Throttles)
	require.Equal(t, 3, st.Checks, "a denied round is not a check")
	st, err = h.Checked(ctx, "gh-1", "", dispatch.CheckOutcome{Met: 0b01})
	require.NoError(t, err)
	require.Equal(t, dispatch.HoldState{Now: st.Now, Since: since, Checks: 4, Met: 0b01}, st, "a clean round resets faults and throttles")

	// Another host picks the job up: the same state, not a new hold.
	other := NewHolds(db.Client, HoldsConfig{})
	st, err = other.Begin(ctx, "gh-1", "", testBounds)
	require.NoError(t, err)
	require.False(t, st.Fresh)
	require.Equal(t, since, st.Since)
	require.Equal(t, 4, st.Checks)
	require.Equal(t, uint8(0b01), st.Met)

	// Every condition met: released, no longer counted as held, and a later
	// pickup (the job deferred by a later gate) is not held again.
	st, err = h.Checked(ctx, "gh-1", "", dispatch.CheckOutcome{Met: 0b11, AllMet: true})
	require.NoError(t, err)
	require.True(t, st.Released)
	n, err = HeldCount(ctx, db.Client)
	require.NoError(t, err)
	require.Zero(t, n)
	st, err = h.Begin(ctx, "gh-1", "", testBounds)
	require.NoError(t, err)
	require.True(t, st.Released)
	require.False(t, st.Fresh)

	require.NoError(t, h.End(ctx, "gh-1"))
	require.Zero(t, db.Client.Exists(ctx, WaitJobKey("gh-1"), WaitHeldKey).Val())
	st, err = h.Checked(ctx, "gh-1", "", dispatch.CheckOutcome{})
	require.NoError(t, err)
	require.True(t, st.Lost, "a round recorded after the end finds nothing")
	require.Zero(t, db.Client.Exists(ctx, WaitJobKey("gh-1")).Val(), "and creates nothing")
	require.NoError(t, h.End(ctx, "gh-1"), "ending twice is fine")
}

func TestHoldsAfter(t *testing.T) {
	t.Parallel()
	db := livetest.Valkey(t)
	ctx := context.Background()
	h := NewHolds(db.Client, HoldsConfig{})

	st, err := h.Begin(ctx, "a", "", dispatch.HoldBounds{AfterDelay: 90 * time.Minute, AfterMax: 24 * time.Hour, WaitMax: time.Hour})
	require.NoError(t, err)
	require.Equal(t, st.Since.Add(90*time.Minute), st.AfterAt, "a delay counts from the hold's start")
	// The deadline is an hour past the after instant: the state lives that long.
	pttl := db.Client.PTTL(ctx, WaitJobKey("a")).Val()
	require.InDelta(t, (90*time.Minute + time.Hour + holdStateMargin).Seconds(), pttl.Seconds(), 10)
	// Read again later: the instant does not move.
	st2, err := h.Begin(ctx, "a", "", dispatch.HoldBounds{AfterDelay: 90 * time.Minute, AfterMax: 24 * time.Hour, WaitMax: time.Hour})
	require.NoError(t, err)
	require.Equal(t, st.AfterAt, st2.AfterAt)

	at := time.Now().Add(2 * time.Hour).Truncate(time.Millisecond)
	st, err = h.Begin(ctx, "b", "", dispatch.HoldBounds{AfterDelay: time.Minute, AfterAt: at, AfterMax: 24 * time.Hour, WaitMax: time.Hour})
	require.NoError(t, err)
	require.True(t, at.Equal(st.AfterAt), "the later of the delay and the instant")

	// An instant far past the cap: reported as it is (the worker refuses it), but
	// the state's lifetime is capped.
	far := time.Now().Add(365 * 24 * time.Hour)
	st, err = h.Begin(ctx, "c", "", dispatch.HoldBounds{AfterAt: far, AfterMax: 24 * time.Hour, WaitMax: time.Hour})
	require.NoError(t, err)
	require.Greater(t, st.AfterAt.Sub(st.Since), 24*time.Hour)
	require.Less(t, db.Client.PTTL(ctx, WaitJobKey("c")).Val(), 27*time.Hour)
}

// A newer delivery of a dedup id takes the wait over; the older hold learns it
// at its next round, records nothing more, and its end leaves the newer
// holder's key alone.
func TestHoldsSupersede(t *testing.T) {
	t.Parallel()
	db := livetest.Valkey(t)
	ctx := context.Background()
	h := NewHolds(db.Client, HoldsConfig{})
	const dedup = "acme/web#12:review"

	st, err := h.Begin(ctx, "gh-old", dedup, testBounds)
	require.NoError(t, err)
	require.Empty(t, st.Previous)
	require.Equal(t, "gh-old", db.Client.Get(ctx, WaitDedupKey(dedup)).Val())
	_, err = h.Checked(ctx, "gh-old", dedup, dispatch.CheckOutcome{})
	require.NoError(t, err)

	st, err = h.Begin(ctx, "gh-new", dedup, testBounds)
	require.NoError(t, err)
	require.True(t, st.Fresh)
	require.Equal(t, "gh-old", st.Previous)
	require.False(t, st.Superseded)
	require.Equal(t, "gh-new", db.Client.Get(ctx, WaitDedupKey(dedup)).Val())
	require.Greater(t, db.Client.PTTL(ctx, WaitDedupKey(dedup)).Val(), time.Hour)

	// The key alone tells the older hold; the mark keeps telling it after the
	// newer one ended and its key is gone.
	st, err = h.Begin(ctx, "gh-old", dedup, testBounds)
	require.NoError(t, err)
	require.True(t, st.Superseded)
	require.NoError(t, h.Supersede(ctx, "gh-old"))
	require.NoError(t, h.Supersede(ctx, "gh-nobody"), "marking a hold that does not exist does nothing")
	require.Zero(t, db.Client.Exists(ctx, WaitJobKey("gh-nobody")).Val())

	require.NoError(t, h.End(ctx, "gh-new"))
	require.Zero(t, db.Client.Exists(ctx, WaitDedupKey(dedup)).Val(), "the ending holder's key goes")
	st, err = h.Begin(ctx, "gh-old", dedup, testBounds)
	require.NoError(t, err)
	require.True(t, st.Superseded, "still superseded")
	require.Zero(t, db.Client.Exists(ctx, WaitDedupKey(dedup)).Val(), "a superseded hold never re-takes the key")
	st, err = h.Checked(ctx, "gh-old", dedup, dispatch.CheckOutcome{Met: 1, AllMet: true})
	require.NoError(t, err)
	require.True(t, st.Superseded)
	require.False(t, st.Released, "a superseded hold is never released")
	require.Equal(t, 1, st.Checks, "and records nothing")
	st, err = h.Release(ctx, "gh-old", dedup)
	require.NoError(t, err)
	require.False(t, st.Released)

	// An older holder's end never deletes a newer holder's key.
	_, err = h.Begin(ctx, "gh-newest", dedup, testBounds)
	require.NoError(t, err)
	require.NoError(t, h.End(ctx, "gh-old"))
	require.Equal(t, "gh-newest", db.Client.Get(ctx, WaitDedupKey(dedup)).Val())

	// A hold in progress whose key vanished (expired) re-takes it.
	require.NoError(t, db.Client.Del(ctx, WaitDedupKey(dedup)).Err())
	st, err = h.Begin(ctx, "gh-newest", dedup, testBounds)
	require.NoError(t, err)
	require.False(t, st.Superseded)
	require.Equal(t, "gh-newest", db.Client.Get(ctx, WaitDedupKey(dedup)).Val())
}

// HeldCount prunes ids whose state is gone; RemoveHold deletes a hold; junk a
// peer wrote reads as zero, never as an error or a panic.
func TestHeldCountRemoveHoldAndJunk(t *testing.T) {
	t.Parallel()
	db := livetest.Valkey(t)
	ctx := context.Background()
	h := NewHolds(db.Client, HoldsConfig{})
	for i := range 700 { // more than one scan batch
		_, err := h.Begin(ctx, "job-"+strconv.Itoa(i), "d-"+strconv.Itoa(i%3), testBounds)
		require.NoError(t, err)
	}
	require.NoError(t, db.Client.SAdd(ctx, WaitHeldKey, "ghost-1", "ghost-2").Err())
	require.NoError(t, db.Client.Del(ctx, WaitJobKey("job-5")).Err()) // expired behind the set's back
	n, err := HeldCount(ctx, db.Client)
	require.NoError(t, err)
	require.Equal(t, 699, n)
	require.Equal(t, int64(699), db.Client.SCard(ctx, WaitHeldKey).Val(), "ghosts pruned")

	require.NoError(t, RemoveHold(ctx, db.Client, "job-0"))
	require.Zero(t, db.Client.Exists(ctx, WaitJobKey("job-0")).Val())
	require.Equal(t, "job-699", db.Client.Get(ctx, WaitDedupKey("d-0")).Val(), "job-699 holds d-0 now: its key is left alone")
	require.NoError(t, RemoveHold(ctx, db.Client, "job-699"))
	require.Zero(t, db.Client.Exists(ctx, WaitJobKey("job-699"), WaitDedupKey("d-0")).Val())
	require.NoError(t, RemoveHold(ctx, db.Client, "job-699"), "twice is fine")
	n, err = HeldCount(ctx, db.Client)
	require.NoError(t, err)
	require.Equal(t, 697, n)

	require.NoError(t, db.Client.HSet(ctx, WaitJobKey("junk"), "since", "yesterday", "checks", "-4", "faults", "1e99", "met", "\x00", "released", "maybe").Err())
	st, err := h.Begin(ctx, "junk", "", testBounds)
	require.NoError(t, err)
	require.False(t, st.Fresh)
	require.WithinDuration(t, time.Now(), st.Since, 5*time.Second, "an unreadable start is reset to now")
	require.Zero(t, st.Checks)
	require.Zero(t, st.Faults)
	require.Zero(t, st.Met)
	require.False(t, st.Released)
	st, err = h.Checked(ctx, "junk", "", dispatch.CheckOutcome{Fault: true})
	require.NoError(t, err)
	require.Equal(t, 1, st.Checks)
	require.Equal(t, 1, st.Faults)

	// An unreachable Valkey is an error, bounded.
	rc := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", DialTimeout: time.Second, MaxRetries: -1})
	t.Cleanup(func() { _ = rc.Close() })
	dead := NewHolds(rc, HoldsConfig{CallTimeout: 300 * time.Millisecond})
	start := time.Now()
	_, err = dead.Begin(ctx, "x", "", testBounds)
	require.Error(t, err)
	require.Less(t, time.Since(start), 10*300*time.Millisecond, "a hang-catching bound, 10x the call timeout")
	require.NoError(t, dead.Close(ctx))
}
