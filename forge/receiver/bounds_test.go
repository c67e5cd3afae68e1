package receiver_test

import (
	"crypto/hmac"
	"crypto/sha1"
	"encoding/hex"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pidispatch/pidispatch/forge"
	"github.com/pidispatch/pidispatch/forge/receiver"
	fixtures "github.com/pidispatch/pidispatch/internal/testkit/forgefixtures"
	"github.com/pidispatch/pidispatch/internal/testkit/logtest"
	"github.com/pidispatch/pidispatch/jobs"
)

// A GitHub signature must be sha256=: a valid HMAC-SHA1 in the header
// (go-github's validator would accept it) is refused.
func TestGitHubSHA1SignatureRefused(t *testing.T) {
	h := newHarness(t, map[string]string{"Codertocat": "write"}, nil)
	body := fixtures.GitHub(t, "issue_comment", "created", 0)
	mac := hmac.New(sha1.New, []byte(ghSecret))
	mac.Write(body)
	status, out := h.post(t, "/github", body, map[string]string{
		"X-GitHub-Event": "issue_comment", "X-GitHub-Delivery": "sha1-delivery",
		"X-Hub-Signature-256": "sha1=" + hex.EncodeToString(mac.Sum(nil)),
	})
	require.Equal(t, http.StatusUnauthorized, status, out)
	require.Zero(t, h.router.count())
}

// A delivery without the signature its forge needs is refused from its
// headers: a body over the limit gets 401, not 413, so it was never read.
func TestUnsignedDeliveryRefusedBeforeItsBodyIsRead(t *testing.T) {
	h := newHarness(t, nil, nil)
	big := []byte(`{"x":"` + strings.Repeat("a", 200<<10) + `"}`)
	for _, c := range []struct {
		path    string
		headers map[string]string
	}{
		{"/github", map[string]string{"X-GitHub-Event": "issues", "X-GitHub-Delivery": "d1"}},
		{"/github", map[string]string{"X-GitHub-Event": "issues", "X-GitHub-Delivery": "d1", "X-Hub-Signature-256": "sha256=zz"}},
		{"/forgejo", map[string]string{"X-Forgejo-Event": "issues", "X-Forgejo-Delivery": "d1"}},
		{"/forgejo", map[string]string{"X-Forgejo-Event": "issues", "X-Forgejo-Signature": "not-hex"}},
		{"/gitlab", map[string]string{"X-Gitlab-Event": "Note Hook"}},
	} {
		status, out := h.post(t, c.path, big, c.headers)
		require.Equal(t, http.StatusUnauthorized, status, "%s %v: %s", c.path, c.headers, out)
	}
	require.Contains(t, h.logs.String(), forge.ReasonNoSignature)
}

// GitLab's token mode checks the token before the body: a wrong one with a
// body over the limit is 401.
func TestGitLabTokenCheckedBeforeTheBody(t *testing.T) {
	logs := &logtest.Buffer{}
	in, err := forge.NewIntake(forge.IntakeConfig{Enqueuer: &fakeRouter{}, Logger: slog.New(slog.NewJSONHandler(logs, nil)), Host: "h1",
		Permissions: map[jobs.Forge]forge.Permissions{}})
	require.NoError(t, err)
	r, err := receiver.New(receiver.Config{Intake: in, Replay: &memReplay{}, GitLabMode: receiver.GitLabToken, GitLabSecret: "right",
		MaxBody: 1 << 10, Logger: slog.New(slog.NewJSONHandler(logs, nil)), Host: "h1"})
	require.NoError(t, err)
	srv := httptest.NewServer(r.Handler())
	t.Cleanup(srv.Close)
	req, err := http.NewRequest(http.MethodPost, srv.URL+"/gitlab", strings.NewReader(strings.Repeat("x", 4<<10)))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Gitlab-Token", "wrong")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
}

// Past MaxInFlight deliveries whose bodies are being read, one more is
// answered 503 with Retry-After at once, its body unread.
func TestInFlightBoundAnswers503(t *testing.T) {
	logs := &logtest.Buffer{}
	in, err := forge.NewIntake(forge.IntakeConfig{Enqueuer: &fakeRouter{}, Logger: slog.New(slog.NewJSONHandler(logs, nil)), Host: "h1",
		Permissions: map[jobs.Forge]forge.Permissions{}})
	require.NoError(t, err)
	r, err := receiver.New(receiver.Config{Intake: in, Replay: &memReplay{}, GitHubSecret: ghSecret, MaxInFlight: 1,
		Logger: slog.New(slog.NewJSONHandler(logs, nil)), Host: "h1"})
	require.NoError(t, err)
	srv := httptest.NewServer(r.Handler())
	t.Cleanup(srv.Close)

	// The first delivery's body never ends: it holds the one slot. It is
	// written on a connection of its own, its headers and the start of its
	// body flushed, so the server is reading it.
	conn, err := net.Dial("tcp", strings.TrimPrefix(srv.URL, "http://"))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	hdr := "POST /github HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n"
	for k, v := range githubHeaders("ping", "slow", []byte("{}")) {
		hdr += k + ": " + v + "\r\n"
	}
	_, err = conn.Write([]byte(hdr + "\r\n" + `{"zen":`))
	require.NoError(t, err)

	// A ping: answered 200 when it gets a slot, 503 while the slow one holds it.
	body := []byte(`{"zen":"ok"}`)
	var status int
	var retry string
	require.Eventually(t, func() bool {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/github", strings.NewReader(string(body)))
		for k, v := range githubHeaders("ping", "second", body) {
			req.Header.Set(k, v)
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false
		}
		resp.Body.Close()
		status, retry = resp.StatusCode, resp.Header.Get("Retry-After")
		return status == http.StatusServiceUnavailable
	}, 10*time.Second, 20*time.Millisecond, "last status %d", status)
	require.Equal(t, "1", retry)
	require.Contains(t, logs.String(), `"msg":"receiver_busy"`)
}
