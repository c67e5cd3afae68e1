package queue_test

import (
	"encoding/json"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pidispatch/pidispatch/internal/testkit/logtest"
	"github.com/pidispatch/pidispatch/queue"
)

// A wait entry with no job hash (a producer without keys pushed it, or
// removed the hash and not the entry) and an old BullMQ marker are dropped
// with a job_entry_dropped line saying why, never silently.
func TestDroppedEntriesAreLogged(t *testing.T) {
	t.Parallel()
	var logs logtest.Buffer
	db, q := setup(t, queue.Config{Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	ctx := testCtx(t)
	_, added, err := q.Add(ctx, "job", json.RawMessage(`{}`), queue.AddOptions{JobID: "real"})
	require.NoError(t, err)
	require.True(t, added)
	// RPOPLPUSH takes from the right: the ghost and the marker come first.
	require.NoError(t, db.Client.RPush(ctx, "bull:pi-jobs:wait", "ghost-1", "0:1700000000000").Err())

	job := fetch(t, q, "t")
	require.Equal(t, "real", job.ID)
	whys := map[string]string{}
	for _, l := range logs.Lines(t) {
		if l["msg"] == "job_entry_dropped" {
			whys[l["jobId"].(string)] = l["why"].(string)
			require.Equal(t, "pi-jobs", l["queue"])
		}
	}
	require.Equal(t, map[string]string{`"ghost-1"`: "no-job-hash", `"0:1700000000000"`: "bullmq-marker"}, whys)
}
