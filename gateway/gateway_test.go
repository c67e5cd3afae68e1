package gateway

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/internal/testkit/fakeprovider"
	"github.com/pidispatch/pidispatch/internal/testkit/logtest"
	"github.com/pidispatch/pidispatch/jobs"
)

// fakeRateLimits is an in-memory RateLimits.
type fakeRateLimits struct {
	mu       sync.Mutex
	until    map[string]time.Time
	suspends []suspension
	err      error
}

type suspension struct {
	provider string
	until    time.Time
	why      string
}

func (f *fakeRateLimits) Suspend(_ context.Context, provider string, until time.Time, why string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.suspends = append(f.suspends, suspension{provider, until, why})
	if f.until == nil {
		f.until = map[string]time.Time{}
	}
	if until.After(f.until[provider]) {
		f.until[provider] = until
	}
	return f.err
}

func (f *fakeRateLimits) SuspendedUntil(_ context.Context, provider string) (time.Time, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.until[provider], f.err
}

func (f *fakeRateLimits) Suspensions() []suspension {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]suspension(nil), f.suspends...)
}

var _ RateLimits = dispatch.RateLimits(nil)

// testPricing prices the test models with round numbers.
const testPricing = `
anthropic claude-test 3 15 0.3 3.75
openai    gpt-test    1.25 10 0.125 0
`

type rig struct {
	fp   *fakeprovider.Server
	gw   *Gateway
	sess *Session
	srv  *httptest.Server
	logs *logtest.Buffer
}

// newRig serves one job's session over HTTP, both providers at a fake.
func newRig(t *testing.T, cfg Config, job dispatch.GatewayJob, steps ...fakeprovider.Step) *rig {
	t.Helper()
	fp, err := fakeprovider.Listen(steps...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fp.Close() })
	logs := &logtest.Buffer{}
	cfg.Upstreams = map[string]string{"anthropic": fp.URL(), "openai": fp.URL() + "/v1"}
	cfg.Logger = slog.New(slog.NewJSONHandler(logs, nil))
	cfg.Host = "h1"
	if cfg.Pricing == nil {
		p, err := ParsePricing(strings.NewReader(testPricing))
		if err != nil {
			t.Fatal(err)
		}
		cfg.Pricing = p
	}
	gw, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if job.Keys == nil {
		job.Keys = map[string]string{"anthropic": "sk-ant-job", "openai": "sk-oai-job"}
	}
	job.JobID = "job-1"
	sess := gw.Session(context.Background(), job)
	srv := httptest.NewServer(sess)
	t.Cleanup(srv.Close)
	t.Cleanup(sess.Close)
	return &rig{fp: fp, gw: gw, sess: sess, srv: srv, logs: logs}
}

