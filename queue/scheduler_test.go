package queue_test

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pidispatch/pidispatch/queue"
)

func TestScheduler_UpsertTwiceIsOneSchedulerOnePendingRun(t *testing.T) {
	t.Parallel()
	db, q := setup(t, queue.Config{})
	ctx := testCtx(t)
	s := queue.Scheduler{Pattern: "0 3 * * *", JobName: "nightly", Data: json.RawMessage(`{"v":1}`),
		RemoveOnComplete: queue.Keep{Age: 24 * time.Hour}}
	first, err := q.UpsertScheduler(ctx, "nightly", s)
	require.NoError(t, err)
	s.Data = json.RawMessage(`{"v":2}`)
	second, err := q.UpsertScheduler(ctx, "nightly", s)
	require.NoError(t, err)
	require.Equal(t, first, second, "same pattern, same next run")

	now := serverNow(t, db)
	want, err := queue.NextRun("0 3 * * *", "", now)
	require.NoError(t, err)
	require.Equal(t, fmt.Sprintf("repeat:nightly:%d", want.UnixMilli()), second)

	list, err := q.Schedulers(ctx)
	require.NoError(t, err)
	require.Len(t, list, 1)
	require.Equal(t, "nightly", list[0].ID)
	require.Equal(t, "0 3 * * *", list[0].Pattern)
	require.Equal(t, "nightly", list[0].JobName)
	require.JSONEq(t, `{"v":2}`, string(list[0].Data))
	require.Equal(t, 24*time.Hour, list[0].RemoveOnComplete.Age)
	require.True(t, list[0].Next.Equal(want))
	require.Equal(t, queue.Counts{Delayed: 1}, counts(t, q), "exactly one pending run")

	job, err := q.Get(ctx, second)
	require.NoError(t, err)
	require.JSONEq(t, `{"v":2}`, string(job.Data), "the pending run carries the new template")
	require.Equal(t, "nightly", job.SchedulerID)
	require.ErrorIs(t, q.Remove(ctx, second), queue.ErrSchedulerJob)
}

func TestScheduler_TakingARunCreatesTheNext(t *testing.T) {
	t.Parallel()
	db, q := setup(t, queue.Config{})
	ctx := testCtx(t)
	_, err := q.UpsertScheduler(ctx, "tick", queue.Scheduler{Pattern: "* * * * * *", JobName: "tick"})
	require.NoError(t, err)

	var job *queue.Job
	require.Eventually(t, func() bool {
		job, err = q.Fetch(ctx, "t")
		require.NoError(t, err)
		return job != nil
	}, 3*time.Second, 5*time.Millisecond)
	require.Equal(t, "tick", job.SchedulerID)
	taken := millisOf(t, job.ID)

	list, err := q.Schedulers(ctx)
	require.NoError(t, err)
	require.Len(t, list, 1)
	require.Equal(t, taken+1000, list[0].Next.UnixMilli(), "the next run exists as soon as this one is taken")
	require.Equal(t, 2, list[0].Iterations)
	require.Equal(t, queue.Counts{Active: 1, Delayed: 1}, counts(t, q))
	nx, err := db.Client.HGet(ctx, "bull:pi-jobs:repeat:tick", "nx").Result()
	require.NoError(t, err)
	require.Equal(t, strconv.FormatInt(taken+2000, 10), nx, "the run after the next is precomputed")

	// Without a precomputed time (a BullMQ upsert drops it) the consumer
	// computes the next run itself.
	require.NoError(t, db.Client.HDel(ctx, "bull:pi-jobs:repeat:tick", "nx").Err())
	require.Eventually(t, func() bool {
		job, err = q.Fetch(ctx, "t")
		require.NoError(t, err)
		return job != nil
	}, 3*time.Second, 5*time.Millisecond)
	require.Equal(t, taken+1000, millisOf(t, job.ID))
	list, err = q.Schedulers(ctx)
	require.NoError(t, err)
	require.Greater(t, list[0].Next.UnixMilli(), taken+1000)
	require.Equal(t, queue.Counts{Active: 2, Delayed: 1}, counts(t, q), "still exactly one pending run")
}

func TestScheduler_RemoveDeletesPendingRun(t *testing.T) {
	t.Parallel()
	_, q := setup(t, queue.Config{})
	ctx := testCtx(t)
	pending, err := q.UpsertScheduler(ctx, "s", queue.Scheduler{Pattern: "*/5 * * * *", JobName: "x"})
	require.NoError(t, err)
	removed, err := q.RemoveScheduler(ctx, "s")
	require.NoError(t, err)
	require.True(t, removed)
	_, err = q.Get(ctx, pending)
	require.ErrorIs(t, err, queue.ErrNotFound)
	list, err := q.Schedulers(ctx)
	require.NoError(t, err)
	require.Empty(t, list)
	require.Equal(t, queue.Counts{}, counts(t, q))
	removed, err = q.RemoveScheduler(ctx, "s")
	require.NoError(t, err)
	require.False(t, removed)
}

