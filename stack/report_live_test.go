package stack_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pidispatch/pidispatch/enqueue"
	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest/liveworker"
	"github.com/pidispatch/pidispatch/jobs"
	"github.com/pidispatch/pidispatch/observe/notify"
	"github.com/pidispatch/pidispatch/observe/transcript"
)

// slowWebhook answers 503 to its first post, and takes 300 ms over each.
type slowWebhook struct {
	posts atomic.Int32
	mu    sync.Mutex
	got   []notify.Event
}

func (s *slowWebhook) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	time.Sleep(300 * time.Millisecond)
	if s.posts.Add(1) == 1 {
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	var ev notify.Event
	if json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&ev) == nil {
		s.mu.Lock()
		s.got = append(s.got, ev)
		s.mu.Unlock()
	}
}

func (s *slowWebhook) events() []notify.Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]notify.Event(nil), s.got...)
}

func script(t *testing.T, body string) string {
	p := filepath.Join(t.TempDir(), "script")
	require.NoError(t, os.WriteFile(p, []byte("#!/bin/sh\n"+body), 0o755))
	return p
}

// A real worker runs a job that prints its secrets profile's value and a
// provider key the host holds, then fails: its stored transcript shows the
// run with both redacted, and the failure hook and the webhook (down at
// first, and slow) each hear of the failure once.
func TestFailedJobTranscriptRedactedAndNotified(t *testing.T) {
	db := livetest.Valkey(t)

	const secret, hostKey = "zq-profile-secret-8f7e6d5c4b3a", "sk-ant-host-key-0123456789abcdef"
	resolver := script(t, "echo DEPLOY_TOKEN="+secret+"\n")
	hookOut := filepath.Join(t.TempDir(), "hook-calls")
	hook := script(t, "sleep 0.5\necho \"$@\" >> "+hookOut+"\n")
	webhook := &slowWebhook{}
	srv := httptest.NewServer(webhook)
	defer srv.Close()

	logs, name := t.TempDir(), "report-worker-1"
	liveworker.Boot(t, db, name, map[string]string{
		"PI_LOGS_DIR": logs, "PI_SECRET_PROFILES": "deploy:" + resolver, "ANTHROPIC_API_KEY": hostKey,
		"PI_ON_FAILURE": hook, "PI_NOTIFY_URL": srv.URL + "/notify",
	})

	p, err := enqueue.NewProducer(db.Client, enqueue.ProducerConfig{UnsignedQueues: []string{fleet.EveryQueue}, WorkerName: name, WorkerNameDeclared: true, Attempts: 1})
	require.NoError(t, err)
	e, err := p.EnqueueLocal(context.Background(), jobs.Job{Folder: t.TempDir(), Flow: "fix", SecretsProfile: "deploy",
		Task: "JOB_EXIT_CODE=1\nprint " + secret + " and " + hostKey})
	require.NoError(t, err)

	require.Eventually(t, func() bool {
		recs, err := jobs.ReadRecords(logs, e.JobID)
		return err == nil && len(recs) == 1
	}, 90*time.Second, 200*time.Millisecond, "no record of %s", e.JobID)
	recs, _ := jobs.ReadRecords(logs, e.JobID)
	require.Equal(t, jobs.OutcomeFailed, recs[0].Outcome)

	entries, err := transcript.Read(logs, e.JobID, 1)
	require.NoError(t, err)
	var all strings.Builder
	transcript.Render(&all, entries)
	raw, err := os.ReadFile(filepath.Join(logs, transcript.FileName(e.JobID, 1)))
	require.NoError(t, err)
	require.Contains(t, all.String(), "job.json")
	require.Contains(t, all.String(), "print "+transcript.Redacted+" and "+transcript.Redacted)
	for _, text := range []string{all.String(), string(raw)} {
		require.NotContains(t, text, secret)
		require.NotContains(t, text, hostKey)
	}
	live, err := transcript.NewLive(db.Client).Recent(context.Background(), e.JobID)
	require.NoError(t, err)
	require.NotEmpty(t, live)
	for _, en := range live {
		require.NotContains(t, en.Line, secret)
	}

	require.Eventually(t, func() bool { return len(webhook.events()) == 1 }, 30*time.Second, 100*time.Millisecond)
	require.Eventually(t, func() bool { b, _ := os.ReadFile(hookOut); return strings.Count(string(b), "\n") == 1 }, 30*time.Second, 100*time.Millisecond)
	time.Sleep(2 * time.Second) // no second delivery
	evs := webhook.events()
	require.Len(t, evs, 1)
	require.Equal(t, notify.KindJobFailed, evs[0].Kind)
	require.Equal(t, e.JobID, evs[0].JobID)
	body, _ := json.Marshal(evs[0])
	require.NotContains(t, string(body), secret)
	b, _ := os.ReadFile(hookOut)
	require.Equal(t, e.JobID+" failed exit-1 "+name+"\n", string(b))
}
