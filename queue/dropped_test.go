package queue_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pidispatch/pidispatch/queue"
)

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) lines(t *testing.T) []map[string]any {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	for _, line := range bytes.Split(bytes.TrimSpace(l.b.Bytes()), []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		var m map[string]any
		require.NoError(t, json.Unmarshal(line, &m))
		out = append(out, m)
	}
	return out
}

// A wait entry with no job hash (a producer without keys pushed it, or
// removed the hash and not the entry) and an old BullMQ marker are dropped
// with a job_entry_dropped line saying why, never silently.
func TestDroppedEntriesAreLogged(t *testing.T) {
	t.Parallel()
	var logs lockedBuffer
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
	for _, l := range logs.lines(t) {
		if l["msg"] == "job_entry_dropped" {
			whys[l["jobId"].(string)] = l["why"].(string)
			require.Equal(t, "pi-jobs", l["queue"])
		}
	}
	require.Equal(t, map[string]string{`"ghost-1"`: "no-job-hash", `"0:1700000000000"`: "bullmq-marker"}, whys)
}
