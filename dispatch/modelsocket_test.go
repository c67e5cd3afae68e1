package dispatch

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/pidispatch/pidispatch/internal/testkit/fakeprovider"
	"github.com/pidispatch/pidispatch/jobs"
)

// The forwarder of a worker with PI_MODEL_UPSTREAM and no gateway passes a
// job's call to the upstream as it came (its key included), streaming.
func TestUpstreamProxyForwards(t *testing.T) {
	fp, err := fakeprovider.Listen(fakeprovider.Answer("hello", fakeprovider.Usage{Input: 7, Output: 3}))
	if err != nil {
		t.Fatal(err)
	}
	defer fp.Close()
	proxy, err := newUpstreamProxy(fp.URL(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(proxy)
	defer srv.Close()
	req, _ := http.NewRequest("POST", srv.URL+"/v1/messages", strings.NewReader(`{"model":"m","stream":true}`))
	req.Header.Set("x-api-key", "sk-job-key")
	resp, err := srv.Client().Do(req)
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
}

func TestJobNetworkIsNoneUnlessGranted(t *testing.T) {
	w := &Worker{cfg: Config{Settings: Settings{JobNetwork: "pi-egress", SecretNetworkProfiles: []string{"open"}}}, log: slog.New(slog.DiscardHandler)}
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
