package main

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	neturl "net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/fleetstate"
	"github.com/pidispatch/pidispatch/internal/testkit/browsertest"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/internal/testkit/logtest"
	"github.com/pidispatch/pidispatch/registry"
)

var dashURLRE = regexp.MustCompile(`dashboard: (http://\S+:\d+/)login\?token=([0-9a-f]{64}) `)

// startDash runs `pi-dispatch dash args...` until the test ends and returns
// the one-time URL it printed, and a func that stops it (as SIGINT does) and
// returns its exit code.
func startDash(t *testing.T, env map[string]string, args ...string) (string, func() int) {
	t.Helper()
	return startDashErr(t, env, &logtest.Buffer{}, args...)
}

// startDashErr is startDash with the command's stderr kept in stderr.
func startDashErr(t *testing.T, env map[string]string, stderr *logtest.Buffer, args ...string) (string, func() int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, append([]string{"dash", "--listen", "127.0.0.1:0"}, args...), func(k string) string { return env[k] }, pw, stderr)
		pw.Close()
	}()
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			default:
			}
		}
	}()
	var code int
	var once sync.Once
	stop := func() int {
		once.Do(func() {
			cancel()
			select {
			case code = <-done:
			case <-time.After(15 * time.Second):
				t.Fatal("dash did not stop within 15s of its context ending")
			}
		})
		return code
	}
	t.Cleanup(func() { stop() })
	select {
	case line := <-lines:
		m := dashURLRE.FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("dash printed %q, want its URL; stderr: %s", line, stderr.String())
		}
		return m[1] + "login?token=" + m[2], stop
	case code := <-done:
		t.Fatalf("dash exited %d before serving: %s", code, stderr.String())
	case <-time.After(20 * time.Second):
		t.Fatalf("dash printed no URL in 20s; stderr: %s", stderr.String())
	}
	return "", nil
}

// dashBase is the dashboard's address, the one-time URL without its login.
func dashBase(loginURL string) string { return loginURL[:strings.Index(loginURL, "login?")] }

// dashSession opens the one-time URL and returns a client holding the session.
func dashSession(t *testing.T, loginURL string) *http.Client {
	t.Helper()
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	c := &http.Client{Jar: jar}
	resp, err := c.Get(loginURL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Request.URL.String() != dashBase(loginURL) {
		t.Fatalf("login: %d at %s", resp.StatusCode, resp.Request.URL)
	}
	return c
}

func httpDo(t *testing.T, c *http.Client, method, url string) int {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func TestDashRefusesBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		vars map[string]string
		want string
	}{
		{[]string{"--listen", "0.0.0.0:8477"}, nil, "is not a loopback address"},
		{[]string{"--listen", ":8477"}, nil, "--allow-remote"},
		{[]string{"--listen", "dash.example:8477"}, nil, "is not a loopback address"},
		{[]string{"--listen", "nonsense"}, nil, "--listen nonsense"},
		{[]string{"--listen", "127.0.0.1:http"}, nil, "not a number"},
		{[]string{"--frobnicate"}, nil, "flag provided but not defined"},
		{[]string{"extra"}, nil, `unexpected argument "extra"`},
	} {
		r := runCLI(t, tc.vars, append([]string{"dash"}, tc.args...)...)
		if r.code != exitUsage || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("dash %v %v: exit %d, stderr %q; want exit 2 naming %q", tc.args, tc.vars, r.code, r.stderr, tc.want)
		}
	}
	for _, addr := range []string{"127.0.0.1:1", "[::1]:1", "localhost:1"} {
		if ok, err := loopbackAddr(addr); !ok || err != nil {
			t.Errorf("%s: loopback %v, %v", addr, ok, err)
		}
	}
}

// Without --allow-actions the command serves the page and no action: every
// POST is 404. It stops when its context ends (SIGINT in main).
func TestDashServesReadOnlyAndStopsOnInterrupt(t *testing.T) {
	db := livetest.Valkey(t)
	login, stop := startDash(t, map[string]string{"VALKEY_URL": db.URL})
	url := dashBase(login)
	if code := httpDo(t, http.DefaultClient, http.MethodGet, url+"api/state"); code != http.StatusUnauthorized {
		t.Fatalf("GET api/state without the session: %d", code)
	}
	c := dashSession(t, login)
	if code := httpDo(t, c, http.MethodGet, url+"api/state"); code != http.StatusOK {
		t.Fatalf("GET api/state: %d", code)
	}
	for _, p := range []string{"api/pause", "api/resume", "api/cancel"} {
		if code := httpDo(t, c, http.MethodPost, url+p); code != http.StatusNotFound {
			t.Errorf("POST %s: %d, want 404", p, code)
		}
	}
	// A Host header other than the address served (DNS rebinding) is refused.
	req, _ := http.NewRequest(http.MethodGet, url+"api/state", nil)
	req.Host = "rebound.example:80"
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMisdirectedRequest {
		t.Errorf("rebound Host: %d", resp.StatusCode)
	}
	if code := stop(); code != exitOK {
		t.Fatalf("exit %d after interrupt", code)
	}
	if _, err := http.Get(url); err == nil {
		t.Fatal("still serving after interrupt")
	}
}

