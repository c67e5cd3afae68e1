package queue_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/queue"
)

func TestDiscover_FullScanRevalidatesNames(t *testing.T) {
	t.Parallel()
	db := livetest.Valkey(t)
	ctx := testCtx(t)
	for _, name := range []string{fleet.SharedQueue, fleet.HostQueueName("b-2"), fleet.HostQueueName("a.1")} {
		q, err := queue.New(db.Client, name, queue.Config{})
		require.NoError(t, err)
		require.NoError(t, q.Declare(ctx))
	}
	// A queue that got its meta from a job rather than Declare.
	c, err := queue.New(db.Client, fleet.HostQueueName("c"), queue.Config{})
	require.NoError(t, err)
	add(t, c, queue.AddOptions{})

	// Junk a peer could have written, and enough unrelated keys that the
	// scan takes many pages.
	for _, junk := range []string{
		"bull:pi-jobs@:meta", "bull:pi-jobs@x:y:meta", "bull:pi-jobs@evil.json:meta",
		"bull:pi-jobs@-dash:meta", "bull:pi-jobs@sp ace:meta", "bull:pi-jobs@\xff:meta",
		"other:pi-jobs@z:meta", "bull:pi-jobs@d:wait",
	} {
		require.NoError(t, db.Client.HSet(ctx, junk, "x", 1).Err())
	}
	pipe := db.Client.Pipeline()
	for i := range 3000 {
		pipe.Set(ctx, fmt.Sprintf("filler:%d", i), 1, 0)
	}
	_, err = pipe.Exec(ctx)
	require.NoError(t, err)

	names, err := queue.Discover(ctx, db.Client, "")
	require.NoError(t, err)
	require.Equal(t, []string{"pi-jobs@a.1", "pi-jobs@b-2", "pi-jobs@c"}, names)
}

func TestDiscover_IncompleteScanSaysSo(t *testing.T) {
	t.Parallel()
	db := livetest.Valkey(t)
	q, err := queue.New(db.Client, fleet.HostQueueName("a"), queue.Config{})
	require.NoError(t, err)
	require.NoError(t, q.Declare(testCtx(t)))

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	names, err := queue.Discover(ctx, db.Client, "bull")
	require.Nil(t, names, "never a silent partial list")
	require.ErrorIs(t, err, queue.ErrDiscoveryIncomplete)
	require.ErrorIs(t, err, context.Canceled)
	var de *queue.DiscoveryError
	require.True(t, errors.As(err, &de))
}
