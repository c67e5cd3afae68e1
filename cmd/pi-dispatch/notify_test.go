package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/observe/notify"
)

// pause and resume each tell PI_NOTIFY_URL once, even when the webhook
// answers 502 at first.
func TestPauseAndResumeNotifyTheWebhook(t *testing.T) {
	db := livetest.Valkey(t)
	var mu sync.Mutex
	var got []notify.Event
	posts := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		posts++
		if posts == 1 {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		var ev notify.Event
		require.NoError(t, json.NewDecoder(r.Body).Decode(&ev))
		got = append(got, ev)
	}))
	defer srv.Close()
	env := map[string]string{"VALKEY_URL": db.URL, "PI_UNSIGNED_QUEUES": "*", "PI_NOTIFY_URL": srv.URL, "PI_WORKER_NAME": "ops-1"}
	require.Equal(t, exitOK, runCLI(t, env, "pause").code)
	require.Equal(t, exitOK, runCLI(t, env, "resume").code)
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, got, 2)
	require.Equal(t, notify.KindFleetPaused, got[0].Kind)
	require.Equal(t, notify.KindFleetResumed, got[1].Kind)
	require.Equal(t, "ops-1", got[0].Host)
	require.Contains(t, got[0].Text, "paused")
}