// --allow-remote serves on every interface, and says loudly what that means.
func TestDashAllowRemoteWarns(t *testing.T) {
	db := livetest.Valkey(t)
	var stderr logtest.Buffer
	login, stop := startDashErr(t, map[string]string{"VALKEY_URL": db.URL, "PI_UNSIGNED_QUEUES": "*"}, &stderr, "--listen", "0.0.0.0:0", "--allow-remote", "--allow-actions")
	url := dashBase(login)
	if !strings.Contains(stderr.String(), "WARNING: serving the dashboard on 0.0.0.0:0, which is not loopback") ||
		!strings.Contains(stderr.String(), "can pause it and cancel its jobs") {
		t.Fatalf("no warning: %q", stderr.String())
	}
	u, err := neturl.Parse(url)
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(u.Host)
	c := dashSession(t, "http://127.0.0.1:"+port+"/"+login[len(url):])
	if code := httpDo(t, c, http.MethodGet, "http://127.0.0.1:"+port+"/api/state"); code != http.StatusOK {
		t.Fatalf("GET via 127.0.0.1 of %s: %d", url, code)
	}
	if code := stop(); code != exitOK {
		t.Fatalf("exit %d", code)
	}
}

func TestDashReportsAnUnreachableValkey(t *testing.T) {
	r := runCLI(t, map[string]string{"VALKEY_URL": "redis://127.0.0.1:1/0", "PI_UNSIGNED_QUEUES": "*"}, "dash", "--listen", "127.0.0.1:0")
	if r.code != exitFailure || !strings.Contains(r.stderr, "could not reach Valkey") {
		t.Fatalf("%+v", r)
	}
}

// With --allow-actions, the Pause button in a real Chromium asks for a
// confirmation; declined, nothing changes; accepted, the fleet is paused.
func TestDashPauseButtonInChromium(t *testing.T) {
	db := livetest.Valkey(t)
	ctx := context.Background()
	host := "dash-pause-1"
	reg, err := registry.New(db.Client, host, registry.Facts{Routes: registry.Value(true)}, registry.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = reg.Close(context.Background()) })
	hostQueue := newQueue(t, db.Client, fleet.HostQueueName(host))
	if err := hostQueue.Declare(ctx); err != nil {
		t.Fatal(err)
	}
	url, _ := startDash(t, map[string]string{"VALKEY_URL": db.URL, "PI_UNSIGNED_QUEUES": "*"}, "--allow-actions")
	b := browsertest.Chromium(t, 90*time.Second)
	if err := chromedp.Do(b.Ctx, chromedp.Navigate(url), browsertest.WaitText(30*time.Second, host, "fleet: running")); err != nil {
		t.Fatal(err)
	}

	// Declined: the dialog was shown, nothing changed.
	if err := chromedp.Do(b.Ctx, chromedp.Click(chromedp.ID("pause"))); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a confirmation dialog", func() bool { return len(b.Dialogs()) == 1 })
	if !strings.Contains(b.Dialogs()[0], "Pause the whole fleet?") {
		t.Fatalf("dialog %q", b.Dialogs()[0])
	}
	time.Sleep(300 * time.Millisecond) // a POST sent anyway would have landed by now
	if n, _ := db.Client.Exists(ctx, fleetstate.PausedKey).Result(); n != 0 || paused(t, hostQueue) {
		t.Fatal("a declined confirmation paused the fleet")
	}

	b.AcceptDialogs()
	if err := chromedp.Do(b.Ctx,
		chromedp.Click(chromedp.ID("pause")),
		browsertest.WaitText(30*time.Second, "paused 2 queues", "fleet: paused"),
	); err != nil {
		t.Fatal(err)
	}
	if n, _ := db.Client.Exists(ctx, fleetstate.PausedKey).Result(); n != 1 || !paused(t, hostQueue) || !paused(t, newQueue(t, db.Client, fleet.SharedQueue)) {
		t.Fatal("the accepted Pause did not pause the fleet")
	}
	if len(b.Dialogs()) != 2 {
		t.Fatalf("dialogs %q", b.Dialogs())
	}
	browsertest.Screenshot(t, b, "paused")
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("no %s within 10s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
