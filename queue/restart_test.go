package queue_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/queue"
	"github.com/pidispatch/pidispatch/valkey"
)

// A consumer that was not waiting while Valkey restarted (a worker whose
// slots were all busy) keeps a dedicated blocking connection the server
// closed. Its next Next, after the server is back, must not fail on it.
// Before, that first BZPOPMIN failed with EOF, and the worker logged a
// queue_fetch_failed long after Valkey had recovered.
func TestConsumer_IdleConnectionSurvivesARestart(t *testing.T) {
	t.Parallel()
	srv := livetest.StartServer(t)
	client, err := valkey.NewClient(srv.URL(), valkey.Options{})
	require.NoError(t, err)
	defer client.Close()
	a, err := queue.New(client, fleet.SharedQueue, queue.Config{WorkerName: "w1"})
	require.NoError(t, err)
	b, err := queue.New(client, fleet.HostQueueName("w1"), queue.Config{WorkerName: "w1"})
	require.NoError(t, err)
	c, err := queue.NewConsumer([]*queue.Queue{a, b}, queue.ConsumerConfig{})
	require.NoError(t, err)
	defer c.Close()

	// One wait on the dedicated connection, then the consumer is left alone.
	first, cancel := context.WithTimeout(testCtx(t), 500*time.Millisecond)
	_, _, err = c.Next(first, queue.NewToken())
	cancel()
	require.ErrorIs(t, err, context.DeadlineExceeded)
	srv.Stop()
	srv.Start()
	require.NoError(t, client.Ping(testCtx(t)).Err(), "the server is back")

	ctx, cancel := context.WithTimeout(testCtx(t), 2*time.Second)
	defer cancel()
	_, job, err := c.Next(ctx, queue.NewToken())
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Next after the restart: %v %v, want a plain wait ending at its deadline", job, err)
	}
	// And it still wakes for a job.
	add(t, a, queue.AddOptions{JobID: "after-restart"})
	q, job, err := c.Next(testCtx(t), queue.NewToken())
	require.NoError(t, err)
	require.Equal(t, "after-restart", job.ID)
	require.Equal(t, a, q)
}
