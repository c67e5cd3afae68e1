package receiver_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pidispatch/pidispatch/cronsync"
	"github.com/pidispatch/pidispatch/forge"
	"github.com/pidispatch/pidispatch/forge/inbox"
	"github.com/pidispatch/pidispatch/forge/receiver"
	fixtures "github.com/pidispatch/pidispatch/internal/testkit/forgefixtures"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/internal/testkit/logtest"
	"github.com/pidispatch/pidispatch/jobs"
)

// inboxHarness is a receiver in its inbox mode: every verified delivery is
// stored, then answered; its inbox runs only when a test runs it.
type inboxHarness struct {
	*harness
	inbox  *inbox.Inbox
	intake *forge.Intake
}

func newInboxHarness(t *testing.T, client redis.UniversalClient, mods ...func(*inbox.Config)) *inboxHarness {
	t.Helper()
	h := &harness{router: &fakeRouter{}, logs: &logtest.Buffer{}, now: time.Now()}
	log := slog.New(slog.NewJSONHandler(h.logs, nil))
	fts, err := cronsync.ParseForgeTriggers([]byte(triggersFile))
	require.NoError(t, err)
	allowAll := permFunc(func(context.Context, forge.Event, forge.Need) (bool, error) { return true, nil })
	in, err := forge.NewIntake(forge.IntakeConfig{Enqueuer: h.router, Logger: log, Host: "h1",
		Permissions: map[jobs.Forge]forge.Permissions{jobs.ForgeGitHub: allowAll, jobs.ForgeForgejo: allowAll}})
	require.NoError(t, err)
	in.SetTriggers(fts)
	cfg := inbox.Config{Valkey: client, Handler: in, SpoolDir: filepath.Join(t.TempDir(), "spool"),
		StoreTimeout: 300 * time.Millisecond, Poll: 20 * time.Millisecond, Logger: log, Host: "h1"}
	for _, m := range mods {
		m(&cfg)
	}
	ib, err := inbox.Open(cfg)
	require.NoError(t, err)
	t.Cleanup(ib.Close)
	r, err := receiver.New(receiver.Config{Intake: in, Inbox: ib, GitHubSecret: ghSecret, ForgejoSecret: fjSecret,
		Logger: log, Host: "h1"})
	require.NoError(t, err)
	r.Registry().MustRegister(ib.Collectors()...)
	h.srv = httptest.NewServer(r.Handler())
	t.Cleanup(h.srv.Close)
	return &inboxHarness{harness: h, inbox: ib, intake: in}
}

func (h *inboxHarness) metrics(t *testing.T) string {
	t.Helper()
	resp, err := http.Get(h.srv.URL + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	text, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(text)
}

func (h *inboxHarness) postGitHub(t *testing.T, event, delivery string, body []byte) (int, string, time.Duration) {
	t.Helper()
	begin := time.Now()
	status, out := h.post(t, "/github", body, githubHeaders(event, delivery, body))
	return status, out, time.Since(begin)
}

// A verified delivery is answered 202 once stored, before anything is
// decided; the inbox's processor enqueues it afterwards. A second delivery
// of the id is answered 200 and stored once.
func TestInboxStoresThenAnswers(t *testing.T) {
	db := livetest.Valkey(t)
	h := newInboxHarness(t, db.Client)
	body := fixtures.GitHub(t, "issue_comment", "created", 0)
	status, out, _ := h.postGitHub(t, "issue_comment", "stored-1", body)
	require.Equal(t, http.StatusAccepted, status, out+h.logs.String())
	assert.JSONEq(t, `{"status":"received"}`, out)
	assert.Zero(t, h.router.count(), "nothing decided before the answer")
	n, err := h.inbox.Store().Length(context.Background(), jobs.ForgeGitHub)
	require.NoError(t, err)
	assert.Equal(t, int64(1), n)

	status, out, _ = h.postGitHub(t, "issue_comment", "stored-1", body)
	assert.Equal(t, http.StatusOK, status)
	assert.JSONEq(t, `{"status":"already received"}`, out)
	n, err = h.inbox.Store().Length(context.Background(), jobs.ForgeGitHub)
	require.NoError(t, err)
	assert.Equal(t, int64(1), n, "stored once")

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = h.inbox.Run(ctx) }()
	deadline := time.Now().Add(20 * time.Second)
	for h.router.count() == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	<-done
	require.Equal(t, 1, h.router.count(), h.logs.String())
	assert.Equal(t, "gh-"+ghKey(body), h.router.got[0].JobID)
	text := h.metrics(t)
	assert.Contains(t, text, `pidispatch_receiver_deliveries_total{forge="github",outcome="stored"} 1`)
	assert.Contains(t, text, `pidispatch_receiver_deliveries_total{forge="github",outcome="duplicate"} 1`)
	assert.Contains(t, text, `pidispatch_receiver_inbox_processed_total{forge="github",outcome="enqueued"} 1`)
	assert.Contains(t, text, `pidispatch_receiver_spool_files 0`)
}

