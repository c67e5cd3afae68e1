package queue_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/queue"
)

func TestNew_RefusesBadNamesAndConfig(t *testing.T) {
	t.Parallel()
	db := livetest.Valkey(t)
	for _, name := range []string{"", "other", "pi-jobs@", "pi-jobs@bad name", "pi-jobs@x.JSON", "pi-jobs@a:b", "bull:pi-jobs"} {
		_, err := queue.New(db.Client, name, queue.Config{})
		require.ErrorIs(t, err, queue.ErrInvalidQueueName, name)
	}
	_, err := queue.New(db.Client, fleet.SharedQueue, queue.Config{MaxStalledCount: -1})
	require.ErrorIs(t, err, queue.ErrInvalidOption)
	q, err := queue.New(db.Client, fleet.HostQueueName("w1"), queue.Config{})
	require.NoError(t, err)
	require.Equal(t, "pi-jobs@w1", q.Name())
}

func TestQueue_AddGetRemove(t *testing.T) {
	t.Parallel()
	db, q := setup(t, queue.Config{})
	ctx := testCtx(t)

	before := serverNow(t, db)
	id, added, err := q.Add(ctx, "run", json.RawMessage(`{"folder":"/x"}`), queue.AddOptions{})
	require.NoError(t, err)
	require.True(t, added)
	require.Equal(t, "1", id, "ids without a custom id come from BullMQ's counter")

	job, err := q.Get(ctx, id)
	require.NoError(t, err)
	require.Equal(t, queue.StateWaiting, job.State)
	require.Equal(t, "run", job.Name)
	require.JSONEq(t, `{"folder":"/x"}`, string(job.Data))
	require.WithinDuration(t, before, job.Timestamp, 2*time.Second, "timestamp is the server's clock")

	custom, added, err := q.Add(ctx, "run", nil, queue.AddOptions{JobID: "gh-abc"})
	require.NoError(t, err)
	require.True(t, added)
	require.Equal(t, "gh-abc", custom)
	again, added, err := q.Add(ctx, "other", json.RawMessage(`{"v":2}`), queue.AddOptions{JobID: "gh-abc"})
	require.NoError(t, err)
	require.False(t, added, "an existing id is not added again")
	require.Equal(t, "gh-abc", again)
	job, err = q.Get(ctx, "gh-abc")
	require.NoError(t, err)
	require.Equal(t, "run", job.Name, "the first job is untouched")
	require.JSONEq(t, `{}`, string(job.Data))
	require.Equal(t, int64(2), counts(t, q).Waiting)

	require.NoError(t, q.Remove(ctx, "gh-abc"))
	_, err = q.Get(ctx, "gh-abc")
	require.ErrorIs(t, err, queue.ErrNotFound)
	require.ErrorIs(t, q.Remove(ctx, "gh-abc"), queue.ErrNotFound)
	require.Equal(t, int64(1), counts(t, q).Waiting)

	held := fetch(t, q, "tok")
	require.ErrorIs(t, q.Remove(ctx, held.ID), queue.ErrJobLocked)
	require.Equal(t, queue.StateActive, state(t, q, held.ID))
}