// A run that was taken and put back (a deferral) is no longer the
// scheduler's pending run, but it is still a run of it: removing the
// scheduler removes it too, wherever it waits, and leaves a run that is held
// and the jobs of other schedulers alone.
func TestScheduler_RemoveDeletesDeferredRuns(t *testing.T) {
	t.Parallel()
	_, q := setup(t, queue.Config{})
	ctx := testCtx(t)
	_, err := q.UpsertScheduler(ctx, "s", queue.Scheduler{Pattern: "* * * * * *", JobName: "x"})
	require.NoError(t, err)
	_, err = q.UpsertScheduler(ctx, "s2", queue.Scheduler{Pattern: "0 3 * * *", JobName: "y"})
	require.NoError(t, err)
	take := func() *queue.Job {
		var job *queue.Job
		require.Eventually(t, func() bool {
			job, err = q.Fetch(ctx, "t")
			require.NoError(t, err)
			return job != nil
		}, 5*time.Second, 5*time.Millisecond)
		require.Equal(t, "s", job.SchedulerID)
		return job
	}
	later, ready, held := take(), take(), take()
	require.NoError(t, q.Defer(ctx, later.ID, "t", time.Hour))
	require.NoError(t, q.Defer(ctx, ready.ID, "t", 0))

	removed, err := q.RemoveScheduler(ctx, "s")
	require.NoError(t, err)
	require.True(t, removed)
	for _, id := range []string{later.ID, ready.ID} {
		_, err = q.Get(ctx, id)
		require.ErrorIs(t, err, queue.ErrNotFound, "deferred run %s outlived its scheduler", id)
	}
	job, err := q.Get(ctx, held.ID)
	require.NoError(t, err, "a held run finishes")
	require.Equal(t, queue.StateActive, job.State)
	require.Equal(t, queue.Counts{Active: 1, Delayed: 1}, counts(t, q), "the other scheduler's run stays")
	list, err := q.Schedulers(ctx)
	require.NoError(t, err)
	require.Len(t, list, 1)
	require.Equal(t, "s2", list[0].ID)

	// An id is matched literally, never as a pattern.
	removed, err = q.RemoveScheduler(ctx, "*")
	require.NoError(t, err)
	require.False(t, removed)
	require.Equal(t, queue.Counts{Active: 1, Delayed: 1}, counts(t, q))
}

func TestScheduler_TimeZoneRespected(t *testing.T) {
	t.Parallel()
	db, q := setup(t, queue.Config{})
	ctx := testCtx(t)
	tokyo, err := time.LoadLocation("Asia/Tokyo")
	require.NoError(t, err)
	_, err = q.UpsertScheduler(ctx, "tokyo", queue.Scheduler{Pattern: "30 9 * * *", TZ: "Asia/Tokyo", JobName: "x"})
	require.NoError(t, err)
	_, err = q.UpsertScheduler(ctx, "utc", queue.Scheduler{Pattern: "30 9 * * *", JobName: "x"})
	require.NoError(t, err)
	now := serverNow(t, db)

	list, err := q.Schedulers(ctx)
	require.NoError(t, err)
	require.Len(t, list, 2)
	for _, s := range list {
		loc := time.UTC
		if s.ID == "tokyo" {
			loc = tokyo
			require.Equal(t, "Asia/Tokyo", s.TZ)
		}
		local := s.Next.In(loc)
		require.Equal(t, 9, local.Hour(), s.ID)
		require.Equal(t, 30, local.Minute(), s.ID)
		require.True(t, s.Next.After(now), s.ID)
		require.LessOrEqual(t, s.Next.Sub(now), 24*time.Hour, s.ID)
	}
	require.NotEqual(t, list[0].Next, list[1].Next)
}

func TestScheduler_RejectsBadInput(t *testing.T) {
	t.Parallel()
	db, q := setup(t, queue.Config{})
	ctx := testCtx(t)
	tests := []struct {
		name string
		id   string
		s    queue.Scheduler
	}{
		{"ColonID", "a:b", queue.Scheduler{Pattern: "* * * * *"}},
		{"EmptyID", "", queue.Scheduler{Pattern: "* * * * *"}},
		{"BadPattern", "s", queue.Scheduler{Pattern: "every day"}},
		{"YearField", "s", queue.Scheduler{Pattern: "0 0 1 1 * 2030"}},
		{"SevenFields", "s", queue.Scheduler{Pattern: "0 0 0 1 1 * 2030"}},
		{"BadZone", "s", queue.Scheduler{Pattern: "* * * * *", TZ: "Mars/Olympus"}},
		{"LocalZone", "s", queue.Scheduler{Pattern: "* * * * *", TZ: "Local"}},
		{"BadData", "s", queue.Scheduler{Pattern: "* * * * *", Data: json.RawMessage(`[`)}},
		{"BadAttempts", "s", queue.Scheduler{Pattern: "* * * * *", Attempts: -2}},
	}
	for _, tt := range tests {
		_, err := q.UpsertScheduler(ctx, tt.id, tt.s)
		require.ErrorIs(t, err, queue.ErrInvalidOption, tt.name)
	}
	n, err := db.Client.DBSize(ctx).Result()
	require.NoError(t, err)
	require.Zero(t, n)
}

func millisOf(t *testing.T, jobID string) int64 {
	t.Helper()
	i := strings.LastIndex(jobID, ":")
	require.True(t, strings.HasPrefix(jobID, "repeat:") && i > 0, jobID)
	ms, err := strconv.ParseInt(jobID[i+1:], 10, 64)
	require.NoError(t, err)
	return ms
}