// GitHub's ping, and any event type no trigger handles, of a served
// repository (or of none): 200, one forge_ignored line, nothing stored.
func TestPingIsAnswered200AndNotStored(t *testing.T) {
	db := livetest.Valkey(t)
	h := newInboxHarness(t, db.Client)
	ping := fixtures.GitHub(t, "ping", "", 0)
	require.Contains(t, string(ping), `"zen"`)
	for i, c := range []struct{ event, delivery string }{{"ping", "ping-1"}, {"push", "push-1"}, {"workflow_run", "wf-1"}} {
		status, out, _ := h.postGitHub(t, c.event, c.delivery, ping)
		assert.Equal(t, http.StatusOK, status, c.event+": "+out)
		ignored := h.logs.Events(t, "forge_ignored")
		require.Len(t, ignored, i+1, c.event)
		assert.Equal(t, c.event, ignored[i]["event"])
		assert.Equal(t, c.delivery, ignored[i]["delivery"])
		assert.Equal(t, "h1", ignored[i]["host"])
	}
	// An edited comment parses, but no trigger handles it either.
	edited := fixtures.Edit(t, fixtures.GitHub(t, "issue_comment", "created", 0), func(m map[string]any) { m["action"] = "edited" })
	status, _, _ := h.postGitHub(t, "issue_comment", "edit-1", edited)
	assert.Equal(t, http.StatusOK, status)
	assert.Empty(t, h.logs.Events(t, "forge_refused"))
	keys, err := db.Client.Keys(context.Background(), "*").Result()
	require.NoError(t, err)
	assert.Empty(t, keys, "nothing stored")
	assert.Contains(t, h.metrics(t), `pidispatch_receiver_deliveries_total{forge="github",outcome="ignored"} 4`)

	// A bad signature is still refused before anything else.
	hdr := githubHeaders("ping", "ping-2", ping)
	hdr["X-Hub-Signature-256"] = "sha256=" + fixtures.HexHMAC("wrong", ping)
	status, _ = h.post(t, "/github", ping, hdr)
	assert.Equal(t, http.StatusUnauthorized, status)
}

// The synchronous mode answers a ping 200 too (it refused it, 403, for
// want of a served repository).
func TestPingIsAnswered200InTheSynchronousMode(t *testing.T) {
	h := newHarness(t, nil, nil)
	ping := fixtures.GitHub(t, "ping", "", 0)
	status, out := h.post(t, "/github", ping, githubHeaders("ping", "ping-sync", ping))
	assert.Equal(t, http.StatusOK, status, out)
	assert.Len(t, h.logs.Events(t, "forge_ignored"), 1)
	assert.Empty(t, h.logs.Events(t, "forge_refused"))
}

// Valkey stalls (a client whose own timeouts add up to minutes): the
// delivery is answered 202 within the bound, from the spool.
func TestStalledValkeyIsAnsweredWithinTheBound(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: livetest.HungServer(t), ReadTimeout: time.Minute, WriteTimeout: time.Minute})
	t.Cleanup(func() { _ = c.Close() })
	h := newInboxHarness(t, c, func(cfg *inbox.Config) { cfg.StoreTimeout = inbox.DefaultStoreTimeout })
	body := fixtures.GitHub(t, "issue_comment", "created", 0)
	status, out, took := h.postGitHub(t, "issue_comment", "stall-1", body)
	assert.Equal(t, http.StatusAccepted, status, out)
	assert.Less(t, took, 2*time.Second, "under the documented bound")
	assert.Equal(t, int64(1), h.inbox.Spool().Files())
	text := h.metrics(t)
	assert.Contains(t, text, `pidispatch_receiver_deliveries_total{forge="github",outcome="spooled"} 1`)
	assert.Contains(t, text, `pidispatch_receiver_spool_files 1`)
	assert.Len(t, h.logs.Events(t, "receiver_spooled"), 1)
}

