package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/internal/testkit/fakeprovider"
	"github.com/pidispatch/pidispatch/jobs"
)

// The tests of this file attack the caps the way a hostile job would, with
// a fake provider that bills like a real one: they compare what the
// provider billed with the job's cap and with what the record says.

// billed is what the fake provider billed, priced with the rig's table.
func (r *rig) billed(t *testing.T, provider, model string) (micros, tokens int64) {
	t.Helper()
	b := r.fp.Billed()
	m, ok := r.gw.cfg.Pricing.Price(provider, model, Usage(b))
	if !ok {
		t.Fatalf("%s/%s has no price", provider, model)
	}
	return m, b.Total()
}

// holds checks that the bill is within the cap and that the record states
// at least the bill.
func (r *rig) holds(t *testing.T, provider, model string) jobs.Spend {
	t.Helper()
	micros, tokens := r.billed(t, provider, model)
	sp := r.sess.Spend()
	if cap := r.sess.job.MaxMicros; cap > 0 && micros > cap {
		t.Errorf("the provider billed $%s against a cap of $%s (%.1fx)", jobs.FormatUSD(micros), jobs.FormatUSD(cap), float64(micros)/float64(cap))
	}
	if cap := r.sess.job.MaxTokens; cap > 0 && tokens > cap {
		t.Errorf("the provider billed %d tokens against a cap of %d (%.1fx)", tokens, cap, float64(tokens)/float64(cap))
	}
	if sp.Micros < micros || sp.Tokens.Total() < tokens {
		t.Errorf("the record says $%s and %d tokens; the provider billed $%s and %d tokens", jobs.FormatUSD(sp.Micros), sp.Tokens.Total(), jobs.FormatUSD(micros), tokens)
	}
	return sp
}

func userBody(model, extra string) string {
	return `{"model":"` + model + `"` + extra + `,"messages":[{"role":"user","content":"write"}]}`
}

// One call asking for 64000 output tokens under a $0.10 cap: the bound is
// lowered to what the cap affords, and the agent gets a shorter answer.
func TestOutputBoundLoweredToTheCap(t *testing.T) {
	r := newRig(t, Config{}, dispatch.GatewayJob{MaxMicros: 100_000},
		fakeprovider.Step{Text: "long", FillOutput: true, Usage: fakeprovider.Usage{Input: 50}})
	for range 3 {
		r.post(t, "/anthropic/v1/messages", userBody("claude-test", `,"max_tokens":64000`))
	}
	r.holds(t, "anthropic", "claude-test")
	reqs := r.fp.Requests()
	if len(reqs) == 0 {
		t.Fatal("the first call was refused: the cap affords a shorter answer")
	}
	var sent struct {
		MaxTokens int64 `json:"max_tokens"`
	}
	if err := json.Unmarshal(reqs[0].Body, &sent); err != nil || sent.MaxTokens <= 0 || sent.MaxTokens >= 64000 {
		t.Fatalf("the provider was asked for max_tokens %d (%v)", sent.MaxTokens, err)
	}
}

// An OpenAI call with no output bound gets one the cap affords.
func TestMissingOutputBoundIsSet(t *testing.T) {
	r := newRig(t, Config{}, dispatch.GatewayJob{MaxMicros: 80_000},
		fakeprovider.Step{Text: "long", FillOutput: true, Usage: fakeprovider.Usage{Input: 50, Output: 64000}})
	for range 3 {
		r.post(t, "/openai/chat/completions", userBody("gpt-test", ""))
	}
	r.holds(t, "openai", "gpt-test")
	reqs := r.fp.Requests()
	if len(reqs) == 0 || !strings.Contains(string(reqs[0].Body), `"max_completion_tokens":`) {
		t.Fatalf("the provider saw %d calls, the first without a bound", len(reqs))
	}
}

// max_tokens 64000 under a 10000-token cap.
func TestOutputBoundLoweredToTheTokenCap(t *testing.T) {
	r := newRig(t, Config{}, dispatch.GatewayJob{MaxTokens: 10_000},
		fakeprovider.Step{Text: "long", FillOutput: true, Usage: fakeprovider.Usage{Input: 50}})
	for range 3 {
		r.post(t, "/anthropic/v1/messages", userBody("claude-test", `,"max_tokens":64000,"stream":true`))
	}
	r.holds(t, "anthropic", "claude-test")
}