func TestQueue_AddRejectsBadInputWritingNothing(t *testing.T) {
	t.Parallel()
	db, q := setup(t, queue.Config{})
	ctx := testCtx(t)
	good := json.RawMessage(`{}`)
	tests := []struct {
		name  string
		job   string
		data  json.RawMessage
		opts  queue.AddOptions
		field string
	}{
		{"DataNotJSON", "run", json.RawMessage(`{nope`), queue.AddOptions{}, "data"},
		{"NameInvalidUTF8", "r\xffn", good, queue.AddOptions{}, "name"},
		{"NameNUL", "r\x00n", good, queue.AddOptions{}, "name"},
		{"NegativeDelay", "run", good, queue.AddOptions{Delay: -time.Second}, "Delay"},
		{"NegativeAttempts", "run", good, queue.AddOptions{Attempts: -1}, "Attempts"},
		{"UnknownBackoff", "run", good, queue.AddOptions{Backoff: queue.Backoff{Type: "linear", Delay: time.Second}}, "Backoff.Type"},
		{"NegativeBackoff", "run", good, queue.AddOptions{Backoff: queue.Backoff{Type: queue.BackoffFixed, Delay: -1}}, "Backoff.Delay"},
		{"Jitter", "run", good, queue.AddOptions{Backoff: queue.Backoff{Type: queue.BackoffFixed, Jitter: 1.5}}, "Backoff.Jitter"},
		{"Priority", "run", good, queue.AddOptions{Priority: queue.PriorityLimit + 1}, "Priority"},
		{"IntegerID", "run", good, queue.AddOptions{JobID: "123"}, "JobID"},
		{"ColonID", "run", good, queue.AddOptions{JobID: "a:b"}, "JobID"},
		{"NULID", "run", good, queue.AddOptions{JobID: "a\x00b"}, "JobID"},
		{"HugeID", "run", good, queue.AddOptions{JobID: strings.Repeat("x", 513)}, "JobID"},
		{"IDOverTheRule", "run", good, queue.AddOptions{JobID: strings.Repeat("x", fleet.MaxJobIDBytes+1)}, "JobID"},
		{"IDWithC1Control", "run", good, queue.AddOptions{JobID: "a\u0085b"}, "JobID"},
		{"KeepCount", "run", good, queue.AddOptions{RemoveOnComplete: queue.Keep{Count: -1}}, "RemoveOnComplete.Count"},
		{"KeepAge", "run", good, queue.AddOptions{RemoveOnFail: queue.Keep{Age: -time.Second}}, "RemoveOnFail.Age"},
		{"DedupEmpty", "run", good, queue.AddOptions{Dedup: &queue.Dedup{}}, "Dedup.ID"},
		{"DedupTTL", "run", good, queue.AddOptions{Dedup: &queue.Dedup{ID: "d", TTL: -1}}, "Dedup.TTL"},
	}
	for _, tt := range tests {
		_, _, err := q.Add(ctx, tt.job, tt.data, tt.opts)
		require.ErrorIs(t, err, queue.ErrInvalidOption, tt.name)
		var oe *queue.OptionError
		require.True(t, errors.As(err, &oe), tt.name)
		require.Equal(t, tt.field, oe.Field, tt.name)
	}
	n, err := db.Client.DBSize(ctx).Result()
	require.NoError(t, err)
	require.Zero(t, n, "a refused add writes nothing")
}

func TestQueue_DedupWithTTL(t *testing.T) {
	t.Parallel()
	db, q := setup(t, queue.Config{})
	ctx := testCtx(t)

	first := add(t, q, queue.AddOptions{Dedup: &queue.Dedup{ID: "repo#1:fix", TTL: 300 * time.Millisecond}})
	id, added, err := q.Add(ctx, "run", nil, queue.AddOptions{Dedup: &queue.Dedup{ID: "repo#1:fix", TTL: 300 * time.Millisecond}})
	require.NoError(t, err)
	require.False(t, added)
	require.Equal(t, first, id, "the holder of the dedup id is reported")
	job, err := q.Get(ctx, first)
	require.NoError(t, err)
	require.Equal(t, "repo#1:fix", job.DedupID)
	pttl, err := db.Client.PTTL(ctx, "bull:pi-jobs:de:repo#1:fix").Result()
	require.NoError(t, err)
	require.Greater(t, pttl, time.Duration(0), "BullMQ's de:<id> key carries the TTL")

	time.Sleep(350 * time.Millisecond)
	second, added, err := q.Add(ctx, "run", nil, queue.AddOptions{Dedup: &queue.Dedup{ID: "repo#1:fix", TTL: 300 * time.Millisecond}})
	require.NoError(t, err)
	require.True(t, added, "after the TTL the id is free")
	require.NotEqual(t, first, second)
}

func TestQueue_DedupUntilFinished(t *testing.T) {
	t.Parallel()
	_, q := setup(t, queue.Config{})
	ctx := testCtx(t)
	first := add(t, q, queue.AddOptions{Dedup: &queue.Dedup{ID: "k"}})
	_, added, err := q.Add(ctx, "run", nil, queue.AddOptions{Dedup: &queue.Dedup{ID: "k"}})
	require.NoError(t, err)
	require.False(t, added)

	job := fetch(t, q, "t")
	require.Equal(t, first, job.ID)
	require.NoError(t, q.Complete(ctx, job.ID, "t", nil))
	_, added, err = q.Add(ctx, "run", nil, queue.AddOptions{Dedup: &queue.Dedup{ID: "k"}})
	require.NoError(t, err)
	require.True(t, added, "the dedup id is released when its job finishes")
}

