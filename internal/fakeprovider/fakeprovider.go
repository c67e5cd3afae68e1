// Package fakeprovider is a scripted model provider for tests and the demo:
// an HTTP server speaking enough of the Anthropic Messages API (POST
// /v1/messages with "stream": true, answered as server-sent events) for the
// pi coding agent to run against it. Each request is answered by the next
// step of a script: a tool call, a final text answer, an HTTP error (429
// with a reset header, 500) or a hang. Every streamed answer carries usage
// figures, so a test can check the telemetry a job reports against what the
// provider said.
package fakeprovider

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// Usage is what one response reports, in the Anthropic API's terms.
type Usage struct {
	Input, Output, CacheRead, CacheWrite int64
}

// Total is every token of the usage, as pi sums it.
func (u Usage) Total() int64 { return u.Input + u.Output + u.CacheRead + u.CacheWrite }

// Add sums two usages.
func (u Usage) Add(v Usage) Usage {
	return Usage{u.Input + v.Input, u.Output + v.Output, u.CacheRead + v.CacheRead, u.CacheWrite + v.CacheWrite}
}

// Step is one scripted answer. Exactly one of Status (an error status),
// Hang, Tool and Text is meant to be set; a Tool step may carry Text too
// (said before the call).
type Step struct {
	// Status, when not 0 or 200, answers with this HTTP status and an
	// Anthropic error body; 429 adds retry-after and the rate-limit reset
	// headers.
	Status int
	// Hang holds the request open until the client goes away or the
	// server closes.
	Hang bool
	// Tool is a tool call the assistant makes (stop reason tool_use).
	Tool *ToolCall
	// Text is assistant text (a final answer when Tool is nil).
	Text string
	// Usage is reported in message_start and message_delta.
	Usage Usage
	// Before, when set, runs before the step answers (in the request's
	// goroutine): a test looks at the running job while its agent waits.
	Before func()
}

// ToolCall names a tool and its input.
type ToolCall struct {
	Name  string
	Input map[string]any
}

// WriteFile is the step of an assistant calling pi's write tool.
func WriteFile(path, content string, u Usage) Step {
	return Step{Tool: &ToolCall{Name: "write", Input: map[string]any{"path": path, "content": content}}, Usage: u}
}

// Answer is a final text answer.
func Answer(text string, u Usage) Step { return Step{Text: text, Usage: u} }

// Request is what the server saw of one request.
type Request struct {
	At     time.Time
	Path   string
	Model  string
	APIKey string // x-api-key, or the bearer token
	Step   int    // the index of the step that answered it
}

// Server is a running fake provider.
type Server struct {
	mu       sync.Mutex
	steps    []Step
	requests []Request
	hangs    chan struct{}
	srv      *http.Server
	ln       net.Listener
	done     chan struct{}
}

// Start serves the script on ln until Close. When the script runs out, the
// last step answers every further request.
func Start(ln net.Listener, steps ...Step) *Server {
	s := &Server{steps: steps, hangs: make(chan struct{}), ln: ln, done: make(chan struct{})}
	s.srv = &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		defer close(s.done)
		_ = s.srv.Serve(ln)
	}()
	return s
}

// Listen starts the server on a free loopback TCP port.
func Listen(steps ...Step) (*Server, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	return Start(ln, steps...), nil
}

// URL is the server's base URL (TCP listeners only).
func (s *Server) URL() string { return "http://" + s.ln.Addr().String() }

// Close ends hung requests and stops the server.
func (s *Server) Close() error {
	s.mu.Lock()
	select {
	case <-s.hangs:
	default:
		close(s.hangs)
	}
	s.mu.Unlock()
	err := s.srv.Close()
	<-s.done
	return err
}

// Requests returns the requests seen so far.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

// Reported sums the usage of the streamed answers served so far.
func (s *Server) Reported() (u Usage, answers int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range s.requests {
		st := s.steps[r.Step]
		if isStream(st) {
			u = u.Add(st.Usage)
			answers++
		}
	}
	return u, answers
}

