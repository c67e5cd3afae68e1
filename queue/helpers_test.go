package queue_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/queue"
)

// testCtx is a context that ends with the test (or after a minute).
func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// setup gives the test its own database and the shared queue in it.
func setup(t *testing.T, cfg queue.Config) (*livetest.ValkeyDB, *queue.Queue) {
	t.Helper()
	db := livetest.Valkey(t)
	q, err := queue.New(db.Client, fleet.SharedQueue, cfg)
	require.NoError(t, err)
	return db, q
}

// serverNow reads the server's clock.
func serverNow(t *testing.T, db *livetest.ValkeyDB) time.Time {
	t.Helper()
	now, err := db.Client.Time(context.Background()).Result()
	require.NoError(t, err)
	return now
}

// add adds a job and requires it was added.
func add(t *testing.T, q *queue.Queue, opts queue.AddOptions) string {
	t.Helper()
	id, added, err := q.Add(testCtx(t), "run", []byte(`{"n":1}`), opts)
	require.NoError(t, err)
	require.True(t, added)
	return id
}

// fetch takes the next job and requires there was one.
func fetch(t *testing.T, q *queue.Queue, token string) *queue.Job {
	t.Helper()
	job, err := q.Fetch(testCtx(t), token)
	require.NoError(t, err)
	require.NotNil(t, job, "expected a job")
	return job
}

func state(t *testing.T, q *queue.Queue, id string) queue.State {
	t.Helper()
	job, err := q.Get(testCtx(t), id)
	require.NoError(t, err)
	return job.State
}

func counts(t *testing.T, q *queue.Queue) queue.Counts {
	t.Helper()
	c, err := q.Counts(testCtx(t))
	require.NoError(t, err)
	return c
}
