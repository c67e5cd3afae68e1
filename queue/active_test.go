package queue_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pidispatch/pidispatch/queue"
)

// Active lists the jobs consumers hold, oldest first, and only those.
func TestActiveListsHeldJobsOldestFirst(t *testing.T) {
	_, q := setup(t, queue.Config{})
	ctx := testCtx(t)
	first := add(t, q, queue.AddOptions{JobID: "first"})
	second := add(t, q, queue.AddOptions{JobID: "second"})
	add(t, q, queue.AddOptions{JobID: "waits"})
	fetch(t, q, queue.NewToken())
	fetch(t, q, queue.NewToken())

	ids, err := q.ActiveIDs(ctx, 10)
	require.NoError(t, err)
	require.Equal(t, []string{first, second}, ids)
	ids, err = q.ActiveIDs(ctx, 1)
	require.NoError(t, err)
	require.Equal(t, []string{first}, ids)

	jobs, err := q.Active(ctx, 10)
	require.NoError(t, err)
	require.Len(t, jobs, 2)
	require.Equal(t, queue.StateActive, jobs[0].State)
	require.Equal(t, first, jobs[0].ID)

	_, err = q.ActiveIDs(ctx, 0)
	require.ErrorIs(t, err, queue.ErrInvalidOption)
}
