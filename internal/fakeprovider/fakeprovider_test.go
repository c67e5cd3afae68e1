package fakeprovider

import (
	"context"
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
