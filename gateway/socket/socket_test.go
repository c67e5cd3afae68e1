package socket

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/pidispatch/pidispatch/internal/testkit/fakeprovider"
)

// A job's model socket serves its handler (here a forwarder to the
// upstream, streaming) and notes when the first request came.
func TestModelSocketForwardsToTheUpstream(t *testing.T) {
	fp, err := fakeprovider.Listen(fakeprovider.Answer("hello", fakeprovider.Usage{Input: 7, Output: 3}))
	if err != nil {
		t.Fatal(err)
	}
	defer fp.Close()
	access := socketAccess{uid: os.Getuid(), gid: os.Getgid(), known: true}
	dir, parent, private, err := makeDir(access)
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(parent)
	up, err := url.Parse(fp.URL())
	if err != nil {
		t.Fatal(err)
	}
	proxy := &httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) { r.SetURL(up) }, FlushInterval: -1}
	m, err := start(dir, private, access, proxy, 0, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if !m.FirstRequest().IsZero() {
		t.Fatal("first request noted before any")
	}
	c := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", filepath.Join(dir, Name))
	}}}
	req, _ := http.NewRequest("POST", "http://model/v1/messages", strings.NewReader(`{"model":"m","stream":true}`))
	req.Header.Set("x-api-key", "sk-job-key")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"text":"hello"`) || !strings.Contains(string(body), "message_stop") {
		t.Fatalf("status %d, body %s", resp.StatusCode, body)
	}
	reqs := fp.Requests()
	if len(reqs) != 1 || reqs[0].Path != "/v1/messages" || reqs[0].APIKey != "sk-job-key" {
		t.Fatalf("upstream saw %+v", reqs)
	}
	if m.FirstRequest().IsZero() {
		t.Fatal("first request not noted")
	}
	m.Close()
	if _, err := c.Do(req); err == nil {
		t.Fatal("socket still served after Close")
	}
}

// The socket and its folder are closed to every other local user: the
// container's user owns them (0700, 0600) when it is known; else the
// folder has an unguessable name inside one no other user may list.
func TestModelSocketClosedToOtherUsers(t *testing.T) {
	check := func(path string, want os.FileMode, uid int) {
		t.Helper()
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		if fi.Mode().Perm() != want || int(st.Uid) != uid {
			t.Errorf("%s: mode %v uid %d, want %v uid %d", path, fi.Mode().Perm(), st.Uid, want, uid)
		}
	}
	cases := []struct {
		user              string
		dirMode, sockMode os.FileMode
		parentMode        os.FileMode
		owner             int
		private           bool
	}{
		{user: fmt.Sprintf("%d:%d", os.Getuid(), os.Getgid()), dirMode: 0o700, sockMode: 0o600, owner: os.Getuid(), private: true},
		{user: "", dirMode: 0o755, sockMode: 0o666, parentMode: 0o711, owner: os.Getuid()},
	}
	if os.Getuid() == 0 {
		cases = append(cases, struct {
			user              string
			dirMode, sockMode os.FileMode
			parentMode        os.FileMode
			owner             int
			private           bool
		}{user: "4242:4242", dirMode: 0o700, sockMode: 0o600, owner: 4242, private: true})
	}
	for _, tc := range cases {
		access := accessFor(tc.user)
		dir, parent, private, err := makeDir(access)
		if err != nil {
			t.Fatal(err)
		}
		m, err := start(dir, private, access, http.NotFoundHandler(), 0, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		if private != tc.private {
			t.Errorf("%q: private %v", tc.user, private)
		}
		check(dir, tc.dirMode, tc.owner)
		check(filepath.Join(dir, Name), tc.sockMode, tc.owner)
		if !tc.private {
			check(parent, tc.parentMode, os.Getuid())
			if len(filepath.Base(dir)) != 16 {
				t.Errorf("%q: the folder's name %q is guessable", tc.user, filepath.Base(dir))
			}
		}
		m.Close()
		os.RemoveAll(parent)
	}
}

// A socket folder whose path passes the 107 bytes a socket path may hold
// (a long TMPDIR) still serves.
func TestModelSocketUnderALongPath(t *testing.T) {
	dir := filepath.Join(t.TempDir(), strings.Repeat("d", 60), strings.Repeat("e", 40))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	m, err := start(dir, true, socketAccess{uid: os.Getuid(), gid: os.Getgid(), known: true}, http.NotFoundHandler(), 0, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	path := filepath.Join(dir, Name)
	fi, err := os.Stat(path)
	if err != nil || fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o600 {
		t.Fatalf("%s: %v %v", path, fi, err)
	}
	// Connect by a short path to the same folder, as a container's mount does.
	link := filepath.Join(t.TempDir(), "s")
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	c := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", filepath.Join(link, Name))
	}}}
	resp, err := c.Get("http://model/x")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 404 {
		t.Fatalf("status %d", resp.StatusCode)
	}
}

// Open makes the folder and serves in it; Close stops serving and removes
// the folder.
func TestOpenAndClose(t *testing.T) {
	m, err := Open(http.NotFoundHandler(), fmt.Sprintf("%d:%d", os.Getuid(), os.Getgid()), 0, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(m.Dir(), Name)); err != nil || fi.Mode()&os.ModeSocket == 0 {
		t.Fatalf("no socket in %s: %v", m.Dir(), err)
	}
	m.Close()
	if _, err := os.Stat(m.Dir()); !os.IsNotExist(err) {
		t.Fatalf("folder %s left after Close: %v", m.Dir(), err)
	}
}
