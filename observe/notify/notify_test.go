package notify_test

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/jobs"
	"github.com/pidispatch/pidispatch/observe/notify"
)

// receiver is a webhook that answers 503 to its first `down` posts and
// waits `slow` before answering each.
type receiver struct {
	down  int32
	slow  time.Duration
	posts atomic.Int32
	mu    sync.Mutex
	got   []notify.Event
	keys  map[string]int
}

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	n := r.posts.Add(1)
	time.Sleep(r.slow)
	if n <= r.down {
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	b, _ := io.ReadAll(req.Body)
	var ev notify.Event
	if json.Unmarshal(b, &ev) != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.keys == nil {
		r.keys = map[string]int{}
	}
	r.keys[req.Header.Get("Idempotency-Key")]++
	r.got = append(r.got, ev)
}

func (r *receiver) events() []notify.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]notify.Event(nil), r.got...)
}

func failure(id string) dispatch.Event {
	return dispatch.Event{Kind: dispatch.EventFinish, At: time.Now(), Host: "h1", JobID: id, Attempt: 2,
		Outcome: jobs.OutcomeFailed, Reason: jobs.ReasonExit1}
}

// hook writes a script that appends its arguments to a file; it fails its
// first `down` runs and sleeps `sleep` seconds each run.
func hook(t *testing.T, down int, sleep string) (path, out string) {
	dir := t.TempDir()
	out = filepath.Join(dir, "calls")
	count := filepath.Join(dir, "count")
	path = filepath.Join(dir, "on-failure")
	script := "#!/bin/sh\nsleep " + sleep + "\necho x >> " + count + "\nif [ $(wc -l < " + count + ") -le " + strconv.Itoa(down) + " ]; then exit 1; fi\necho \"$@\" \"env=$(env | grep -v '^PWD=' | grep -v '^SHLVL=' | grep -v '^_=' | tr '\\n' ' ')\" >> " + out + "\n"
	require.NoError(t, os.WriteFile(path, []byte(script), 0o755))
	return path, out
}

func run(t *testing.T, n *notify.Notifier) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = n.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
}

// Each failure reaches the webhook and the hook once, though the webhook
// answers 503 twice and is slow, and the hook fails its first run.
func TestFailureReachesHookAndWebhookOnceEach(t *testing.T) {
	rcv := &receiver{down: 2, slow: 300 * time.Millisecond}
	srv := httptest.NewServer(rcv)
	defer srv.Close()
	path, out := hook(t, 1, "0.2")
	n, err := notify.New(notify.Config{Hook: path, URL: srv.URL + "/hook?token=s3cret", Host: "h1",
		BackoffMin: 50 * time.Millisecond, BackoffMax: 200 * time.Millisecond})
	require.NoError(t, err)
	run(t, n)

	n.Observe(failure("job-a"))
	n.Observe(failure("job-b"))
	n.Observe(dispatch.Event{Kind: dispatch.EventFinish, JobID: "ok", Outcome: jobs.OutcomeCompleted, Reason: jobs.ReasonCompleted})

	require.Eventually(t, func() bool { return len(rcv.events()) == 2 }, 20*time.Second, 20*time.Millisecond)
	require.Eventually(t, func() bool {
		b, _ := os.ReadFile(out)
		return strings.Count(string(b), "\n") == 2
	}, 20*time.Second, 20*time.Millisecond)
	time.Sleep(500 * time.Millisecond) // no late duplicate
	evs := rcv.events()
	require.Len(t, evs, 2)
	ids := map[string]bool{}
	for _, ev := range evs {
		ids[ev.JobID] = true
		require.Equal(t, notify.KindJobFailed, ev.Kind)
		require.Equal(t, string(jobs.ReasonExit1), ev.Reason)
		require.Contains(t, ev.Text, ev.JobID)
		require.NotEmpty(t, ev.ID)
	}
	require.Equal(t, map[string]bool{"job-a": true, "job-b": true}, ids)
	b, _ := os.ReadFile(out)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	require.Len(t, lines, 2)
	for _, l := range lines {
		require.Regexp(t, `^job-[ab] failed exit-1 h1 env=PATH=/usr/local/bin:/usr/bin:/bin ?$`, l)
	}
}

// A webhook down for good is given up after Attempts, and Run still ends
// with its context: no goroutine is left behind.
func TestDeadWebhookGivesUpAndRunEnds(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	url := "http://" + l.Addr().String()
	require.NoError(t, l.Close()) // nobody listens
	n, err := notify.New(notify.Config{URL: url, Attempts: 3, BackoffMin: time.Millisecond, BackoffMax: time.Millisecond})
	require.NoError(t, err)
	err = n.Send(context.Background(), notify.Event{Kind: notify.KindFleetPaused})
	require.ErrorContains(t, err, "webhook unreachable")
	require.NotContains(t, err.Error(), l.Addr().String())

	n, err = notify.New(notify.Config{URL: url, BackoffMin: time.Hour})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = n.Run(ctx); close(done) }()
	n.Observe(failure("job-c"))
	time.Sleep(100 * time.Millisecond)
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not end with its context")
	}
}

// A provider suspension is told once, however many calls meet it.
func TestProviderSuspendedOncePerSuspension(t *testing.T) {
	rcv := &receiver{}
	srv := httptest.NewServer(rcv)
	defer srv.Close()
	n, err := notify.New(notify.Config{URL: srv.URL, Host: "h1"})
	require.NoError(t, err)
	run(t, n)
	until := time.Now().Add(time.Minute)
	for range 5 {
		n.ProviderSuspended("anthropic", until)
	}
	require.Eventually(t, func() bool { return len(rcv.events()) == 1 }, 5*time.Second, 10*time.Millisecond)
	time.Sleep(200 * time.Millisecond)
	evs := rcv.events()
	require.Len(t, evs, 1)
	require.Equal(t, notify.KindProviderSuspended, evs[0].Kind)
	require.Equal(t, "anthropic", evs[0].Provider)
}

// A hook that is not an executable file refuses the configuration.
func TestHookMustBeExecutable(t *testing.T) {
	p := filepath.Join(t.TempDir(), "hook")
	require.NoError(t, os.WriteFile(p, []byte("#!/bin/sh\n"), 0o644))
	_, err := notify.New(notify.Config{Hook: p})
	require.ErrorIs(t, err, notify.ErrConfig)
	require.ErrorContains(t, err, "chmod +x")
}