func (r *rig) post(t *testing.T, path, body string, hdr ...string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", r.srv.URL+path, strings.NewReader(body))
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

const (
	antStream = `{"model":"claude-test","stream":true,"messages":[]}`
	antJSON   = `{"model":"claude-test","messages":[]}`
	oaiStream = `{"model":"gpt-test","stream":true,"stream_options":{"include_usage":true}}`
	oaiJSON   = `{"model":"gpt-test"}`
)

// The job's key replaces whatever the container sent, in each API's
// header, and no log line holds it.
func TestKeyInjectedAndStripped(t *testing.T) {
	r := newRig(t, Config{}, dispatch.GatewayJob{}, fakeprovider.Answer("hi", fakeprovider.Usage{Input: 1, Output: 1}))
	resp, body := r.post(t, "/anthropic/v1/messages?beta=true", antStream, "x-api-key", "placeholder", "Authorization", "Bearer placeholder", "anthropic-version", "2023-06-01")
	if resp.StatusCode != 200 || !strings.Contains(body, "message_stop") {
		t.Fatalf("anthropic: %d %s", resp.StatusCode, body)
	}
	r.post(t, "/openai/chat/completions", oaiJSON, "x-api-key", "placeholder", "Authorization", "Bearer placeholder")
	reqs := r.fp.Requests()
	if len(reqs) != 2 {
		t.Fatalf("upstream saw %d requests", len(reqs))
	}
	a, o := reqs[0], reqs[1]
	if a.Path != "/v1/messages" || a.Query != "beta=true" || a.Header.Get("x-api-key") != "sk-ant-job" || a.Header.Get("Authorization") != "" ||
		a.Header.Get("anthropic-version") != "2023-06-01" || string(a.Body) != antStream {
		t.Fatalf("anthropic upstream saw %s %v %s", a.Path, a.Header, a.Body)
	}
	if o.Path != "/v1/chat/completions" || o.Header.Get("Authorization") != "Bearer sk-oai-job" || o.Header.Get("x-api-key") != "" {
		t.Fatalf("openai upstream saw %s %v", o.Path, o.Header)
	}
	if logs := r.logs.String(); strings.Contains(logs, "sk-ant-job") || strings.Contains(logs, "sk-oai-job") || !strings.Contains(logs, `"host":"h1"`) {
		t.Fatalf("logs:\n%s", logs)
	}
}

// A provider the job has no key for, or that has no upstream, is answered
// by the gateway in the provider's shape and never forwarded.
func TestNoKeyAndUnknownProvider(t *testing.T) {
	r := newRig(t, Config{}, dispatch.GatewayJob{Keys: map[string]string{"openai": "sk-oai-job"}}, fakeprovider.Answer("hi", fakeprovider.Usage{}))
	resp, body := r.post(t, "/anthropic/v1/messages", antStream)
	if resp.StatusCode != 401 || !strings.Contains(body, `"type":"authentication_error"`) || !strings.Contains(body, `holds no key for provider \"anthropic\"`) {
		t.Fatalf("no key: %d %s", resp.StatusCode, body)
	}
	resp, body = r.post(t, "/mystery/chat/completions", oaiJSON)
	if resp.StatusCode != 404 || !strings.Contains(body, `"code":"unknown_provider"`) {
		t.Fatalf("unknown provider: %d %s", resp.StatusCode, body)
	}
	if resp, _ := r.post(t, "/openai/../v1/chat/completions", oaiJSON); resp.StatusCode != 404 {
		t.Fatalf("a path climbing out of the provider: %d", resp.StatusCode)
	}
	if n := len(r.fp.Requests()); n != 0 {
		t.Fatalf("upstream saw %d requests", n)
	}
}

// A provider outside Upstreams and the known ones goes to Fallback.
func TestFallbackUpstream(t *testing.T) {
	fp, err := fakeprovider.Listen(fakeprovider.Answer("hi", fakeprovider.Usage{Input: 1, Output: 1}))
	if err != nil {
		t.Fatal(err)
	}
	defer fp.Close()
	gw, err := New(Config{Fallback: fp.URL() + "/base"})
	if err != nil {
		t.Fatal(err)
	}
	if u := gw.upstream("anthropic"); u.String() != "https://api.anthropic.com" {
		t.Fatalf("anthropic upstream %v", u)
	}
	sess := gw.Session(context.Background(), dispatch.GatewayJob{Keys: map[string]string{"local": "k"}})
	defer sess.Close()
	srv := httptest.NewServer(sess)
	defer srv.Close()
	resp, err := http.Post(srv.URL+"/local/chat/completions", "application/json", strings.NewReader(oaiJSON))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if reqs := fp.Requests(); resp.StatusCode != 200 || len(reqs) != 1 || reqs[0].Path != "/base/chat/completions" || reqs[0].APIKey != "Bearer k" {
		t.Fatalf("%d %+v", resp.StatusCode, reqs)
	}
	for _, bad := range []Config{{Fallback: "api.example.com"}, {Upstreams: map[string]string{"x": "ftp://h"}}, {Upstreams: map[string]string{"a/b": "http://h"}}, {RateLimitWait: -1}} {
		if _, err := New(bad); !errors.Is(err, ErrConfig) {
			t.Errorf("New(%+v) = %v", bad, err)
		}
	}
}

// The client reads the first event before the upstream sends the second:
// nothing on the way holds the stream back.
func TestStreamingIsUnbuffered(t *testing.T) {
	next := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":7}}}\n\n")
		w.(http.Flusher).Flush()
		select {
		case <-next:
		case <-r.Context().Done():
			return
		}
		io.WriteString(w, "event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":3}}\n\n")
	}))
	defer up.Close()
	gw, err := New(Config{Upstreams: map[string]string{"anthropic": up.URL}})
	if err != nil {
		t.Fatal(err)
	}
	sess := gw.Session(context.Background(), dispatch.GatewayJob{Keys: map[string]string{"anthropic": "k"}})
	srv := httptest.NewServer(sess)
	defer srv.Close()
	resp, err := http.Post(srv.URL+"/anthropic/v1/messages", "application/json", strings.NewReader(`{"model":"claude-sonnet-4-5","stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	first := make(chan string, 1)
	go func() {
		br := bufio.NewReader(resp.Body)
		var ev strings.Builder
		for {
			l, err := br.ReadString('\n')
			ev.WriteString(l)
			if err != nil || l == "\n" {
				break
			}
		}
		first <- ev.String()
	}()
	select {
	case ev := <-first:
		if !strings.Contains(ev, "message_start") {
			t.Fatalf("first event %q", ev)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the first event did not arrive before the upstream sent the second")
	}
	close(next)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if sp := sess.Spend(); sp.Tokens.Input != 7 || sp.Tokens.Output != 3 || sp.Micros != 7*3+3*15 {
		t.Fatalf("spend %+v", sp)
	}
}

// Dollars are usage × prices, in each API and mode.
func TestMeteredDollars(t *testing.T) {
	ant := fakeprovider.Usage{Input: 1000, Output: 200, CacheRead: 5000, CacheWrite: 100}
	oai := fakeprovider.Usage{Input: 1000, Output: 300, CacheRead: 400}
	antMicros := int64(1000*3 + 200*15 + 5000*3/10 + 100*375/100) // 7875
	oaiMicros := int64(1000*125/100 + 300*10 + 400*125/1000)      // 4300
	for _, tc := range []struct {
		name, path, body string
		u                fakeprovider.Usage
		micros           int64
	}{
		{"anthropic stream", "/anthropic/v1/messages", antStream, ant, antMicros},
		{"anthropic json", "/anthropic/v1/messages", antJSON, ant, antMicros},
		{"openai stream", "/openai/chat/completions", oaiStream, oai, oaiMicros},
		{"openai json", "/openai/chat/completions", oaiJSON, oai, oaiMicros},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, Config{}, dispatch.GatewayJob{}, fakeprovider.Answer("hello", tc.u))
			for range 2 {
				if resp, body := r.post(t, tc.path, tc.body); resp.StatusCode != 200 {
					t.Fatalf("%d %s", resp.StatusCode, body)
				}
			}
			sp := r.sess.Spend()
			want := jobs.SpendTokens{Input: 2 * tc.u.Input, Output: 2 * tc.u.Output, CacheRead: 2 * tc.u.CacheRead, CacheWrite: 2 * tc.u.CacheWrite}
			if sp.Micros != 2*tc.micros || sp.Dollars != float64(2*tc.micros)/1e6 || sp.Tokens != want || sp.Basis != jobs.BasisMetered || sp.Calls != 2 || len(sp.Unpriced) != 0 {
				t.Fatalf("spend %+v, want %d micros and %+v", sp, 2*tc.micros, want)
			}
		})
	}
}

// A successful answer without usage is estimated from its bytes, and the
// spend says so.
func TestNoUsageIsEstimated(t *testing.T) {
	r := newRig(t, Config{}, dispatch.GatewayJob{}, fakeprovider.Step{Text: strings.Repeat("word ", 200), NoUsage: true})
	body := `{"model":"claude-test","stream":true,"messages":[{"role":"user","content":"` + strings.Repeat("a", 4000) + `"}]}`
	r.post(t, "/anthropic/v1/messages", body)
	sp := r.sess.Spend()
	if sp.Basis != jobs.BasisEstimated || sp.Tokens.Input != int64(len(body)/4) || sp.Tokens.Output < 250 || sp.Micros == 0 {
		t.Fatalf("spend %+v", sp)
	}
}

// mystery is how the gateway shows claude-mystery, a model the host's
// configuration does not name: by digest, never as the job wrote it.
var mystery = func() string {
	sum := sha256.Sum256([]byte("claude-mystery"))
	return "model-" + hex.EncodeToString(sum[:6])
}()

// A model the table does not price is listed by its digest, its tokens
// counted.
func TestUnpricedModelIsListed(t *testing.T) {
	r := newRig(t, Config{}, dispatch.GatewayJob{}, fakeprovider.Answer("hi", fakeprovider.Usage{Input: 10, Output: 5}))
	r.post(t, "/anthropic/v1/messages", `{"model":"claude-mystery","stream":true}`)
	r.post(t, "/anthropic/v1/messages", antStream)
	sp := r.sess.Spend()
	if len(sp.Unpriced) != 1 || sp.Unpriced[0] != "anthropic/"+mystery || sp.Tokens.Input != 20 || sp.Micros != 10*3+5*15 {
		t.Fatalf("spend %+v", sp)
	}
}

// Each call reserves its worst case: its input bound (request bytes plus
// InputOverheadTokens) at the dearest input price and its max_tokens. A
// call the cap cannot afford whole gets a lower max_tokens; one that cannot
// afford even MinOutputTokens is refused, and so is every later call.
func TestCostCap(t *testing.T) {
	body := `{"model":"claude-test","stream":true,"max_tokens":1000,"messages":[]}`
	in := int64(len(body) + InputOverheadTokens)
	inCost := in*375/100 + 1 // cache writes are the dearest input
	// Each call costs 2000×3 + 500×15 = 13500 micros. Calls 1 and 2 afford
	// their whole bound; call 3 is lowered; call 4 cannot pay its input.
	u := fakeprovider.Usage{Input: 2000, Output: 500}
	const capMicros = 50_000
	r := newRig(t, Config{}, dispatch.GatewayJob{MaxMicros: capMicros}, fakeprovider.Answer("a", u))
	for i := range 3 {
		if resp, body := r.post(t, "/anthropic/v1/messages", body); resp.StatusCode != 200 {
			t.Fatalf("call %d: %d %s", i+1, resp.StatusCode, body)
		}
	}
	var sent struct {
		MaxTokens int64 `json:"max_tokens"`
	}
	_ = json.Unmarshal(r.fp.Requests()[2].Body, &sent)
	if want := (capMicros - 27_000 - inCost) / 15; sent.MaxTokens != want {
		t.Fatalf("call 3 was sent max_tokens %d, want %d", sent.MaxTokens, want)
	}
	spent := 27_000 + 6000 + min(500, sent.MaxTokens)*15
	resp, respBody := r.post(t, "/anthropic/v1/messages", body)
	var e struct {
		Type  string `json:"type"`
		Error struct{ Type, Message string }
	}
	_ = json.Unmarshal([]byte(respBody), &e)
	if resp.StatusCode != 400 || e.Type != "error" || e.Error.Type != "invalid_request_error" ||
		e.Error.Message != "pidispatch: job cost cap of $0.05 reached (spent $"+jobs.FormatUSD(spent)+")" {
		t.Fatalf("call 4: %d %s", resp.StatusCode, respBody)
	}
	if resp, _ := r.post(t, "/anthropic/v1/messages", body); resp.StatusCode != 400 {
		t.Fatalf("call 5 after the cap: %d", resp.StatusCode)
	}
	sp := r.sess.Spend()
	if n := len(r.fp.Requests()); n != 3 || sp.CapHit != jobs.ReasonCostCap || sp.Refused != 2 || sp.Calls != 3 || sp.Micros != spent {
		t.Fatalf("upstream saw %d calls; spend %+v", n, sp)
	}
}

// The token cap likewise, in OpenAI's shape.
func TestTokenCap(t *testing.T) {
	body := `{"model":"gpt-test","stream":true,"stream_options":{"include_usage":true},"max_tokens":1000}`
	in := int64(len(body) + InputOverheadTokens)
	// 1100 tokens a call: calls 1 and 2 afford 1000 output tokens, call 3
	// fewer, call 4 not its input.
	u := fakeprovider.Usage{Input: 1000, Output: 100}
	r := newRig(t, Config{}, dispatch.GatewayJob{MaxTokens: 7000}, fakeprovider.Answer("a", u))
	for i := range 3 {
		if resp, body := r.post(t, "/openai/chat/completions", body); resp.StatusCode != 200 {
			t.Fatalf("call %d: %d %s", i+1, resp.StatusCode, body)
		}
	}
	if want := fmt.Sprintf(`"max_tokens":%d`, 7000-2200-in); !strings.Contains(string(r.fp.Requests()[2].Body), want) {
		t.Fatalf("call 3 sent %s, want %s", r.fp.Requests()[2].Body, want)
	}
	resp, respBody := r.post(t, "/openai/chat/completions", body)
	var e struct {
		Error struct{ Message, Type, Code string }
	}
	_ = json.Unmarshal([]byte(respBody), &e)
	if resp.StatusCode != 400 || e.Error.Type != "insufficient_quota" || e.Error.Code != "token_cap" ||
		e.Error.Message != "pidispatch: job token cap of 7000 tokens reached (used 3300)" {
		t.Fatalf("call 4: %d %s", resp.StatusCode, respBody)
	}
	sp := r.sess.Spend()
	if n := len(r.fp.Requests()); n != 3 || sp.CapHit != jobs.ReasonTokenCap || sp.Refused != 1 || sp.Tokens.Input != 3000 {
		t.Fatalf("upstream saw %d calls; spend %+v", n, sp)
	}
}

// The first call is estimated from its request bytes alone: a cap smaller
// than that refuses it.
func TestFirstCallEstimatedFromItsBytes(t *testing.T) {
	r := newRig(t, Config{}, dispatch.GatewayJob{MaxTokens: 100}, fakeprovider.Answer("a", fakeprovider.Usage{Input: 1}))
	big := `{"model":"claude-test","stream":true,"pad":"` + strings.Repeat("p", 800) + `"}`
	if resp, _ := r.post(t, "/anthropic/v1/messages", big); resp.StatusCode != 400 || len(r.fp.Requests()) != 0 {
		t.Fatalf("a call estimated at %d tokens passed a cap of 100: %d", len(big)/4, resp.StatusCode)
	}
}

// Under a dollar cap, a model without a price is refused: its cost could
// not be checked.
func TestUnpricedRefusedUnderCostCap(t *testing.T) {
	r := newRig(t, Config{}, dispatch.GatewayJob{MaxMicros: 1_000_000}, fakeprovider.Answer("a", fakeprovider.Usage{Input: 1}))
	resp, body := r.post(t, "/anthropic/v1/messages", `{"model":"claude-mystery","stream":true}`)
	if resp.StatusCode != 400 || !strings.Contains(body, `model \"anthropic/`+mystery+`\" has no price`) || len(r.fp.Requests()) != 0 {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	if sp := r.sess.Spend(); sp.CapHit != jobs.ReasonCostCap || sp.Refused != 1 {
		t.Fatalf("spend %+v", sp)
	}
}

