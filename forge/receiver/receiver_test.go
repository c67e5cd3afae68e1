package receiver_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pidispatch/pidispatch/internal/testkit/logtest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pidispatch/pidispatch/cronsync"
	"github.com/pidispatch/pidispatch/enqueue"
	"github.com/pidispatch/pidispatch/forge"
	"github.com/pidispatch/pidispatch/forge/inbox"
	"github.com/pidispatch/pidispatch/forge/receiver"
	fixtures "github.com/pidispatch/pidispatch/internal/testkit/forgefixtures"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/jobs"
)

const (
	ghSecret = "It's a Secret to Everybody"
	fjSecret = "forgejo-secret"
	glToken  = "gitlab-token"
)

var glSigning = "whsec_" + base64.StdEncoding.EncodeToString([]byte("0123456789abcdef0123456789abcdef"))

const triggersFile = `{"triggers": [
 {"on": {"type": "comment", "repos": ["Codertocat/Hello-World"], "phrase": "fixed"}, "run": {"kind": "github", "flow": "fix"}},
 {"on": {"type": "label", "repos": ["Codertocat/Hello-World"], "any": ["bug"]}, "run": {"kind": "github", "flow": "triage"}},
 {"on": {"type": "comment", "repos": ["gitlab-org/gitlab-test"], "phrase": "Hello"}, "run": {"kind": "gitlab", "command": "reply"}},
 {"on": {"type": "label", "repos": ["acme/widgets"], "any": ["pi:fix"]}, "run": {"kind": "forgejo", "flow": "fix"}}
]}`

type fakeRouter struct {
	mu  sync.Mutex
	got []enqueue.ForgeDelivery
}

func (f *fakeRouter) EnqueueForge(_ context.Context, d enqueue.ForgeDelivery) (enqueue.Enqueued, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := d.Job.Validate(); err != nil {
		return enqueue.Enqueued{}, err
	}
	f.got = append(f.got, d)
	return enqueue.Enqueued{JobID: d.JobID, Queue: "pi-jobs", Added: true}, nil
}

func (f *fakeRouter) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.got)
}

// memReplay is an in-memory ReplayStore.
type memReplay struct {
	mu   sync.Mutex
	seen map[string]bool
}

func (m *memReplay) Claim(_ context.Context, f jobs.Forge, d string) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.seen == nil {
		m.seen = map[string]bool{}
	}
	k := string(f) + ":" + d
	if m.seen[k] {
		return false, nil
	}
	m.seen[k] = true
	return true, nil
}

func (m *memReplay) Release(_ context.Context, f jobs.Forge, d string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.seen, string(f)+":"+d)
	return nil
}