func TestQueue_PauseBlocksFetch(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		layout queue.Layout
		held   queue.Counts
		state  queue.State
	}{
		// BullMQ 6 keeps a paused queue's ready jobs in wait; 5 moves them.
		{queue.Layout6, queue.Counts{Waiting: 3}, queue.StateWaiting},
		{queue.Layout5, queue.Counts{Paused: 3}, queue.StatePaused},
	} {
		t.Run(fmt.Sprintf("layout%d", tc.layout), func(t *testing.T) {
			t.Parallel()
			_, q := setup(t, queue.Config{Layout: tc.layout})
			ctx := testCtx(t)
			a := add(t, q, queue.AddOptions{})
			b := add(t, q, queue.AddOptions{})

			require.NoError(t, q.Pause(ctx))
			paused, err := q.IsPaused(ctx)
			require.NoError(t, err)
			require.True(t, paused)
			job, err := q.Fetch(ctx, "t")
			require.NoError(t, err)
			require.Nil(t, job, "a paused queue gives nothing")
			c := add(t, q, queue.AddOptions{})
			require.Equal(t, tc.held, counts(t, q))
			require.Equal(t, tc.state, state(t, q, c))

			require.NoError(t, q.Resume(ctx))
			paused, err = q.IsPaused(ctx)
			require.NoError(t, err)
			require.False(t, paused)
			for _, want := range []string{a, b, c} {
				require.Equal(t, want, fetch(t, q, "t").ID, "FIFO survives a pause")
			}
		})
	}
}

func TestSetPaused_ManyQueuesOneCall(t *testing.T) {
	t.Parallel()
	db := livetest.Valkey(t)
	ctx := testCtx(t)
	var qs []*queue.Queue
	for _, n := range []string{fleet.SharedQueue, fleet.HostQueueName("a"), fleet.HostQueueName("b")} {
		q, err := queue.New(db.Client, n, queue.Config{})
		require.NoError(t, err)
		qs = append(qs, q)
	}
	require.NoError(t, queue.SetPaused(ctx, true, qs...))
	for _, q := range qs {
		p, err := q.IsPaused(ctx)
		require.NoError(t, err)
		require.True(t, p, q.Name())
	}
	require.NoError(t, queue.SetPaused(ctx, false, qs...))
	for _, q := range qs {
		p, err := q.IsPaused(ctx)
		require.NoError(t, err)
		require.False(t, p, q.Name())
	}
}

func TestQueue_CountsPerState(t *testing.T) {
	t.Parallel()
	_, q := setup(t, queue.Config{})
	ctx := testCtx(t)
	done := add(t, q, queue.AddOptions{})
	bad := add(t, q, queue.AddOptions{})
	add(t, q, queue.AddOptions{})
	add(t, q, queue.AddOptions{})
	add(t, q, queue.AddOptions{Delay: time.Hour})
	prio := add(t, q, queue.AddOptions{Priority: 5})

	require.Equal(t, done, fetch(t, q, "t").ID)
	require.NoError(t, q.Complete(ctx, done, "t", json.RawMessage(`1`)))
	require.Equal(t, bad, fetch(t, q, "t").ID)
	retried, err := q.Fail(ctx, bad, "t", "boom", queue.FailOptions{})
	require.NoError(t, err)
	require.False(t, retried)
	fetch(t, q, "t") // one active

	require.Equal(t, queue.Counts{Waiting: 1, Active: 1, Delayed: 1, Prioritized: 1, Completed: 1, Failed: 1}, counts(t, q))
	require.Equal(t, queue.StatePrioritized, state(t, q, prio))
}

func TestQueue_PriorityOrder(t *testing.T) {
	t.Parallel()
	_, q := setup(t, queue.Config{})
	low := add(t, q, queue.AddOptions{Priority: 10})
	high := add(t, q, queue.AddOptions{Priority: 1})
	plain := add(t, q, queue.AddOptions{})
	for _, want := range []string{plain, high, low} {
		require.Equal(t, want, fetch(t, q, "t").ID, "no priority first, then lower numbers")
	}
}