// A 429 with retry-after suspends the provider until then, and passes
// through unchanged.
func TestRateLimitSuspends(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	rl := &fakeRateLimits{}
	r := newRig(t, Config{RateLimits: rl, Now: func() time.Time { return t0 }}, dispatch.GatewayJob{},
		fakeprovider.Step{Status: 429, Reset: 30 * time.Second})
	resp, body := r.post(t, "/anthropic/v1/messages", antStream)
	if resp.StatusCode != 429 || !strings.Contains(body, "fake provider: scripted 429") || resp.Header.Get("retry-after") != "30" {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	s := rl.Suspensions()
	if len(s) != 1 || s[0].provider != "anthropic" || !s[0].until.Equal(t0.Add(30*time.Second)) || !strings.HasPrefix(s[0].why, "429") {
		t.Fatalf("suspensions %+v", s)
	}
	if sp := r.sess.Spend(); sp.Calls != 1 || sp.Basis != jobs.BasisMetered || sp.Tokens.Total() != 0 {
		t.Fatalf("a 429 is a call without tokens, and no estimate: %+v", sp)
	}
}

func TestResetTime(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, tc := range []struct {
		h    http.Header
		want time.Time
	}{
		{http.Header{"Retry-After": {"12"}}, now.Add(12 * time.Second)},
		{http.Header{"Retry-After": {now.Add(time.Hour).Format(http.TimeFormat)}}, now.Add(time.Hour)},
		{http.Header{"Anthropic-Ratelimit-Requests-Reset": {now.Add(time.Minute).Format(time.RFC3339)},
			"Anthropic-Ratelimit-Tokens-Reset": {now.Add(2 * time.Minute).Format(time.RFC3339)}}, now.Add(2 * time.Minute)},
		{http.Header{"X-Ratelimit-Reset-Requests": {"1s"}, "X-Ratelimit-Reset-Tokens": {"6m0s"}}, now.Add(6 * time.Minute)},
		{http.Header{"Retry-After": {"2"}, "X-Ratelimit-Reset-Tokens": {"6m0s"}}, now.Add(2 * time.Second)},
	} {
		if got, ok := resetTime(tc.h, now); !ok || !got.Equal(tc.want) {
			t.Errorf("resetTime(%v) = %v %v, want %v", tc.h, got, ok, tc.want)
		}
	}
	if _, ok := resetTime(http.Header{"Retry-After": {"soon"}}, now); ok {
		t.Error("an unreadable retry-after gave a reset")
	}
}

// A suspension that ends within RateLimitWait is waited out, then the call
// goes through.
func TestSuspendedWithinWaitWaits(t *testing.T) {
	rl := &fakeRateLimits{until: map[string]time.Time{"anthropic": time.Now().Add(300 * time.Millisecond)}}
	r := newRig(t, Config{RateLimits: rl, RateLimitWait: 5 * time.Second}, dispatch.GatewayJob{}, fakeprovider.Answer("hi", fakeprovider.Usage{Input: 1}))
	start := time.Now()
	resp, _ := r.post(t, "/anthropic/v1/messages", antStream)
	reqs := r.fp.Requests()
	if resp.StatusCode != 200 || len(reqs) != 1 || reqs[0].At.Before(start.Add(250*time.Millisecond)) {
		t.Fatalf("%d after %v, upstream %+v", resp.StatusCode, time.Since(start), reqs)
	}
}

// A suspension beyond RateLimitWait is answered 429 by the gateway.
func TestSuspendedBeyondWaitRefuses(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	rl := &fakeRateLimits{until: map[string]time.Time{"openai": t0.Add(5 * time.Minute)}}
	r := newRig(t, Config{RateLimits: rl, Now: func() time.Time { return t0 }}, dispatch.GatewayJob{}, fakeprovider.Answer("hi", fakeprovider.Usage{}))
	resp, body := r.post(t, "/openai/chat/completions", oaiJSON)
	if resp.StatusCode != 429 || resp.Header.Get("retry-after") != "300" || !strings.Contains(body, `"code":"rate_limit_exceeded"`) || len(r.fp.Requests()) != 0 {
		t.Fatalf("%d %v %s", resp.StatusCode, resp.Header, body)
	}
	if sp := r.sess.Spend(); sp.Refused != 1 || sp.Calls != 0 || sp.CapHit != "" {
		t.Fatalf("spend %+v", sp)
	}
}

// Close ends a call waiting for a rate limit; a RateLimits that fails lets
// calls through.
func TestCloseEndsWaitAndFailingRateLimitsForward(t *testing.T) {
	rl := &fakeRateLimits{until: map[string]time.Time{"anthropic": time.Now().Add(time.Minute)}}
	r := newRig(t, Config{RateLimits: rl, RateLimitWait: 2 * time.Minute}, dispatch.GatewayJob{}, fakeprovider.Answer("hi", fakeprovider.Usage{Input: 1}))
	time.AfterFunc(100*time.Millisecond, r.sess.Close)
	start := time.Now()
	if resp, _ := r.post(t, "/anthropic/v1/messages", antStream); resp.StatusCode != 503 || time.Since(start) > 10*time.Second {
		t.Fatalf("closed while waiting: %d after %v", resp.StatusCode, time.Since(start))
	}

	rl = &fakeRateLimits{err: errors.New("valkey down")}
	r = newRig(t, Config{RateLimits: rl}, dispatch.GatewayJob{}, fakeprovider.Answer("hi", fakeprovider.Usage{Input: 1}))
	for range 2 {
		if resp, _ := r.post(t, "/anthropic/v1/messages", antStream); resp.StatusCode != 200 {
			t.Fatalf("a failing RateLimits blocked the call: %d", resp.StatusCode)
		}
	}
	if n := strings.Count(r.logs.String(), "model_rate_limits_unreadable"); n != 1 {
		t.Fatalf("logged %d times", n)
	}
}

// Spend is safe to read while calls run.
func TestConcurrentCalls(t *testing.T) {
	r := newRig(t, Config{MaxCalls: 8}, dispatch.GatewayJob{}, fakeprovider.Answer("hi", fakeprovider.Usage{Input: 10, Output: 1}))
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			r.post(t, "/anthropic/v1/messages", antStream)
			_ = r.sess.Spend()
		})
	}
	wg.Wait()
	if sp := r.sess.Spend(); sp.Calls != 8 || sp.Tokens.Input != 80 || sp.Micros != 8*(30+15) {
		t.Fatalf("spend %+v", sp)
	}
}