// githubAPI is a forge API double answering the collaborator permission of
// each login from perms.
func githubAPI(t *testing.T, perms map[string]string) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		parts := strings.Split(r.URL.Path, "/") // /repos/o/r/collaborators/<login>/permission
		if len(parts) != 7 || parts[4] != "collaborators" || r.Header.Get("Authorization") != "Bearer pat" {
			http.Error(w, `{"message":"Not Found"}`, http.StatusNotFound)
			return
		}
		p, ok := perms[parts[5]]
		if !ok {
			http.Error(w, `{"message":"Not Found"}`, http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"permission":%q,"role_name":%q}`, p, p)
	}))
	t.Cleanup(srv.Close)
	return srv
}

type harness struct {
	router *fakeRouter
	logs   *logtest.Buffer
	srv    *httptest.Server
	now    time.Time
}

func newHarness(t *testing.T, perms map[string]string, replay receiver.ReplayStore) *harness {
	t.Helper()
	h := &harness{router: &fakeRouter{}, logs: &logtest.Buffer{}, now: time.Date(2026, 12, 7, 4, 0, 0, 0, time.UTC)}
	log := slog.New(slog.NewJSONHandler(h.logs, nil))
	api := githubAPI(t, perms)
	fts, err := cronsync.ParseForgeTriggers([]byte(triggersFile))
	require.NoError(t, err)
	allowAll := permFunc(func(context.Context, forge.Event, forge.Need) (bool, error) { return true, nil })
	in, err := forge.NewIntake(forge.IntakeConfig{
		Enqueuer: h.router,
		Permissions: map[jobs.Forge]forge.Permissions{
			jobs.ForgeGitHub:  forge.GitHubPermissions{BaseURL: api.URL, Tokens: forge.StaticToken("pat")},
			jobs.ForgeGitLab:  allowAll,
			jobs.ForgeForgejo: allowAll,
		},
		Logger: log, Host: "h1",
	})
	require.NoError(t, err)
	in.SetTriggers(fts)
	if replay == nil {
		replay = &memReplay{}
	}
	r, err := receiver.New(receiver.Config{
		Intake: in, Replay: replay,
		GitHubSecret: ghSecret, ForgejoSecret: fjSecret,
		GitLabMode: receiver.GitLabSignature, GitLabSecret: glSigning,
		MaxBody: 64 << 10,
		Now:     func() time.Time { return h.now },
		Logger:  log, Host: "h1",
	})
	require.NoError(t, err)
	h.srv = httptest.NewServer(r.Handler())
	t.Cleanup(h.srv.Close)
	return h
}

type permFunc func(context.Context, forge.Event, forge.Need) (bool, error)

func (f permFunc) Allowed(ctx context.Context, ev forge.Event, n forge.Need) (bool, error) {
	return f(ctx, ev, n)
}

func (h *harness) post(t *testing.T, path string, body []byte, headers map[string]string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, h.srv.URL+path, bytes.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(out)
}

// ghKey is the key a GitHub delivery of body is known by, and its job named after.
func ghKey(body []byte) string {
	return (inbox.Delivery{Forge: jobs.ForgeGitHub, Body: body}).Key()
}

func githubHeaders(event, delivery string, body []byte) map[string]string {
	return map[string]string{
		"X-GitHub-Event":      event,
		"X-GitHub-Delivery":   delivery,
		"X-Hub-Signature-256": "sha256=" + fixtures.HexHMAC(ghSecret, body),
	}
}

func TestGitHubSignedDeliveryIsEnqueued(t *testing.T) {
	h := newHarness(t, map[string]string{"Codertocat": "write"}, nil)
	body := fixtures.GitHub(t, "issue_comment", "created", 0)
	status, out := h.post(t, "/github", body, githubHeaders("issue_comment", "72d3162e-cc78-11e3-81ab-4c9367dc0958", body))
	require.Equal(t, http.StatusAccepted, status, out+h.logs.String())
	require.Equal(t, 1, h.router.count())
	// Named after the body the forge signed, not the id header.
	assert.Equal(t, "gh-"+ghKey(body), h.router.got[0].JobID)
	assert.Contains(t, h.logs.String(), `"msg":"forge_enqueued"`)
}

func TestGitLabSignedDeliveryIsEnqueued(t *testing.T) {
	h := newHarness(t, nil, nil)
	body := fixtures.File(t, "gitlab", "note_issue.json")
	ts := strconv.FormatInt(h.now.Unix(), 10)
	id := "msg_2b6f4a1e-5c1d-4e6a-9f1e-1a2b3c4d5e6f"
	status, out := h.post(t, "/gitlab", body, map[string]string{
		"X-Gitlab-Event": "Note Hook", "Webhook-Id": id, "Webhook-Timestamp": ts,
		"Webhook-Signature": "v1,AAAA " + fixtures.GitLabSignature(t, glSigning, id, ts, body),
	})
	require.Equal(t, http.StatusAccepted, status, out+h.logs.String())
	require.Equal(t, 1, h.router.count())
	assert.Equal(t, "gl-"+(inbox.Delivery{Forge: jobs.ForgeGitLab, Body: body}).Key(), h.router.got[0].JobID)
	assert.Equal(t, jobs.ForgeGitLab, h.router.got[0].Job.Forge)

	// A correct signature over a stale timestamp is a replay.
	old := strconv.FormatInt(h.now.Add(-6*time.Minute).Unix(), 10)
	status, _ = h.post(t, "/gitlab", body, map[string]string{
		"X-Gitlab-Event": "Note Hook", "Webhook-Id": "msg_other", "Webhook-Timestamp": old,
		"Webhook-Signature": fixtures.GitLabSignature(t, glSigning, "msg_other", old, body),
	})
	assert.Equal(t, http.StatusUnauthorized, status)
	assert.Contains(t, h.logs.String(), `"reason":"stale"`)
	assert.Equal(t, 1, h.router.count())
}

func TestGitLabTokenMode(t *testing.T) {
	fts, err := cronsync.ParseForgeTriggers([]byte(triggersFile))
	require.NoError(t, err)
	router := &fakeRouter{}
	in, err := forge.NewIntake(forge.IntakeConfig{Enqueuer: router, Permissions: map[jobs.Forge]forge.Permissions{
		jobs.ForgeGitLab: permFunc(func(context.Context, forge.Event, forge.Need) (bool, error) { return true, nil })}})
	require.NoError(t, err)
	in.SetTriggers(fts)
	r, err := receiver.New(receiver.Config{Intake: in, Replay: &memReplay{}, GitLabMode: receiver.GitLabToken, GitLabSecret: glToken})
	require.NoError(t, err)
	srv := httptest.NewServer(r.Handler())
	defer srv.Close()
	h := &harness{router: router, srv: srv, logs: &logtest.Buffer{}}
	body := fixtures.File(t, "gitlab", "note_issue.json")
	status, _ := h.post(t, "/gitlab", body, map[string]string{"X-Gitlab-Event": "Note Hook", "Idempotency-Key": "k-1", "X-Gitlab-Token": "wrong"})
	assert.Equal(t, http.StatusUnauthorized, status)
	status, _ = h.post(t, "/gitlab", body, map[string]string{"X-Gitlab-Event": "Note Hook", "Idempotency-Key": "k-1", "X-Gitlab-Token": glToken})
	assert.Equal(t, http.StatusAccepted, status)
	assert.Equal(t, 1, router.count())
}

// A delivery recorded from a real Gitea (signed with fjSecret), replayed
// with the headers it came with.
func TestForgejoSignedDeliveryIsEnqueued(t *testing.T) {
	h := newHarness(t, nil, nil)
	body := fixtures.File(t, "forgejo", "issues_label_updated.json")
	var recorded map[string]string
	require.NoError(t, json.Unmarshal(fixtures.File(t, "forgejo", "issues_label_updated.headers.json"), &recorded))
	require.NotEmpty(t, recorded["X-Gitea-Delivery"])
	status, out := h.post(t, "/forgejo", body, recorded)
	require.Equal(t, http.StatusAccepted, status, out+h.logs.String())
	require.Equal(t, 1, h.router.count())
	assert.Equal(t, "fj-"+(inbox.Delivery{Forge: jobs.ForgeForgejo, Body: body}).Key(), h.router.got[0].JobID)

	// Forgejo's header names work too (for another event: the same body
	// would be the same delivery).
	body = fixtures.Edit(t, body, func(m map[string]any) { m["forgejo"] = true })
	status, _ = h.post(t, "/forgejo", body, map[string]string{
		"X-Forgejo-Event": "issues", "X-Forgejo-Delivery": "6b2c1a80", "X-Forgejo-Signature": fixtures.HexHMAC(fjSecret, body),
	})
	assert.Equal(t, http.StatusAccepted, status)
	assert.Equal(t, 2, h.router.count())
}

// Every recorded Gitea delivery verifies with the signature Gitea made and
// parses; only the label matches a trigger here.
func TestEveryRecordedGiteaDeliveryVerifies(t *testing.T) {
	h := newHarness(t, nil, nil)
	for name, want := range map[string]int{
		"issues_label_updated": http.StatusAccepted, "issue_comment_created": http.StatusOK,
		"issues_closed": http.StatusOK, "pull_request_opened": http.StatusOK,
	} {
		var recorded map[string]string
		require.NoError(t, json.Unmarshal(fixtures.File(t, "forgejo", name+".headers.json"), &recorded))
		status, out := h.post(t, "/forgejo", fixtures.File(t, "forgejo", name+".json"), recorded)
		assert.Equal(t, want, status, name+": "+out)
	}
	assert.Equal(t, 1, h.router.count())
	assert.NotContains(t, h.logs.String(), "bad-signature")
	assert.NotContains(t, h.logs.String(), "malformed")
}

// Each refusal: a clear log line, nothing enqueued.
func TestRefusals(t *testing.T) {
	comment := fixtures.GitHub(t, "issue_comment", "created", 0)
	for _, c := range []struct {
		name    string
		path    string
		body    []byte
		headers func(body []byte) map[string]string
		perms   map[string]string
		status  int
		reason  string
	}{
		{"missing signature", "/github", comment, func(b []byte) map[string]string {
			h := githubHeaders("issue_comment", "d1", b)
			delete(h, "X-Hub-Signature-256")
			return h
		}, nil, 401, "missing-signature"},
		{"bad signature", "/github", comment, func(b []byte) map[string]string {
			h := githubHeaders("issue_comment", "d1", b)
			h["X-Hub-Signature-256"] = "sha256=" + fixtures.HexHMAC("not the secret", b)
			return h
		}, nil, 401, "bad-signature"},
		{"body changed after signing", "/github", comment, func(b []byte) map[string]string {
			return githubHeaders("issue_comment", "d1", append([]byte(" "), b...))
		}, nil, 401, "bad-signature"},
		{"oversized", "/github", bytes.Repeat([]byte(" "), 65<<10), func(b []byte) map[string]string {
			return githubHeaders("issue_comment", "d1", b)
		}, nil, 413, "too-large"},
		{"malformed", "/github", []byte(`{"action":"created","issue":"x"}`), func(b []byte) map[string]string {
			return githubHeaders("issue_comment", "d1", b)
		}, nil, 400, "malformed"},
		{"bad delivery id", "/github", comment, func(b []byte) map[string]string {
			return githubHeaders("issue_comment", "../../x\u2028"+strings.Repeat("y", 200), b)
		}, nil, 400, "missing-delivery-id"},
		{"unknown repository", "/github", fixtures.Edit(t, comment, func(m map[string]any) {
			m["repository"].(map[string]any)["full_name"] = "mallory/elsewhere"
		}), func(b []byte) map[string]string { return githubHeaders("issue_comment", "d1", b) }, nil, 403, "unknown-repository"},
		{"commenter without permission", "/github", comment, func(b []byte) map[string]string {
			return githubHeaders("issue_comment", "d1", b)
		}, map[string]string{"Codertocat": "read"}, 403, "author-not-allowed"},
		{"commenter unknown to the forge", "/github", comment, func(b []byte) map[string]string {
			return githubHeaders("issue_comment", "d1", b)
		}, map[string]string{}, 403, "author-not-allowed"},
		{"forgejo bad signature", "/forgejo", fixtures.File(t, "forgejo", "issues_label_updated.json"), func(b []byte) map[string]string {
			return map[string]string{"X-Forgejo-Event": "issues", "X-Forgejo-Delivery": "d1", "X-Forgejo-Signature": fixtures.HexHMAC("x", b)}
		}, nil, 401, "bad-signature"},
		{"gitlab other mode's header", "/gitlab", fixtures.File(t, "gitlab", "note_issue.json"), func(b []byte) map[string]string {
			return map[string]string{"X-Gitlab-Event": "Note Hook", "Idempotency-Key": "d1", "X-Gitlab-Token": glToken}
		}, nil, 401, "missing-signature"},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, c.perms, nil)
			status, _ := h.post(t, c.path, c.body, c.headers(c.body))
			assert.Equal(t, c.status, status)
			assert.Zero(t, h.router.count(), "nothing enqueued")
			logs := h.logs.String()
			assert.Contains(t, logs, `"msg":"forge_refused"`)
			assert.Contains(t, logs, `"reason":"`+c.reason+`"`)
			assert.Contains(t, logs, `"host":"h1"`)
			assert.NotContains(t, logs, ghSecret)
			assert.NotContains(t, logs, "yyyy", "an unverified header is not logged")
		})
	}
}

func TestReplayedDeliveryIsRefused(t *testing.T) {
	h := newHarness(t, map[string]string{"Codertocat": "admin"}, nil)
	body := fixtures.GitHub(t, "issue_comment", "created", 0)
	hdr := githubHeaders("issue_comment", "replay-1", body)
	status, _ := h.post(t, "/github", body, hdr)
	require.Equal(t, http.StatusAccepted, status)
	status, _ = h.post(t, "/github", body, hdr)
	assert.Equal(t, http.StatusConflict, status)
	assert.Equal(t, 1, h.router.count())
	assert.Contains(t, h.logs.String(), `"reason":"replayed"`)
}

func TestLookupFailureLetsTheRedeliveryThrough(t *testing.T) {
	h := newHarness(t, nil, nil)
	// The API double is closed: every lookup fails indeterminately.
	fts, err := cronsync.ParseForgeTriggers([]byte(triggersFile))
	require.NoError(t, err)
	dead := httptest.NewServer(http.NotFoundHandler())
	dead.Close()
	in, err := forge.NewIntake(forge.IntakeConfig{Enqueuer: h.router, Permissions: map[jobs.Forge]forge.Permissions{
		jobs.ForgeGitHub: forge.GitHubPermissions{BaseURL: dead.URL, Tokens: forge.StaticToken("pat")}}})
	require.NoError(t, err)
	in.SetTriggers(fts)
	replay := &memReplay{}
	r, err := receiver.New(receiver.Config{Intake: in, Replay: replay, GitHubSecret: ghSecret})
	require.NoError(t, err)
	h.srv = httptest.NewServer(r.Handler())
	defer h.srv.Close()
	body := fixtures.GitHub(t, "issue_comment", "created", 0)
	status, _ := h.post(t, "/github", body, githubHeaders("issue_comment", "again-1", body))
	assert.Equal(t, http.StatusServiceUnavailable, status)
	fresh, err := replay.Claim(context.Background(), jobs.ForgeGitHub, "again-1")
	require.NoError(t, err)
	assert.True(t, fresh, "the delivery id was released for the redelivery")
}

func TestRoutesAndMetrics(t *testing.T) {
	h := newHarness(t, nil, nil)
	resp, err := http.Get(h.srv.URL + "/healthz")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)

	resp, err = http.Get(h.srv.URL + "/github")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode)

	status, _ := h.post(t, "/github", []byte(`{}`), map[string]string{"Content-Type": "text/plain"})
	assert.Equal(t, http.StatusUnsupportedMediaType, status)

	body := fixtures.GitHub(t, "issue_comment", "created", 0)
	h.post(t, "/github", body, map[string]string{"X-GitHub-Event": "issue_comment", "X-GitHub-Delivery": "m1"})
	resp, err = http.Get(h.srv.URL + "/metrics")
	require.NoError(t, err)
	text, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Contains(t, string(text), `pidispatch_receiver_deliveries_total{forge="github",outcome="missing-signature"} 1`)
	assert.Contains(t, string(text), `pidispatch_receiver_delivery_seconds_count{forge="github"}`)
}

func TestUnconfiguredForgeAnswers404(t *testing.T) {
	in, err := forge.NewIntake(forge.IntakeConfig{Enqueuer: &fakeRouter{}})
	require.NoError(t, err)
	r, err := receiver.New(receiver.Config{Intake: in, Replay: &memReplay{}, GitHubSecret: ghSecret})
	require.NoError(t, err)
	srv := httptest.NewServer(r.Handler())
	defer srv.Close()
	for _, p := range []string{"/gitlab", "/forgejo"} {
		resp, err := http.Post(srv.URL+p, "application/json", strings.NewReader(`{}`))
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, http.StatusNotFound, resp.StatusCode, p)
	}
}

func TestNewRefusesABadGitLabSecret(t *testing.T) {
	in, err := forge.NewIntake(forge.IntakeConfig{Enqueuer: &fakeRouter{}})
	require.NoError(t, err)
	_, err = receiver.New(receiver.Config{Intake: in, Replay: &memReplay{}, GitLabMode: receiver.GitLabSignature, GitLabSecret: "whsec_***"})
	assert.ErrorContains(t, err, "signing token")
	_, err = receiver.New(receiver.Config{Intake: in, Replay: &memReplay{}, GitLabMode: "basic", GitLabSecret: "x"})
	assert.Error(t, err)
}

func TestServeStopsWithItsContext(t *testing.T) {
	in, err := forge.NewIntake(forge.IntakeConfig{Enqueuer: &fakeRouter{}})
	require.NoError(t, err)
	r, err := receiver.New(receiver.Config{Intake: in, Replay: &memReplay{}})
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Serve(ctx, ln) }()
	require.Eventually(t, func() bool {
		resp, err := http.Get("http://" + ln.Addr().String() + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, 5*time.Second, 20*time.Millisecond)
	cancel()
	select {
	case err := <-done:
		assert.NoError(t, err)
	case <-time.After(15 * time.Second):
		t.Fatal("Serve did not return after its context ended")
	}
}

func TestValkeyReplayLive(t *testing.T) {
	db := livetest.Valkey(t)
	ctx := context.Background()
	v := receiver.ValkeyReplay{Client: db.Client, TTL: time.Hour}
	fresh, err := v.Claim(ctx, jobs.ForgeGitHub, "live-1")
	require.NoError(t, err)
	assert.True(t, fresh)
	fresh, err = v.Claim(ctx, jobs.ForgeGitHub, "live-1")
	require.NoError(t, err)
	assert.False(t, fresh, "a second claim of one delivery is a replay")
	fresh, err = v.Claim(ctx, jobs.ForgeGitLab, "live-1")
	require.NoError(t, err)
	assert.True(t, fresh, "delivery ids are per forge")
	ttl, err := db.Client.TTL(ctx, "pidispatch:forge:delivery:github:live-1").Result()
	require.NoError(t, err)
	assert.InDelta(t, time.Hour.Seconds(), ttl.Seconds(), 5)
	require.NoError(t, v.Release(ctx, jobs.ForgeGitHub, "live-1"))
	fresh, err = v.Claim(ctx, jobs.ForgeGitHub, "live-1")
	require.NoError(t, err)
	assert.True(t, fresh)
}