func TestQueue_Retention(t *testing.T) {
	t.Parallel()
	_, q := setup(t, queue.Config{})
	ctx := testCtx(t)
	finish := func(opts queue.AddOptions, fail bool) string {
		id := add(t, q, opts)
		job := fetch(t, q, "t")
		require.Equal(t, id, job.ID)
		if fail {
			_, err := q.Fail(ctx, id, "t", "x", queue.FailOptions{})
			require.NoError(t, err)
		} else {
			require.NoError(t, q.Complete(ctx, id, "t", nil))
		}
		return id
	}
	gone := func(id string) bool {
		_, err := q.Get(ctx, id)
		return errors.Is(err, queue.ErrNotFound)
	}

	byCount := queue.AddOptions{RemoveOnComplete: queue.Keep{Count: 2}}
	ids := []string{finish(byCount, false), finish(byCount, false), finish(byCount, false), finish(byCount, false)}
	require.Equal(t, int64(2), counts(t, q).Completed)
	require.True(t, gone(ids[0]))
	require.True(t, gone(ids[1]))
	require.False(t, gone(ids[3]))

	none := finish(queue.AddOptions{RemoveOnComplete: queue.Keep{None: true}}, false)
	require.True(t, gone(none), "Keep{None} deletes on completion")
	require.Equal(t, int64(2), counts(t, q).Completed)

	byAge := queue.AddOptions{RemoveOnFail: queue.Keep{Age: 300 * time.Millisecond}}
	old := finish(byAge, true)
	time.Sleep(400 * time.Millisecond)
	fresh := finish(byAge, true)
	require.True(t, gone(old), "a failed job older than Age goes when the next one fails")
	require.False(t, gone(fresh))
	require.Equal(t, int64(1), counts(t, q).Failed)
}

func TestQueue_GlobalConcurrencySetByBullMQ(t *testing.T) {
	t.Parallel()
	db, q := setup(t, queue.Config{})
	ctx := testCtx(t)
	// BullMQ's queue.setGlobalConcurrency(1) writes this field.
	require.NoError(t, db.Client.HSet(ctx, "bull:pi-jobs:meta", "concurrency", 1).Err())
	first := add(t, q, queue.AddOptions{})
	add(t, q, queue.AddOptions{})
	require.Equal(t, first, fetch(t, q, "t").ID)
	job, err := q.Fetch(ctx, "t")
	require.NoError(t, err)
	require.Nil(t, job, "one active job at most")

	require.NoError(t, q.Complete(ctx, first, "t", nil))
	woke, err := queue.WaitAny(ctx, db.Client, time.Second, q)
	require.NoError(t, err)
	require.NotNil(t, woke, "finishing a job wakes consumers of a maxed queue")
	require.NotNil(t, fetch(t, q, "t"))
}

func TestQueue_JunkFromPeersGivesDefinedResults(t *testing.T) {
	t.Parallel()
	db, q := setup(t, queue.Config{})
	ctx := testCtx(t)
	// A ghost id (no job hash) ahead of a job whose fields are junk, and junk
	// in the meta hash.
	require.NoError(t, db.Client.HSet(ctx, "bull:pi-jobs:junk", "name", "x", "data", "{nope",
		"opts", "\xff", "priority", "high", "timestamp", "yesterday", "atm", "-").Err())
	require.NoError(t, db.Client.LPush(ctx, "bull:pi-jobs:wait", "ghost", "junk").Err())
	require.NoError(t, db.Client.HSet(ctx, "bull:pi-jobs:meta", "concurrency", "lots", "opts.maxLenEvents", "many").Err())

	job := fetch(t, q, "t")
	require.Equal(t, "junk", job.ID, "the ghost id is dropped")
	require.Equal(t, "x", job.Name)
	require.Nil(t, job.Data)
	require.Contains(t, job.Corrupt, "data")
	require.True(t, job.Timestamp.IsZero())
	retried, err := q.Fail(ctx, job.ID, "t", job.Corrupt, queue.FailOptions{})
	require.NoError(t, err)
	require.False(t, retried)
	require.Equal(t, queue.Counts{Failed: 1}, counts(t, q))

	_, err = q.Get(ctx, "")
	require.ErrorIs(t, err, queue.ErrInvalidOption)
	_, err = q.Get(ctx, "nope\x00")
	require.ErrorIs(t, err, queue.ErrNotFound)
}
