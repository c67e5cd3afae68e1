package dispatch

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pidispatch/pidispatch/internal/fakeprovider"
	"github.com/pidispatch/pidispatch/jobs"
)

// A job's model socket forwards HTTP to the upstream, streaming, and notes
// when the first request came.
func TestModelSocketForwardsToTheUpstream(t *testing.T) {
	fp, err := fakeprovider.Listen(fakeprovider.Answer("hello", fakeprovider.Usage{Input: 7, Output: 3}))
	if err != nil {
		t.Fatal(err)
	}
	defer fp.Close()
	dir := filepath.Join(t.TempDir(), "m")
	proxy, err := newUpstreamProxy(fp.URL(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	m, err := startModelSocket(dir, proxy, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if !m.FirstRequest().IsZero() {
		t.Fatal("first request noted before any")
	}
	c := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", filepath.Join(dir, ModelSocketName))
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

func TestJobNetworkIsNoneUnlessGranted(t *testing.T) {
	w := &Worker{cfg: Config{JobNetwork: "pi-egress", SecretNetworkProfiles: []string{"open"}}, log: slog.New(slog.DiscardHandler)}
	net := func(j jobs.Job) string { return w.jobNetwork(&held{spec: j, log: w.log}) }
	if got := net(jobs.Job{}); got != "none" {
		t.Fatalf("ungranted job joins %q", got)
	}
	if got := net(jobs.Job{Network: true}); got != "pi-egress" {
		t.Fatalf("granted job joins %q", got)
	}
	// A job holding a secrets profile's values gets a network only when
	// the profile opted in.
	if got := net(jobs.Job{Network: true, SecretsProfile: "prod"}); got != "none" {
		t.Fatalf("a job of profile prod joins %q", got)
	}
	if got := net(jobs.Job{Network: true, SecretsProfile: "open"}); got != "pi-egress" {
		t.Fatalf("a job of opted-in profile open joins %q", got)
	}
}
