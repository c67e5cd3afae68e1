package dash

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pidispatch/pidispatch/jobs"
	"github.com/pidispatch/pidispatch/operator"
	"github.com/pidispatch/pidispatch/registry"
)

// Hostile strings as a peer could write them into a job id (any printable
// text passes the job id rule).
const (
	hostileJobID = `<img src=x onerror="window.__pwned=1">`
	hostileHost  = `</script><script>window.__pwned=2</script>`
)

func sampleFake() *fake {
	end := time.Date(2026, 3, 1, 12, 0, 30, 0, time.UTC)
	exit := 0
	return &fake{
		hosts: []registry.Host{{Name: "alpha", Age: 2 * time.Second, AgeKnown: true, Routes: true, Caps: "secrets:gh", Concurrency: 2}},
		status: operator.StatusReport{PausedPartial: true, PerQueue: []operator.QueueStatus{
			{Queue: "pi-jobs", Waiting: 3}, {Queue: "pi-jobs@alpha", PausedState: true, Active: 1},
		}},
		held:    []Held{{JobID: "held-1", Checks: 4}},
		running: []Running{{JobID: "run-1", Queue: "pi-jobs@alpha", Host: "alpha"}},
		runs: []jobs.Record{{JobID: "done-1", Kind: jobs.KindManual, Target: "/src", Flow: "fix",
			StartedAt: end.Add(-30 * time.Second), EndedAt: end, Outcome: jobs.OutcomeCompleted,
			Reason: jobs.ReasonCompleted, ExitCode: &exit, Attempt: 1, Host: "alpha",
			Spend: &jobs.Spend{Dollars: 0.0123, Micros: 12300, Basis: jobs.BasisEstimated}}},
		degraded: "ok",
		starts:   Starts{Day: 3, Week: 9, DailyCap: 25},
	}
}

// sessions holds the session cookie of each test server, by its URL.
var sessions sync.Map

// serve starts the handler and logs in through its one-time address; get
// then carries the session.
func serve(t *testing.T, src Source, opts Options) *httptest.Server {
	t.Helper()
	h, err := New(src, opts)
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	host := ""
	if len(opts.Hosts) > 0 {
		host = opts.Hosts[0]
	}
	sessions.Store(srv.URL, loginAs(t, h.LoginURL(srv.URL), host))
	return srv
}

// login opens a one-time address and returns the session cookie it set.
func login(t *testing.T, loginURL string) string {
	t.Helper()
	return loginAs(t, loginURL, "")
}

// loginAs is login with a Host header other than the URL's when host is set.
func loginAs(t *testing.T, loginURL, host string) string {
	t.Helper()
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	req, err := http.NewRequest(http.MethodGet, loginURL, nil)
	require.NoError(t, err)
	if host != "" {
		req.Host = host
	}
	resp, err := c.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Equal(t, "/", resp.Header.Get("Location"))
	for _, ck := range resp.Cookies() {
		if ck.Name == SessionCookie {
			require.True(t, ck.HttpOnly)
			require.Equal(t, http.SameSiteStrictMode, ck.SameSite)
			return ck.Value
		}
	}
	t.Fatal("login set no session cookie")
	return ""
}

func sessionOf(url string) string {
	var out string
	sessions.Range(func(k, v any) bool {
		if strings.HasPrefix(url, k.(string)+"/") {
			out = v.(string)
			return false
		}
		return true
	})
	return out
}

func get(t *testing.T, url string) (*http.Response, string) {
	t.Helper()
	return getWith(t, url, sessionOf(url))
}

func getWith(t *testing.T, url, session string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	require.NoError(t, err)
	if session != "" {
		req.AddCookie(&http.Cookie{Name: SessionCookie, Value: session})
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, string(body)
}

func post(t *testing.T, url, session, body string) (int, actionReply) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	if session != "" {
		req.AddCookie(&http.Cookie{Name: SessionCookie, Value: session})
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var r actionReply
	raw, _ := io.ReadAll(resp.Body)
	_ = json.Unmarshal(raw, &r)
	return resp.StatusCode, r
}

func readState(t *testing.T, url string) (state, string) {
	t.Helper()
	resp, body := get(t, url+"/api/state")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "application/json; charset=utf-8", resp.Header.Get("Content-Type"))
	var st state
	require.NoError(t, json.Unmarshal([]byte(body), &st))
	return st, body
}

