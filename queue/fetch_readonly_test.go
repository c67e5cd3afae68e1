package queue_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/queue"
)

// An idle consumer's fetch reads the meta hash and writes none of it, as
// BullMQ 6's own fetch does: after an obliterate (every key of the queue
// deleted), polling the empty queue does not bring the meta hash back, so
// the queue stays gone for Bull Board and for discovery until a producer or
// a worker's start declares it again.
func TestFetchWritesNoMeta(t *testing.T) {
	t.Parallel()
	db := livetest.Valkey(t)
	ctx := testCtx(t)
	q, err := queue.New(db.Client, fleet.SharedQueue, queue.Config{})
	require.NoError(t, err)
	id, _, err := q.Add(ctx, "run", nil, queue.AddOptions{})
	require.NoError(t, err)
	job, err := q.Fetch(ctx, queue.NewToken())
	require.NoError(t, err)
	require.Equal(t, id, job.ID)

	keys, err := db.Client.Keys(ctx, "bull:"+fleet.SharedQueue+":*").Result()
	require.NoError(t, err)
	require.Contains(t, keys, "bull:"+fleet.SharedQueue+":meta")
	require.NoError(t, db.Client.Del(ctx, keys...).Err()) // obliterate

	for range 3 {
		job, err := q.Fetch(ctx, queue.NewToken())
		require.NoError(t, err)
		require.Nil(t, job)
	}
	n, err := db.Client.Exists(ctx, "bull:"+fleet.SharedQueue+":meta").Result()
	require.NoError(t, err)
	require.Zero(t, n, "an idle fetch wrote the meta hash back")

	// Declaring (a worker's start, a producer) brings it back.
	require.NoError(t, q.Declare(ctx))
	n, err = db.Client.Exists(ctx, "bull:"+fleet.SharedQueue+":meta").Result()
	require.NoError(t, err)
	require.Equal(t, int64(1), n)
}