// Eight concurrent first calls under a $0.03 cap, each able to cost twice
// the cap: the reservations in flight never sum past it.
func TestConcurrentFirstCallsHoldTheCap(t *testing.T) {
	r := newRig(t, Config{MaxCalls: 8}, dispatch.GatewayJob{MaxMicros: 30_000},
		fakeprovider.Step{Text: "long", FillOutput: true, Usage: fakeprovider.Usage{Input: 50}, Before: func() { time.Sleep(100 * time.Millisecond) }})
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			r.post(t, "/anthropic/v1/messages", userBody("claude-test", `,"max_tokens":4000,"stream":true`))
		})
	}
	wg.Wait()
	r.holds(t, "anthropic", "claude-test")
}

// A small request the provider bills large input for (a document's pages)
// is reserved at the document's bound, not its bytes.
func TestDocumentInputIsBounded(t *testing.T) {
	r := newRig(t, Config{}, dispatch.GatewayJob{MaxMicros: 75_000},
		fakeprovider.Step{Text: "read", InputPerBlock: 30_000, Usage: fakeprovider.Usage{Input: 50, Output: 10}})
	doc := `,"max_tokens":100,"messages":[{"role":"user","content":[{"type":"document","source":{"type":"base64","media_type":"application/pdf","data":"JVBERi0xLjQK"}},{"type":"text","text":"summarise"}]}]}`
	for range 2 {
		r.post(t, "/anthropic/v1/messages", `{"model":"claude-test"`+doc)
	}
	r.holds(t, "anthropic", "claude-test")
}

// Server-side tools add input the request cannot bound: refused under a cap.
func TestServerToolsRefusedUnderCap(t *testing.T) {
	r := newRig(t, Config{}, dispatch.GatewayJob{MaxMicros: 1_000_000},
		fakeprovider.Step{Text: "found", InputPerBlock: 30_000, Usage: fakeprovider.Usage{Input: 50, Output: 10}})
	resp, body := r.post(t, "/anthropic/v1/messages", userBody("claude-test", `,"max_tokens":100,"tools":[{"type":"web_search_20250305","name":"web_search","max_uses":5}]`))
	if resp.StatusCode != 400 || !strings.Contains(body, "web_search_20250305") || len(r.fp.Requests()) != 0 {
		t.Fatalf("%d %s; the provider saw %d calls", resp.StatusCode, body, len(r.fp.Requests()))
	}
}

