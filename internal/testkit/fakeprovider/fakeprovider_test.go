package fakeprovider

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

func post(t *testing.T, ctx context.Context, url string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, "POST", url+"/v1/messages", strings.NewReader(`{"model":"m","stream":true}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err.Error()
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

// The script is played in order, the last step repeats, and only streamed
// answers count as reported usage.
func TestScript(t *testing.T) {
	u := Usage{Input: 10, Output: 2, CacheRead: 3, CacheWrite: 4}
	s, err := Listen(WriteFile("/workspace/a", "x", u), Step{Status: 429}, Step{Status: 500})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	resp, body := post(t, ctx, s.URL())
	if resp.StatusCode != 200 || !strings.Contains(body, `"name":"write"`) || !strings.Contains(body, `"stop_reason":"tool_use"`) ||
		!strings.Contains(body, `"cache_read_input_tokens":3`) {
		t.Fatalf("tool step: %d %s", resp.StatusCode, body)
	}
	resp, _ = post(t, ctx, s.URL())
	if resp.StatusCode != 429 || resp.Header.Get("retry-after") == "" || resp.Header.Get("anthropic-ratelimit-requests-reset") == "" {
		t.Fatalf("429 step: %d %v", resp.StatusCode, resp.Header)
	}
	for range 2 {
		if resp, _ = post(t, ctx, s.URL()); resp.StatusCode != 500 {
			t.Fatalf("500 step repeated: %d", resp.StatusCode)
		}
	}
	got, answers := s.Reported()
	if got != u || answers != 1 || got.Total() != 19 || len(s.Requests()) != 4 {
		t.Fatalf("reported %+v in %d answers, %d requests", got, answers, len(s.Requests()))
	}
}

// A hang holds the request until the client gives up, and Close ends it.
func TestHang(t *testing.T) {
	s, err := Listen(Step{Hang: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	if resp, _ := post(t, ctx, s.URL()); resp != nil {
		t.Fatalf("a hung step answered %d", resp.StatusCode)
	}
	if time.Since(start) < 250*time.Millisecond {
		t.Fatal("the hang did not hold the request")
	}
	done := make(chan struct{})
	go func() { post(t, context.Background(), s.URL()); close(done) }()
	time.Sleep(100 * time.Millisecond)
	s.Close()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close left a hung request open")
	}
}

func postBody(t *testing.T, url, path, body string, hdr map[string]string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", url+path, strings.NewReader(body))
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

// Without "stream" an Anthropic request gets one JSON message with its
// usage, and the server records the request's headers and body.
func TestAnthropicMessage(t *testing.T) {
	s, err := Listen(Answer("hi", Usage{Input: 5, Output: 2, CacheRead: 1, CacheWrite: 3}), Step{Text: "bare", NoUsage: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	resp, body := postBody(t, s.URL(), "/v1/messages", `{"model":"m"}`, map[string]string{"x-api-key": "k1", "anthropic-version": "2023-06-01"})
	want := `"usage":{"cache_creation_input_tokens":3,"cache_read_input_tokens":1,"input_tokens":5,"output_tokens":2}`
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json" || !strings.Contains(body, want) || !strings.Contains(body, `"text":"hi"`) {
		t.Fatalf("message: %d %s", resp.StatusCode, body)
	}
	_, body = postBody(t, s.URL(), "/v1/messages", `{"model":"m"}`, nil)
	if strings.Contains(body, "usage") || !strings.Contains(body, "bare") {
		t.Fatalf("NoUsage message: %s", body)
	}
	r := s.Requests()[0]
	if r.APIKey != "k1" || r.Header.Get("anthropic-version") != "2023-06-01" || string(r.Body) != `{"model":"m"}` || r.API != "anthropic" || r.Stream {
		t.Fatalf("recorded %+v", r)
	}
	if u, n := s.Reported(); n != 1 || u.Total() != 11 {
		t.Fatalf("reported %+v in %d answers (a NoUsage answer reports nothing)", u, n)
	}
}

// Chat completions: JSON with usage; a stream reports usage in a final
// chunk only when include_usage is asked for, and ends with [DONE].
func TestChatCompletions(t *testing.T) {
	u := Usage{Input: 10, Output: 4, CacheRead: 6}
	s, err := Listen(Answer("hi", u))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	_, body := postBody(t, s.URL(), "/v1/chat/completions", `{"model":"gpt"}`, map[string]string{"Authorization": "Bearer k2"})
	if !strings.Contains(body, `"prompt_tokens":16`) || !strings.Contains(body, `"cached_tokens":6`) || !strings.Contains(body, `"content":"hi"`) {
		t.Fatalf("chat: %s", body)
	}
	resp, body := postBody(t, s.URL(), "/chat/completions", `{"model":"gpt","stream":true,"stream_options":{"include_usage":true}}`, nil)
	if resp.Header.Get("Content-Type") != "text/event-stream" || !strings.Contains(body, `"completion_tokens":4`) || !strings.HasSuffix(body, "data: [DONE]\n\n") {
		t.Fatalf("chat stream: %s", body)
	}
	if _, body = postBody(t, s.URL(), "/chat/completions", `{"model":"gpt","stream":true}`, nil); strings.Contains(body, "usage") {
		t.Fatalf("usage without include_usage: %s", body)
	}
	if r := s.Requests()[0]; r.APIKey != "Bearer k2" || r.API != "openai" {
		t.Fatalf("recorded %+v", r)
	}
}

// A 529 step with a Reset sets retry-after and the reset headers to it; a
// Big step streams that many bytes of text.
func TestResetAndBig(t *testing.T) {
	s, err := Listen(Step{Status: 529, Reset: 90 * time.Second}, Step{Big: 100 << 10, Text: "end"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	resp, body := postBody(t, s.URL(), "/v1/messages", `{"model":"m","stream":true}`, nil)
	reset, _ := time.Parse(time.RFC3339, resp.Header.Get("anthropic-ratelimit-requests-reset"))
	if resp.StatusCode != 529 || resp.Header.Get("retry-after") != "90" || time.Until(reset) < 80*time.Second ||
		resp.Header.Get("x-ratelimit-reset-requests") != "1m30s" || !strings.Contains(body, "overloaded_error") {
		t.Fatalf("529: %d %v %s", resp.StatusCode, resp.Header, body)
	}
	_, body = postBody(t, s.URL(), "/v1/messages", `{"model":"m","stream":true}`, nil)
	if n := strings.Count(body, "x"); n < 100<<10 || n > 100<<10+100 || !strings.Contains(body, `"text":"end"`) {
		t.Fatalf("big stream carried %d x", n)
	}
}

// A Respond step computes each answer from the request it is given: after
// the step's Before, in the script step's place, billed and reported as the
// step it returned, whose own hooks are not run.
func TestRespond(t *testing.T) {
	var order []string
	u := Usage{Input: 7, Output: 3}
	s, err := Listen(Step{
		Before: func() { order = append(order, "before") },
		Respond: func(body []byte) Step {
			order = append(order, "respond")
			var req struct {
				Messages []struct {
					Content string `json:"content"`
				} `json:"messages"`
			}
			if err := json.Unmarshal(body, &req); err != nil || len(req.Messages) == 0 {
				return Step{Status: 500}
			}
			ask := req.Messages[len(req.Messages)-1].Content
			if file, ok := strings.CutPrefix(ask, "write "); ok {
				st := WriteFile("/workspace/"+file, "asked for "+file, u)
				st.Before = func() { order = append(order, "returned before") }
				st.Respond = func([]byte) Step { order = append(order, "returned respond"); return Step{Status: 500} }
				return st
			}
			return Answer("you said: "+ask, u)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	_, body := postBody(t, s.URL(), "/v1/messages", `{"model":"m","messages":[{"role":"user","content":"write notes-42.txt"}]}`, nil)
	if !strings.Contains(body, `"name":"write"`) || !strings.Contains(body, `"path":"/workspace/notes-42.txt"`) ||
		!strings.Contains(body, `"content":"asked for notes-42.txt"`) || !strings.Contains(body, `"stop_reason":"tool_use"`) {
		t.Fatalf("computed tool step: %s", body)
	}
	_, body = postBody(t, s.URL(), "/v1/messages", `{"model":"m","stream":true,"messages":[{"role":"user","content":"hello 7"}]}`, nil)
	if !strings.Contains(body, `"text":"you said: hello 7"`) || !strings.Contains(body, "event: message_stop") {
		t.Fatalf("computed streamed answer: %s", body)
	}
	resp, _ := postBody(t, s.URL(), "/v1/messages", `not json`, nil)
	if resp.StatusCode != 500 {
		t.Fatalf("computed error step answered %d", resp.StatusCode)
	}
	if strings.Join(order, ",") != "before,respond,before,respond,before,respond" {
		t.Fatalf("hooks ran %v", order)
	}
	reqs := s.Requests()
	if len(reqs) != 3 || reqs[0].Step != 0 || reqs[2].Step != 0 || reqs[0].Billed != u || reqs[2].Billed != (Usage{}) {
		t.Fatalf("requests %+v", reqs)
	}
	if got, n := s.Reported(); n != 2 || got != u.Add(u) {
		t.Fatalf("reported %+v in %d answers, want two answers of %+v (the error reports nothing)", got, n, u)
	}
	if s.Billed() != u.Add(u) {
		t.Fatalf("billed %+v", s.Billed())
	}
}