// Close ends a call in flight; the upstream sees it go, and Spend stays
// readable.
func TestCloseEndsCallsInFlight(t *testing.T) {
	r := newRig(t, Config{}, dispatch.GatewayJob{}, fakeprovider.Step{Hang: true})
	time.AfterFunc(200*time.Millisecond, r.sess.Close)
	start := time.Now()
	resp, body := r.post(t, "/anthropic/v1/messages", antStream)
	if resp.StatusCode != 503 || !strings.Contains(body, "session is closed") || time.Since(start) > 10*time.Second {
		t.Fatalf("%d %s after %v", resp.StatusCode, body, time.Since(start))
	}
	if resp, _ := r.post(t, "/anthropic/v1/messages", antStream); resp.StatusCode != 503 || len(r.fp.Requests()) != 1 {
		t.Fatalf("a call after Close: %d", resp.StatusCode)
	}
	if sp := r.sess.Spend(); sp.Calls != 1 || sp.Tokens.Total() != 0 {
		t.Fatalf("spend %+v", sp)
	}
}

// An upstream that cannot be reached is a 502 in the provider's shape, and
// the log line holds no key.
func TestUpstreamUnreachable(t *testing.T) {
	logs := &logtest.Buffer{}
	gw, err := New(Config{Upstreams: map[string]string{"openai": "http://127.0.0.1:1"}, Logger: slog.New(slog.NewJSONHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	sess := gw.Session(context.Background(), dispatch.GatewayJob{Keys: map[string]string{"openai": "sk-secret-1"}})
	srv := httptest.NewServer(sess)
	defer srv.Close()
	resp, err := http.Post(srv.URL+"/openai/chat/completions", "application/json", strings.NewReader(oaiJSON))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 502 || !strings.Contains(string(b), `"code":"upstream_unreachable"`) || strings.Contains(string(b), "sk-secret") {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	if l := logs.String(); !strings.Contains(l, "model_upstream_failed") || strings.Contains(l, "sk-secret") {
		t.Fatalf("logs: %s", l)
	}
}

// A job's secret in the model name it sends reaches no log, event or
// record: the name is shown by digest unless the host's configuration
// names the model exactly.
func TestModelNameCarryingASecretIsShownByDigest(t *testing.T) {
	const secret = "sk-live-0123456789abcdef"
	var events []CallEvent
	logs := &logtest.Buffer{}
	r := newRig(t, Config{Logger: logs.Logger(), OnCall: func(e CallEvent) { events = append(events, e) }}, dispatch.GatewayJob{},
		fakeprovider.Answer("hi", fakeprovider.Usage{Input: 10, Output: 5}))
	r.post(t, "/anthropic/v1/messages", `{"model":"`+secret+`","stream":true}`)
	r.post(t, "/anthropic/v1/messages", `{"model":"claude-test","stream":true}`)
	sp := r.sess.Spend()
	seen := fmt.Sprintf("%+v %+v %s", sp, events, logs.String())
	if strings.Contains(seen, secret) {
		t.Fatalf("the secret in the model name was shown: %s", seen)
	}
	if len(events) != 2 || !strings.HasPrefix(events[0].Model, "model-") || events[1].Model != "claude-test" {
		t.Fatalf("events %+v", events)
	}
}

// The spend is split by provider and model, each call in its model's share,
// the shares summing to the totals.
func TestSpendSplitByModel(t *testing.T) {
	ant := fakeprovider.Usage{Input: 1000, Output: 200}
	r := newRig(t, Config{}, dispatch.GatewayJob{}, fakeprovider.Answer("hi", ant))
	for _, c := range []struct{ path, body string }{
		{"/anthropic/v1/messages", antStream}, {"/openai/chat/completions", oaiJSON},
		{"/anthropic/v1/messages", antJSON}, {"/anthropic/v1/messages", `{"model":"claude-mystery","stream":true}`},
	} {
		if resp, body := r.post(t, c.path, c.body); resp.StatusCode != 200 {
			t.Fatalf("%d %s", resp.StatusCode, body)
		}
	}
	sp := r.sess.Spend()
	antMicros := int64(1000*3 + 200*15)
	oaiMicros := int64(1000*125/100 + 200*10)
	want := []jobs.ModelSpend{
		{Provider: "anthropic", Model: "claude-test", Calls: 2, Micros: 2 * antMicros, Tokens: jobs.SpendTokens{Input: 2000, Output: 400}},
		{Provider: "openai", Model: "gpt-test", Calls: 1, Micros: oaiMicros, Tokens: jobs.SpendTokens{Input: 1000, Output: 200}},
		{Provider: "anthropic", Model: mystery, Calls: 1, Tokens: jobs.SpendTokens{Input: 1000, Output: 200}, Unpriced: true},
	}
	if fmt.Sprint(sp.Models) != fmt.Sprint(want) {
		t.Fatalf("models %+v\nwant   %+v", sp.Models, want)
	}
	var calls int
	var micros, tokens int64
	for _, m := range sp.Models {
		calls, micros, tokens = calls+m.Calls, micros+m.Micros, tokens+m.Tokens.Total()
	}
	if calls != sp.Calls || micros != sp.Micros || tokens != sp.Tokens.Total() {
		t.Fatalf("the split (%d calls, %d micros, %d tokens) does not sum to the totals %+v", calls, micros, tokens, sp)
	}
	if err := (jobs.Record{JobID: "j", Outcome: jobs.OutcomeCompleted, Reason: jobs.ReasonCompleted, Host: "h1",
		StartedAt: time.Unix(1, 0), EndedAt: time.Unix(2, 0), Spend: &sp}).Validate(); err != nil {
		t.Fatalf("a record of this spend is invalid: %v", err)
	}
}

// Past 16 models the rest is counted in the totals only.
func TestSpendSplitBounded(t *testing.T) {
	r := newRig(t, Config{}, dispatch.GatewayJob{}, fakeprovider.Answer("hi", fakeprovider.Usage{Input: 10, Output: 5}))
	for i := range 20 {
		r.post(t, "/anthropic/v1/messages", fmt.Sprintf(`{"model":"claude-m%d","stream":true}`, i))
	}
	sp := r.sess.Spend()
	if len(sp.Models) != 16 || sp.Calls != 20 || sp.Tokens.Input != 200 {
		t.Fatalf("%d models, spend %+v", len(sp.Models), sp)
	}
}

// A job that hides a secret, or a bidi control that reorders what a reader
// sees, in the model name it sends finds neither in the split: the share is
// named by the model's digest.
func TestSpendSplitNeverNamesTheJobsModel(t *testing.T) {
	const secret = "sk-live-0123456789abcdef"
	r := newRig(t, Config{}, dispatch.GatewayJob{}, fakeprovider.Answer("hi", fakeprovider.Usage{Input: 10, Output: 5}))
	for _, m := range []string{secret, "claude-test\u202egnp.exe", "claude\u0007bell"} {
		b, _ := json.Marshal(map[string]any{"model": m, "stream": true})
		r.post(t, "/anthropic/v1/messages", string(b))
	}
	sp := r.sess.Spend()
	if len(sp.Models) != 3 {
		t.Fatalf("models %+v", sp.Models)
	}
	for _, m := range sp.Models {
		if !strings.HasPrefix(m.Model, "model-") || strings.Contains(m.Model, secret) || strings.ContainsAny(m.Model, "\u202e\u0007") {
			t.Fatalf("a model's share is named %q, not by its digest", m.Model)
		}
	}
}