func TestPageForbidsExternalSourcesAndHasNoButtonsReadOnly(t *testing.T) {
	f := sampleFake()
	srv := serve(t, f, Options{})
	resp, page := get(t, srv.URL+"/")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	csp := resp.Header.Get("Content-Security-Policy")
	require.Contains(t, csp, "default-src 'none'")
	require.Contains(t, csp, "script-src 'self'")
	require.Contains(t, csp, "connect-src 'self'")
	require.NotContains(t, csp, "unsafe-inline")
	require.Equal(t, "nosniff", resp.Header.Get("X-Content-Type-Options"))
	require.NotContains(t, page, "<button")
	require.NotContains(t, page, "dash-token")

	for _, path := range []string{"/api/pause", "/api/resume", "/api/cancel"} {
		code, _ := post(t, srv.URL+path, sessionOf(srv.URL+"/"), `{"jobId":"run-1"}`)
		require.Equal(t, http.StatusNotFound, code, path)
	}
	require.Empty(t, f.actions())
	st, _ := readState(t, srv.URL)
	require.False(t, st.Actions)

	resp, js := get(t, srv.URL+"/static/app.js")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, resp.Header.Get("Content-Type"), "javascript")
	require.Contains(t, js, "textContent")
	resp, _ = get(t, srv.URL+"/static/style.css")
	require.Contains(t, resp.Header.Get("Content-Type"), "text/css")
}

// Nothing the pages load names another origin, and no script parses data
// as markup.
func TestEmbeddedFilesFetchNothingFromOutside(t *testing.T) {
	files := map[string]fs.FS{"page.html": pageFS, "job.html": pageFS, "static/style.css": static}
	scripts, err := fs.Glob(static, "static/*.js")
	require.NoError(t, err)
	require.Contains(t, scripts, "static/common.js")
	for _, name := range scripts {
		files[name] = static
	}
	for name, fsys := range files {
		raw, err := fs.ReadFile(fsys, name)
		require.NoError(t, err)
		// The SVG namespace is a name the charts create elements in,
		// never fetched: the one URL a page may hold.
		s := strings.ReplaceAll(string(raw), "'http://www.w3.org/2000/svg'", "")
		for _, bad := range []string{"http://", "https://", "src=\"//", "href=\"//", "@import", "url("} {
			require.NotContains(t, s, bad, name)
		}
	}
	for _, name := range scripts {
		js, err := fs.ReadFile(static, name)
		require.NoError(t, err)
		for _, bad := range []string{"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval("} {
			require.NotContains(t, string(js), bad, name)
		}
	}
}

// Both pages load the shared helpers before their own script, and no page
// script keeps a copy of them.
func TestPagesShareOneHelperScript(t *testing.T) {
	for page, own := range map[string]string{"page.html": "static/app.js", "job.html": "static/job.js"} {
		raw, err := fs.ReadFile(pageFS, page)
		require.NoError(t, err)
		html := string(raw)
		common := strings.Index(html, `<script src="static/common.js" defer></script>`)
		mine := strings.Index(html, `<script src="`+own+`" defer></script>`)
		require.True(t, common >= 0 && mine > common, "%s must load static/common.js before %s", page, own)
		js, err := fs.ReadFile(static, own)
		require.NoError(t, err)
		for _, copyOf := range []string{"function el(", "function table("} {
			require.NotContains(t, string(js), copyOf, own)
		}
	}
}

