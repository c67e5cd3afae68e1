package queue_test

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pidispatch/pidispatch/queue"
)

func TestQueue_CompletedResultsVisitsEveryCompletedJob(t *testing.T) {
	t.Parallel()
	db, q := setup(t, queue.Config{WorkerName: "w1"})
	ctx := testCtx(t)
	want := map[string]string{}
	// More than one page, so the paging is exercised.
	for i := range 503 {
		id := add(t, q, queue.AddOptions{})
		job := fetch(t, q, "tok")
		require.Equal(t, id, job.ID)
		result := fmt.Sprintf(`{"n":%d}`, i)
		require.NoError(t, q.Complete(ctx, id, "tok", json.RawMessage(result)))
		want[id] = result
	}
	add(t, q, queue.AddOptions{}) // waiting: not visited
	// A job whose hash is gone (removed by retention between the reads) is
	// skipped, not an error.
	var gone string
	for id := range want {
		gone = id
		break
	}
	require.NoError(t, db.Client.Del(ctx, "bull:pi-jobs:"+gone).Err())
	delete(want, gone)

	got := map[string]string{}
	require.NoError(t, q.CompletedResults(ctx, func(id string, result json.RawMessage) {
		got[id] = string(result)
	}))
	require.Equal(t, want, got)
}
