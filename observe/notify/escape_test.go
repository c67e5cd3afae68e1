package notify_test

import (
	"context"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/observe/notify"
)

// A Valkey writer names a job so that its failure pings the whole Slack
// channel, links elsewhere, hides text behind a bidi control, and passes an
// option to the operator's hook. The webhook's message shows each as text
// (Slack's escapes), the JSON keeps the id as it is for programs, and the
// hook gets no argument that starts with -.
func TestHostileJobIDReachesSinksEscaped(t *testing.T) {
	rcv := &receiver{}
	srv := httptest.NewServer(rcv)
	defer srv.Close()
	dir := t.TempDir()
	out := filepath.Join(dir, "argv")
	path := filepath.Join(dir, "on-failure")
	// The hook writes each argument on a line of its own, as it got it.
	require.NoError(t, os.WriteFile(path, []byte("#!/bin/sh\nfor a in \"$@\"; do printf '%s\\n' \"$a\" >> "+out+"; done\n"), 0o755))
	n, err := notify.New(notify.Config{Hook: path, URL: srv.URL, Host: "h1", BackoffMin: 10 * time.Millisecond})
	require.NoError(t, err)

	for _, id := range []string{"--output=/tmp/x", "<!channel> <@U123> <http://x|y> @org/everyone", "job\u202egnp.exe"} {
		require.NoError(t, n.Send(context.Background(), eventOf(failure(id))))
	}
	evs := rcv.events()
	require.Len(t, evs, 3)
	require.Equal(t, "--output=/tmp/x", evs[0].JobID, "the JSON field keeps the id for programs")
	require.Equal(t, "pidispatch: job --output=/tmp/x failed (exit-1, attempt 2) on h1", evs[0].Text)
	require.Equal(t, "pidispatch: job &lt;!channel&gt; &lt;@U123&gt; &lt;http://x|y&gt; @org/everyone failed (exit-1, attempt 2) on h1", evs[1].Text)
	require.Equal(t, `pidispatch: job job\u202egnp.exe failed (exit-1, attempt 2) on h1`, evs[2].Text)
	for _, ev := range evs {
		require.NotContains(t, ev.Text, "<")
		require.NotContains(t, ev.Text, "\u202e")
	}

	b, err := os.ReadFile(out)
	require.NoError(t, err)
	args := strings.Split(strings.TrimSpace(string(b)), "\n")
	require.Len(t, args, 12)
	for _, a := range args {
		require.False(t, strings.HasPrefix(a, "-"), "argument %q starts with -", a)
		require.NotContains(t, a, "\u202e")
	}
	require.Equal(t, []string{"_--output=/tmp/x", "failed", "exit-1", "h1"}, args[:4])
	require.Equal(t, `job\u202egnp.exe`, args[8])
}

// eventOf is the event Observe queues for ev.
func eventOf(ev dispatch.Event) notify.Event {
	return notify.Event{Kind: notify.KindJobFailed, At: ev.At, Host: ev.Host, JobID: ev.JobID, Attempt: ev.Attempt, Outcome: ev.Outcome, Reason: string(ev.Reason)}
}