func TestStateHasEverySection(t *testing.T) {
	f := sampleFake()
	srv := serve(t, f, Options{Dollars: fakeDollars{{Window: "day", UsedMicros: 1_500_000, CapMicros: 10_000_000}, {Window: "month", UsedMicros: 2}}})
	st, _ := readState(t, srv.URL)
	require.Empty(t, st.Errors)
	require.Equal(t, "partly paused", st.Fleet)
	require.Len(t, st.Hosts, 1)
	require.Equal(t, "alpha", st.Hosts[0].Name)
	require.Equal(t, int64(2000), *st.Hosts[0].AgeMs)
	require.Equal(t, []string{"run-1"}, st.Hosts[0].Running)
	require.Equal(t, "secrets:gh", st.Hosts[0].Caps)
	require.Len(t, st.Queues, 2)
	require.True(t, st.Queues[1].PausedState)
	require.Equal(t, "held-1", st.Held[0].JobID)
	require.Equal(t, "run-1", st.Running[0].JobID)
	require.Equal(t, "done-1", st.Runs[0].JobID)
	require.Equal(t, jobs.OutcomeCompleted, st.Runs[0].Outcome)
	require.InDelta(t, 0.0123, *st.Runs[0].Dollars, 1e-9)
	require.True(t, st.Runs[0].Estimated)
	require.Equal(t, int64(30000), st.Runs[0].DurationMs)
	require.Empty(t, st.RunsNote)
	require.Equal(t, Starts{Day: 3, Week: 9, DailyCap: 25}, *st.Starts)
	require.False(t, st.DollarsOff)
	require.Len(t, st.Dollars, 2)
	require.InDelta(t, 1.5, st.Dollars[0].Used, 1e-9)
	require.InDelta(t, 10.0, *st.Dollars[0].Cap, 1e-9)
	require.Nil(t, st.Dollars[1].Cap)

	// Without a dollar source the section says so.
	st, _ = readState(t, serve(t, f, Options{}).URL)
	require.True(t, st.DollarsOff)
}

// A section that cannot be read is named; the others are still shown.
func TestStateNamesAFailedSection(t *testing.T) {
	f := sampleFake()
	f.failing = map[string]error{secHosts: errors.New("registry unreachable"), secRuns: errors.New("mirror down")}
	st, _ := readState(t, serve(t, f, Options{}).URL)
	require.Equal(t, map[string]string{"hosts": "registry unreachable", "runs": "mirror down"}, st.Errors)
	require.Empty(t, st.Hosts)
	require.NotNil(t, st.Hosts) // [] in JSON, never null
	require.Len(t, st.Queues, 2)
	require.Len(t, st.Running, 1)

	// A source answering no rows gives empty lists, never null.
	_, body := readState(t, serve(t, &fake{}, Options{}).URL)
	for _, key := range []string{"hosts", "queues", "held", "running", "runs", "dollars"} {
		require.Contains(t, body, `"`+key+`":[]`)
	}
}

// Hostile ids and names reach the page as escaped JSON strings: no raw
// markup in the answer, the exact text after decoding.
func TestStateEscapesHostileStrings(t *testing.T) {
	f := sampleFake()
	f.hosts[0].Name = hostileHost
	f.running[0].Host = hostileHost
	f.running[0].JobID = hostileJobID
	f.runs[0].JobID = hostileJobID
	f.held[0].JobID = hostileJobID
	st, body := readState(t, serve(t, f, Options{}).URL)
	require.NotContains(t, body, "<")
	require.NotContains(t, body, ">")
	require.Contains(t, body, `\u003cimg`)
	require.Equal(t, hostileHost, st.Hosts[0].Name)
	require.Equal(t, []string{hostileJobID}, st.Hosts[0].Running)
	require.Equal(t, hostileJobID, st.Runs[0].JobID)
	require.Equal(t, hostileJobID, st.Held[0].JobID)
}