func isStream(st Step) bool { return !st.Hang && (st.Status == 0 || st.Status == http.StatusOK) }

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Model string `json:"model"`
	}
	_ = json.NewDecoder(io.LimitReader(r.Body, 16<<20)).Decode(&body)
	key := r.Header.Get("x-api-key")
	if key == "" {
		key = r.Header.Get("Authorization")
	}
	s.mu.Lock()
	if len(s.steps) == 0 {
		s.mu.Unlock()
		http.Error(w, "no script", http.StatusInternalServerError)
		return
	}
	i := min(len(s.requests), len(s.steps)-1)
	s.requests = append(s.requests, Request{At: time.Now(), Path: r.URL.Path, Model: body.Model, APIKey: key, Step: i})
	st := s.steps[i]
	s.mu.Unlock()
	if st.Before != nil {
		st.Before()
	}

	switch {
	case st.Hang:
		select {
		case <-r.Context().Done():
		case <-s.hangs:
		}
	case !isStream(st):
		writeError(w, st.Status)
	default:
		stream(w, body.Model, i, st)
	}
}

func writeError(w http.ResponseWriter, status int) {
	kind := "api_error"
	if status == http.StatusTooManyRequests {
		kind = "rate_limit_error"
		reset := time.Now().Add(time.Second).UTC().Format(time.RFC3339)
		w.Header().Set("retry-after", "1")
		w.Header().Set("anthropic-ratelimit-requests-reset", reset)
		w.Header().Set("anthropic-ratelimit-tokens-reset", reset)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	fmt.Fprintf(w, `{"type":"error","error":{"type":%q,"message":"fake provider: scripted %d"}}`, kind, status)
}

// stream writes one assistant message as the Messages API's event stream.
func stream(w http.ResponseWriter, model string, n int, st Step) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	send := func(event string, data any) {
		b, _ := json.Marshal(data)
		fmt.Fprintf(w, "event: %s\ndata: %s\n\n", event, b)
		if flusher != nil {
			flusher.Flush()
		}
	}
	u := st.Usage
	send("message_start", map[string]any{"type": "message_start", "message": map[string]any{
		"id": "msg_fake_" + strconv.Itoa(n), "type": "message", "role": "assistant", "content": []any{},
		"model": model, "stop_reason": nil, "stop_sequence": nil,
		"usage": map[string]any{"input_tokens": u.Input, "output_tokens": 0,
			"cache_read_input_tokens": u.CacheRead, "cache_creation_input_tokens": u.CacheWrite},
	}})
	index := 0
	if st.Text != "" {
		send("content_block_start", map[string]any{"type": "content_block_start", "index": index, "content_block": map[string]any{"type": "text", "text": ""}})
		send("content_block_delta", map[string]any{"type": "content_block_delta", "index": index, "delta": map[string]any{"type": "text_delta", "text": st.Text}})
		send("content_block_stop", map[string]any{"type": "content_block_stop", "index": index})
		index++
	}
	stop := "end_turn"
	if st.Tool != nil {
		stop = "tool_use"
		input, _ := json.Marshal(st.Tool.Input)
		send("content_block_start", map[string]any{"type": "content_block_start", "index": index, "content_block": map[string]any{
			"type": "tool_use", "id": "toolu_fake_" + strconv.Itoa(n), "name": st.Tool.Name, "input": map[string]any{}}})
		send("content_block_delta", map[string]any{"type": "content_block_delta", "index": index, "delta": map[string]any{"type": "input_json_delta", "partial_json": string(input)}})
		send("content_block_stop", map[string]any{"type": "content_block_stop", "index": index})
	}
	send("message_delta", map[string]any{"type": "message_delta", "delta": map[string]any{"stop_reason": stop, "stop_sequence": nil},
		"usage": map[string]any{"input_tokens": u.Input, "output_tokens": u.Output,
			"cache_read_input_tokens": u.CacheRead, "cache_creation_input_tokens": u.CacheWrite}})
	send("message_stop", map[string]any{"type": "message_stop"})
}
