package gateway

import (
	"bytes"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/internal/testkit/fakeprovider"
)

// No credential header of any name or case reaches the provider from a
// job: only the headers the provider needs are forwarded.
func TestOnlyNeededHeadersForwarded(t *testing.T) {
	r := newRig(t, Config{}, dispatch.GatewayJob{}, fakeprovider.Answer("hi", fakeprovider.Usage{Input: 1, Output: 1}))
	sneaky := []string{"x_api_key", "sk-ant-sneaky", "api-key", "sk-sneaky-2", "Proxy-Authorization", "Basic c25lYWt5", "X-API-KEY", "sk-sneaky-3",
		"OpenAI-Organization", "org-sneaky", "Cookie", "session=sneaky"}
	for _, path := range []string{"/anthropic/v1/messages", "/openai/chat/completions"} {
		hdr := append([]string{"anthropic-version", "2023-06-01", "anthropic-beta", "tools-2024", "Content-Type", "application/json"}, sneaky...)
		req, _ := http.NewRequest("POST", r.srv.URL+path, strings.NewReader(antJSON))
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header[hdr[i]] = []string{hdr[i+1]} // as sent, not canonicalised
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	reqs := r.fp.Requests()
	if len(reqs) != 2 {
		t.Fatalf("upstream saw %d requests", len(reqs))
	}
	for _, rq := range reqs {
		for name, v := range rq.Header {
			if strings.Contains(strings.Join(v, " "), "sneaky") {
				t.Errorf("%s: the provider got %s: %v", rq.API, name, v)
			}
		}
	}
	if a := reqs[0].Header; a.Get("anthropic-version") != "2023-06-01" || a.Get("anthropic-beta") != "tools-2024" || a.Get("x-api-key") != "sk-ant-job" {
		t.Errorf("anthropic headers %v", a)
	}
	if o := reqs[1].Header; o.Get("anthropic-version") != "" || o.Get("Authorization") != "Bearer sk-oai-job" || o.Get("Content-Type") != "application/json" {
		t.Errorf("openai headers %v", o)
	}
}

// PI_ALLOWED_MODELS: a call for another model is refused before it is
// forwarded.
func TestAllowedModels(t *testing.T) {
	r := newRig(t, Config{AllowedModels: []string{"anthropic/claude-test", "openai/gpt-*"}}, dispatch.GatewayJob{},
		fakeprovider.Answer("hi", fakeprovider.Usage{Input: 1, Output: 1}))
	for _, tc := range []struct {
		path, body string
		status     int
	}{
		{"/anthropic/v1/messages", antJSON, 200},
		{"/openai/chat/completions", oaiJSON, 200},
		{"/anthropic/v1/messages", `{"model":"claude-opus-4-1","messages":[]}`, 403},
		{"/anthropic/v1/messages", `{"model":"claude-test-x"}`, 403},
		{"/anthropic/v1/messages", `{"messages":[]}`, 403},
		{"/anthropic/v1/messages", `{"model":"claude-\u0074est","model":"claude-opus-4-1"}`, 400},
	} {
		if resp, body := r.post(t, tc.path, tc.body); resp.StatusCode != tc.status {
			t.Errorf("%s %s: %d %s", tc.path, tc.body, resp.StatusCode, body)
		}
	}
	if n := len(r.fp.Requests()); n != 2 {
		t.Fatalf("upstream saw %d requests", n)
	}
	if _, err := New(Config{AllowedModels: []string{"claude"}}); err == nil {
		t.Fatal("a pattern without a provider was accepted")
	}
}

// Past MaxCalls calls in flight, a call is answered 429 with retry-after,
// in the provider's shape, and not forwarded.
func TestMaxCallsInFlight(t *testing.T) {
	release := make(chan struct{})
	arrived := make(chan struct{}, 8)
	r := newRig(t, Config{MaxCalls: 2}, dispatch.GatewayJob{},
		fakeprovider.Step{Text: "hi", Usage: fakeprovider.Usage{Input: 1, Output: 1}, Before: func() { arrived <- struct{}{}; <-release }})
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() { r.post(t, "/anthropic/v1/messages", antJSON) })
	}
	<-arrived
	<-arrived
	resp, body := r.post(t, "/anthropic/v1/messages", antJSON)
	close(release)
	wg.Wait()
	if resp.StatusCode != 429 || resp.Header.Get("retry-after") == "" || !strings.Contains(body, `"type":"rate_limit_error"`) || len(r.fp.Requests()) != 2 {
		t.Fatalf("%d %v %s; upstream saw %d", resp.StatusCode, resp.Header, body, len(r.fp.Requests()))
	}
	if resp, _ := r.post(t, "/anthropic/v1/messages", antJSON); resp.StatusCode != 200 {
		t.Fatalf("after the calls ended: %d", resp.StatusCode)
	}
}

// The parser reads a body as the provider does: escaped keys, a bound
// named twice, a bound that is not a number.
func TestParseRequestEvasions(t *testing.T) {
	for _, tc := range []struct {
		body   string
		out    int64
		images int
		docs   int
		bad    bool
	}{
		{body: `{"model":"m","max_tokens":100}`, out: 100},
		{body: `{"model":"m","max\u005ftokens":64000}`, out: 64000},
		{body: `{"model":"m","max_tokens":100,"max_tokens":64000}`, bad: true},
		{body: `{"model":"m","max_tokens":"64000"}`, out: -1},
		{body: `{"model":"m","max_tokens":null}`, out: -1},
		{body: `{"model":"m","max_tokens":6.4e4}`, out: 64000},
		{body: `{"model":"m","max_tokens":100,"max_completion_tokens":5000}`, out: 5000},
		{body: `{"messages":[{"content":[{"type" : "image","source":{"type":"url","url":"http://x"}},{"type":"\u0064ocument","source":{"type":"base64","data":"x"}},{"type":"document","source":{"type":"text","data":"x"}}]}]}`, out: -1, images: 1, docs: 1},
		{body: `{"messages":[{"content":[{"type":"image_url","image_url":{"url":"data:x"}}]}]}`, out: -1, images: 1},
		{body: `{"messages":[{"content":[{"type":"text","type":"image"}]}]}`, bad: true},
		{body: `{"model":"m"} {}`, bad: true},
		{body: `[1]`, bad: true},
	} {
		info, err := parseRequest([]byte(tc.body))
		if (err != nil) != tc.bad {
			t.Errorf("%s: err %v", tc.body, err)
			continue
		}
		if tc.bad {
			continue
		}
		info.readBound([]byte(tc.body))
		if info.out != tc.out || info.images != tc.images || info.docs != tc.docs {
			t.Errorf("%s: out %d images %d docs %d", tc.body, info.out, info.images, info.docs)
		}
	}
	for _, tc := range []struct{ body, want string }{
		{`{"model":"m","max_tokens":64000}`, `{"model":"m","max_tokens":300}`},
		{`{"model":"m","max_tokens":null,"max_completion_tokens":9}`, `{"model":"m","max_tokens":300,"max_completion_tokens":300}`},
		{`{"model":"m"}`, `{"max_tokens":300,"model":"m"}`},
		{`{ }`, `{"max_tokens":300 }`},
	} {
		info, err := parseRequest([]byte(tc.body))
		if err != nil {
			t.Fatal(err)
		}
		if got := string(bytes.Join(withBound([]byte(tc.body), info, "max_tokens", 300), nil)); got != tc.want {
			t.Errorf("withBound(%s) = %s", tc.body, got)
		}
	}
}