// Only the browser that opened the one-time address acts: the page carries
// no token, a request without the session (a second local user) is refused
// and logged with its peer, the address works once, and each action's log
// line names the peer.
func TestActionsNeedTheSession(t *testing.T) {
	f := sampleFake()
	var logs bytes.Buffer
	h, err := New(f, Options{Actions: f, Logger: slog.New(slog.NewJSONHandler(&logs, nil)), Host: "alpha"})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)

	// Before the login, nothing is served but the login and the static files.
	resp, page := getWith(t, srv.URL+"/", "")
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	require.NotContains(t, page, h.loginToken)
	resp, _ = getWith(t, srv.URL+"/api/state", "")
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	resp, _ = getWith(t, srv.URL+LoginPath+"?token="+strings.Repeat("0", 64), "")
	require.Equal(t, http.StatusForbidden, resp.StatusCode)

	session := login(t, h.LoginURL(srv.URL))
	require.Len(t, session, 64)
	require.NotEqual(t, h.loginToken, session)
	// The address works once.
	resp, _ = getWith(t, h.LoginURL(srv.URL), "")
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
	require.Empty(t, resp.Cookies())

	resp, page = getWith(t, srv.URL+"/", session)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, page, `<button type="button" id="pause">`)
	require.Contains(t, page, `<button type="button" id="resume">`)
	require.NotContains(t, page, h.loginToken)
	require.NotContains(t, page, session)
	_, body := getWith(t, srv.URL+"/api/state", session)
	require.NotContains(t, body, session)
	require.NotContains(t, body, h.loginToken)

	for _, bad := range []string{"", "wrong", strings.Repeat("0", 64), h.loginToken} {
		code, _ := post(t, srv.URL+"/api/pause", bad, "{}")
		require.Equal(t, http.StatusUnauthorized, code)
	}
	// A form (no JSON) or another site's request is refused even with the cookie.
	req, err := http.NewRequest(http.MethodPost, srv.URL+"/api/pause", strings.NewReader("{}"))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "text/plain")
	req.AddCookie(&http.Cookie{Name: SessionCookie, Value: session})
	resp, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
	require.Empty(t, f.actions())

	code, r := post(t, srv.URL+"/api/pause", session, "{}")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, actionReply{OK: true, Message: "pause done"}, r)
	code, _ = post(t, srv.URL+"/api/resume", session, "{}")
	require.Equal(t, http.StatusOK, code)
	code, _ = post(t, srv.URL+"/api/cancel", session, `{"jobId":"`+strings.ReplaceAll(hostileJobID, `"`, `\"`)+`"}`)
	require.Equal(t, http.StatusOK, code)
	for _, body := range []string{"", "{}", `{"jobId":""}`, `{"jobId":"a\nb"}`, "not json"} {
		code, _ = post(t, srv.URL+"/api/cancel", session, body)
		require.Equal(t, http.StatusBadRequest, code, body)
	}
	require.Equal(t, []string{"pause", "resume", "cancel " + hostileJobID}, f.actions())

	// A GET never acts.
	resp, _ = getWith(t, srv.URL+"/api/pause", session)
	require.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode)

	// Each action and each refusal is logged with the peer; no line holds a secret.
	var acted, refused int
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var ev map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &ev), line)
		require.NotContains(t, line, session)
		require.NotContains(t, line, h.loginToken)
		switch ev["msg"] {
		case "dash_action":
			acted++
			require.Contains(t, ev["peer"], "127.0.0.1:", line)
			require.Equal(t, "alpha", ev["host"], line)
		case "dash_action_refused":
			refused++
			require.Contains(t, ev["peer"], "127.0.0.1:", line)
		}
	}
	require.Equal(t, 3, acted)
	require.Equal(t, 5, refused)
}

// With Options.Hosts, a request for another Host (a rebound DNS name) is
// refused.
func TestUnknownHostHeaderIsRefused(t *testing.T) {
	srv := serve(t, sampleFake(), Options{Hosts: []string{"127.0.0.1:1"}})
	resp, _ := get(t, srv.URL+"/api/state")
	require.Equal(t, http.StatusMisdirectedRequest, resp.StatusCode)
	req, err := http.NewRequest(http.MethodGet, srv.URL+"/api/state", nil)
	require.NoError(t, err)
	req.Host = "127.0.0.1:1"
	req.AddCookie(&http.Cookie{Name: SessionCookie, Value: sessionOf(srv.URL + "/")})
	resp, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
}

func TestNewRefusesANilSource(t *testing.T) {
	_, err := New(nil, Options{})
	require.Error(t, err)
}