// deadValkey is a client of a port nothing listens on.
func deadValkey(t *testing.T) *redis.Client {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Valkey down and the spool full: 503 at once, one receiver_store_failed
// line with the host and the reason, and the metric.
func TestValkeyDownAndSpoolFullAnswers503AtOnce(t *testing.T) {
	h := newInboxHarness(t, deadValkey(t), func(cfg *inbox.Config) { cfg.SpoolMax = 20 << 10 })
	body := fixtures.GitHub(t, "issue_comment", "created", 0)
	require.Less(t, len(body), 20<<10)
	status, _, _ := h.postGitHub(t, "issue_comment", "fits-1", body)
	require.Equal(t, http.StatusAccepted, status, "the first one fits in the spool")
	other := fixtures.Edit(t, body, func(m map[string]any) { m["comment"].(map[string]any)["node_id"] = "other" })
	status, out, took := h.postGitHub(t, "issue_comment", "full-2", other)
	assert.Equal(t, http.StatusServiceUnavailable, status, out)
	assert.Less(t, took, 500*time.Millisecond, "at once")
	failed := h.logs.Events(t, "receiver_store_failed")
	require.Len(t, failed, 1)
	assert.Equal(t, "spool-full", failed[0]["reason"])
	assert.Equal(t, "h1", failed[0]["host"])
	assert.Equal(t, ghKey(other), failed[0]["delivery"])
	assert.Equal(t, "full-2", failed[0]["forgeDelivery"])
	assert.Contains(t, h.metrics(t), `pidispatch_receiver_deliveries_total{forge="github",outcome="unavailable"} 1`)
}

// Past RECEIVER_INBOX_MAX a delivery is answered 503 and logged.
func TestFullInboxAnswers503(t *testing.T) {
	db := livetest.Valkey(t)
	h := newInboxHarness(t, db.Client, func(cfg *inbox.Config) { cfg.MaxLength = 1 })
	body := fixtures.GitHub(t, "issue_comment", "created", 0)
	status, _, _ := h.postGitHub(t, "issue_comment", "in-1", body)
	require.Equal(t, http.StatusAccepted, status)
	other := fixtures.Edit(t, body, func(m map[string]any) { m["comment"].(map[string]any)["node_id"] = "other" })
	status, out, _ := h.postGitHub(t, "issue_comment", "in-2", other)
	assert.Equal(t, http.StatusServiceUnavailable, status)
	assert.True(t, strings.Contains(out, "inbox-full"), out)
	require.Len(t, h.logs.Events(t, "receiver_inbox_full"), 1)
	assert.Contains(t, h.metrics(t), `pidispatch_receiver_deliveries_total{forge="github",outcome="inbox-full"} 1`)
}

// The receiver refuses a body limit over the inbox's: it could not store
// what it accepts.
func TestNewRefusesABodyLimitOverTheInboxs(t *testing.T) {
	in, err := forge.NewIntake(forge.IntakeConfig{Enqueuer: &fakeRouter{}})
	require.NoError(t, err)
	ib, err := inbox.Open(inbox.Config{Valkey: deadValkey(t), SpoolDir: t.TempDir(), MaxBody: 1 << 20})
	require.NoError(t, err)
	defer ib.Close()
	_, err = receiver.New(receiver.Config{Intake: in, Inbox: ib, GitHubSecret: ghSecret, MaxBody: 2 << 20})
	assert.ErrorContains(t, err, "over the inbox's")
	_, err = receiver.New(receiver.Config{Intake: in, GitHubSecret: ghSecret})
	assert.Error(t, err, "neither an inbox nor a replay store")
}
