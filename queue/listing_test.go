package queue_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/queue"
)

// List names waiting and delayed jobs apart, a delayed one with when it is due.
func TestListWaitingAndDelayed(t *testing.T) {
	db := livetest.Valkey(t)
	ctx := context.Background()
	q, err := queue.New(db.Client, "pi-jobs", queue.Config{})
	require.NoError(t, err)
	for _, id := range []string{"a", "b"} {
		_, _, err := q.Add(ctx, "j", json.RawMessage(`{}`), queue.AddOptions{JobID: id})
		require.NoError(t, err)
	}
	before := time.Now()
	_, _, err = q.Add(ctx, "j", json.RawMessage(`{}`), queue.AddOptions{JobID: "later", Delay: time.Hour})
	require.NoError(t, err)
	l, err := q.List(ctx, 10)
	require.NoError(t, err)
	require.Equal(t, []string{"a", "b"}, l.Waiting)
	require.Len(t, l.Delayed, 1)
	require.Equal(t, "later", l.Delayed[0].ID)
	require.WithinDuration(t, before.Add(time.Hour), l.Delayed[0].Until, 5*time.Second)
}