// streamAndHangUp reads the first bytes of a streamed answer and hangs up.
func (r *rig) streamAndHangUp(t *testing.T, body string) {
	t.Helper()
	resp, err := http.Post(r.srv.URL+"/anthropic/v1/messages", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = bufio.NewReader(resp.Body).Peek(512)
	resp.Body.Close()
}

// settled waits until no call of the session is in flight.
func (r *rig) settled(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for r.sess.inFlight() > 0 {
		if time.Now().After(deadline) {
			t.Fatal("calls still in flight")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

const hangBody = `{"model":"claude-test","stream":true,"max_tokens":20000,"messages":[{"role":"user","content":"write"}]}`

// Ten streams hung up on before their closing usage: the gateway reads
// each answer to its end and records what the provider billed.
func TestHangUpMidStreamIsMetered(t *testing.T) {
	r := newRig(t, Config{}, dispatch.GatewayJob{MaxMicros: 10_000_000},
		fakeprovider.Step{Text: "end", Big: 1 << 20, ChunkDelay: 2 * time.Millisecond, Usage: fakeprovider.Usage{Input: 1000, Output: 20000}})
	for range 10 {
		r.streamAndHangUp(t, hangBody)
	}
	r.settled(t)
	if sp := r.holds(t, "anthropic", "claude-test"); sp.Basis != jobs.BasisMetered {
		t.Errorf("the drained answers should be metered: %+v", sp)
	}
}

// A session closed mid-stream (the job cancelled, timed out, its worker
// stopping) charges the call's whole reservation.
func TestCloseMidStreamChargesTheReservation(t *testing.T) {
	r := newRig(t, Config{}, dispatch.GatewayJob{MaxMicros: 10_000_000},
		fakeprovider.Step{Text: "end", Big: 1 << 20, ChunkDelay: 20 * time.Millisecond, Usage: fakeprovider.Usage{Input: 1000, Output: 20000}})
	resp, err := http.Post(r.srv.URL+"/anthropic/v1/messages", "application/json", strings.NewReader(hangBody))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = bufio.NewReader(resp.Body).Peek(512)
	r.sess.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if sp := r.holds(t, "anthropic", "claude-test"); sp.Basis != jobs.BasisEstimated {
		t.Errorf("a reservation charged is an estimate: %+v", sp)
	}
}

// A provider that bills past the bound it was given: the job's calls stop
// at once and the record names the overshoot.
func TestOvershootStopsTheJob(t *testing.T) {
	r := newRig(t, Config{}, dispatch.GatewayJob{MaxMicros: 1_000_000},
		fakeprovider.Step{Text: "more", Overbill: 5000, Usage: fakeprovider.Usage{Input: 50, Output: 100}})
	if resp, body := r.post(t, "/anthropic/v1/messages", userBody("claude-test", `,"max_tokens":100`)); resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	resp, _ := r.post(t, "/anthropic/v1/messages", userBody("claude-test", `,"max_tokens":100`))
	sp := r.sess.Spend()
	if resp.StatusCode != 400 || len(r.fp.Requests()) != 1 || sp.CapHit != jobs.ReasonCostCap || sp.OvershootMicros <= 0 {
		t.Fatalf("after an overshoot: %d, the provider saw %d calls, spend %+v", resp.StatusCode, len(r.fp.Requests()), sp)
	}
	if !strings.Contains(r.logs.String(), "model_call_overshoot") {
		t.Fatalf("logs: %s", r.logs.String())
	}
}

// A call that fits the cap alone but not beside the reservations in flight
// is answered 429 (retry when one ends), not refused for the job's cap.
func TestCallsInFlightAreATransientRefusal(t *testing.T) {
	release := make(chan struct{})
	r := newRig(t, Config{}, dispatch.GatewayJob{MaxMicros: 40_000},
		fakeprovider.Step{Text: "a", Usage: fakeprovider.Usage{Input: 50, Output: 10}, Before: func() { <-release }},
		fakeprovider.Answer("b", fakeprovider.Usage{Input: 50, Output: 10}))
	body := userBody("claude-test", `,"max_tokens":1000`)
	first := make(chan int)
	go func() { resp, _ := r.post(t, "/anthropic/v1/messages", body); first <- resp.StatusCode }()
	for r.sess.inFlight() == 0 {
		time.Sleep(time.Millisecond)
	}
	resp, msg := r.post(t, "/anthropic/v1/messages", body)
	close(release)
	if code := <-first; code != 200 || resp.StatusCode != 429 || resp.Header.Get("retry-after") != "1" {
		t.Fatalf("first %d; second %d %s", code, resp.StatusCode, msg)
	}
	if resp, msg := r.post(t, "/anthropic/v1/messages", body); resp.StatusCode != 200 || r.sess.Spend().CapHit != "" {
		t.Fatalf("after the first settled: %d %s, spend %+v", resp.StatusCode, msg, r.sess.Spend())
	}
}

// A call the provider never received (it could not be dialled) costs
// nothing and releases its reservation.
func TestUndialledCallReleasesItsReservation(t *testing.T) {
	gw, err := New(Config{Upstreams: map[string]string{"anthropic": "http://127.0.0.1:1"}})
	if err != nil {
		t.Fatal(err)
	}
	sess := gw.Session(context.Background(), dispatch.GatewayJob{Keys: map[string]string{"anthropic": "k"}, MaxMicros: 1_000_000})
	defer sess.Close()
	rec := httptest.NewRecorder()
	sess.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/anthropic/v1/messages", strings.NewReader(userBody("claude-sonnet-4-5", `,"max_tokens":100`))))
	if sp := sess.Spend(); rec.Code != http.StatusBadGateway || sp.Micros != 0 || sp.Basis != jobs.BasisMetered || sess.inFlight() != 0 {
		t.Fatalf("%d; spend %+v", rec.Code, sp)
	}
}

// A job without caps still records a call cut by Close at the call's worst
// case: nothing is enforced, but the record never states less than the bill.
func TestUncappedCloseMidStreamChargesTheWorstCase(t *testing.T) {
	r := newRig(t, Config{}, dispatch.GatewayJob{},
		fakeprovider.Step{Text: "end", Big: 1 << 20, ChunkDelay: 20 * time.Millisecond, Usage: fakeprovider.Usage{Input: 1000, Output: 20000}})
	resp, err := http.Post(r.srv.URL+"/anthropic/v1/messages", "application/json", strings.NewReader(hangBody))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = bufio.NewReader(resp.Body).Peek(512)
	if sp := r.sess.Spend(); sp.Micros == 0 {
		t.Errorf("a call in flight counts at nothing: %+v", sp)
	}
	r.sess.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if sp := r.holds(t, "anthropic", "claude-test"); sp.Basis != jobs.BasisEstimated {
		t.Errorf("a worst case charged is an estimate: %+v", sp)
	}
}
