// Package fakeprovider is a scripted model provider for tests and the demo:
// an HTTP server speaking enough of the Anthropic Messages API (POST
// /v1/messages, answered as server-sent events when the request says
// "stream": true, else as one JSON message) and of OpenAI's chat
// completions (any path ending in /chat/completions) for the pi coding
// agent, and the model gateway, to run against it. Each request is answered
// by the next step of a script: a tool call, a final text answer, an HTTP
// error (429 or 529 with reset headers, 500), a hang, or a large stream for
// benchmarks; or by the step a Respond hook computes from the request
// itself. Every answer carries usage figures unless its step says
// NoUsage, so a test can check the telemetry a job reports against what the
// provider said. A streamed chat completion reports usage in a final chunk
// only when the request asked for it (stream_options.include_usage), as
// OpenAI does.
package fakeprovider

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
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
	// error body in the API's shape; 429 and 529 add retry-after and the
	// rate-limit reset headers (anthropic-ratelimit-requests-reset and
	// -tokens-reset, x-ratelimit-reset-requests) at Reset from now.
	Status int
	// Reset is a 429 or 529 step's reset delay; 0 is one second.
	Reset time.Duration
	// Hang holds the request open until the client goes away or the
	// server closes.
	Hang bool
	// Tool is a tool call the assistant makes (stop reason tool_use).
	Tool *ToolCall
	// Text is assistant text (a final answer when Tool is nil).
	Text string
	// Usage is reported in message_start and message_delta (a stream), in
	// the message (no stream), or in the chat completion's usage.
	Usage Usage
	// NoUsage leaves every usage field out of the answer.
	NoUsage bool
	// Big, when positive, streams that many bytes of text deltas (in
	// BigChunk pieces, one event each) before the step's own text.
	Big int64
	// Before, when set, runs before the step answers (in the request's
	// goroutine): a test looks at the running job while its agent waits.
	Before func()
	// Respond, when set, computes the answer from the request: it is
	// called with the request's body (in the request's goroutine, after
	// Before, never under the server's lock) and the Step it returns
	// answers in this one's place, billed and reported as that step (its
	// own Before and Respond are not run). A script of one Respond step
	// answers every request from what it asks: a model that reads its
	// prompt and its tools' results.
	Respond func(body []byte) Step
	// FillOutput bills (and reports) as many output tokens as the request
	// allows (max_tokens, max_completion_tokens or max_output_tokens, times
	// n), or Usage.Output when the request sets no bound: a model that
	// writes until it is stopped.
	FillOutput bool
	// InputPerBlock adds this many input tokens per image or document block
	// of the request, as a provider bills a document's pages or a fetched
	// page: a small request billed large.
	InputPerBlock int64
	// Overbill adds this many output tokens past the request's bound: a
	// provider that beats the bound it was given.
	Overbill int64
	// ChunkDelay pauses between the events of a Big stream. The stream
	// goes on to its end (and is billed whole) when the client hangs up.
	ChunkDelay time.Duration
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
	Query  string // the raw query
	Model  string
	APIKey string // x-api-key, or the Authorization header
	Step   int    // the index of the step that answered it
	// API is "anthropic" or "openai" (a path ending in /chat/completions).
	API    string
	Stream bool
	Header http.Header
	Body   []byte
	// Billed is the usage the provider billed for this request (zero for an
	// error or a hang), whether or not the client read the answer.
	Billed Usage
	// answered is the step that answered: the script's, or the one its
	// Respond computed.
	answered Step
}

// BigChunk is the text of one delta event of a Big step.
const BigChunk = 16 << 10

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

// Reported sums the usage of the answers served so far that reported it,
// and counts them.
func (s *Server) Reported() (u Usage, answers int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range s.requests {
		st := r.answered
		if isAnswer(st) && !st.NoUsage {
			u = u.Add(r.Billed)
			answers++
		}
	}
	return u, answers
}

// Billed sums what the provider billed: the usage of every answer it
// began, reported or not, read by the client or not.
func (s *Server) Billed() Usage {
	s.mu.Lock()
	defer s.mu.Unlock()
	var u Usage
	for _, r := range s.requests {
		u = u.Add(r.Billed)
	}
	return u
}

// bill is what a step bills for a request: the step's usage, its output
// held to the request's bound as a provider holds it (unless Overbill),
// input added for each image or document block.
func (st Step) bill(body reqBody, raw []byte) Usage {
	if !isAnswer(st) {
		return Usage{}
	}
	u := st.Usage
	bound := int64(-1)
	for _, b := range []*int64{body.MaxTokens, body.MaxCompletionTokens, body.MaxOutputTokens} {
		if b != nil && (bound < 0 || *b < bound) {
			bound = *b
		}
	}
	if bound >= 0 && body.N > 1 {
		bound *= body.N
	}
	switch {
	case st.FillOutput && bound >= 0:
		u.Output = bound
	case bound >= 0 && u.Output > bound:
		u.Output = bound
	}
	u.Output += st.Overbill
	if st.InputPerBlock > 0 {
		var v any
		_ = json.Unmarshal(raw, &v)
		u.Input += st.InputPerBlock * countBlocks(v)
	}
	return u
}

// countBlocks counts the image and document blocks anywhere in v.
func countBlocks(v any) int64 {
	n := int64(0)
	switch v := v.(type) {
	case map[string]any:
		switch v["type"] {
		case "image", "document", "image_url", "input_image", "input_file", "file":
			n++
		}
		for _, e := range v {
			n += countBlocks(e)
		}
	case []any:
		for _, e := range v {
			n += countBlocks(e)
		}
	}
	return n
}

func isAnswer(st Step) bool { return !st.Hang && (st.Status == 0 || st.Status == http.StatusOK) }

// reqBody is what the server reads of a request.
type reqBody struct {
	Model         string `json:"model"`
	Stream        bool   `json:"stream"`
	StreamOptions struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	MaxTokens           *int64 `json:"max_tokens"`
	MaxCompletionTokens *int64 `json:"max_completion_tokens"`
	MaxOutputTokens     *int64 `json:"max_output_tokens"`
	N                   int64  `json:"n"`
}

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	raw, _ := io.ReadAll(io.LimitReader(r.Body, 64<<20))
	var body reqBody
	_ = json.Unmarshal(raw, &body)
	key := r.Header.Get("x-api-key")
	if key == "" {
		key = r.Header.Get("Authorization")
	}
	api := "anthropic"
	if strings.HasSuffix(r.URL.Path, "/chat/completions") {
		api = "openai"
	}
	s.mu.Lock()
	if len(s.steps) == 0 {
		s.mu.Unlock()
		http.Error(w, "no script", http.StatusInternalServerError)
		return
	}
	i := min(len(s.requests), len(s.steps)-1)
	st := s.steps[i]
	st.Usage = st.bill(body, raw)
	n := len(s.requests)
	s.requests = append(s.requests, Request{At: time.Now(), Path: r.URL.Path, Query: r.URL.RawQuery, Model: body.Model, APIKey: key, Step: i,
		API: api, Stream: body.Stream, Header: r.Header.Clone(), Body: raw, Billed: st.Usage, answered: st})
	s.mu.Unlock()
	if st.Before != nil {
		st.Before()
	}
	if st.Respond != nil {
		st = st.Respond(raw)
		st.Before, st.Respond = nil, nil
		st.Usage = st.bill(body, raw)
		s.mu.Lock()
		s.requests[n].Billed, s.requests[n].answered = st.Usage, st
		s.mu.Unlock()
	}

	switch {
	case st.Hang:
		select {
		case <-r.Context().Done():
		case <-s.hangs:
		}
	case !isAnswer(st):
		writeError(w, api, st)
	case api == "openai" && body.Stream:
		streamChat(w, body, i, st)
	case api == "openai":
		chat(w, body.Model, i, st)
	case body.Stream:
		stream(w, body.Model, i, st)
	default:
		message(w, body.Model, i, st)
	}
}

func writeError(w http.ResponseWriter, api string, st Step) {
	kind := "api_error"
	switch st.Status {
	case http.StatusTooManyRequests:
		kind = "rate_limit_error"
	case 529:
		kind = "overloaded_error"
	}
	if st.Status == http.StatusTooManyRequests || st.Status == 529 {
		d := st.Reset
		if d <= 0 {
			d = time.Second
		}
		reset := time.Now().Add(d).UTC().Format(time.RFC3339)
		w.Header().Set("retry-after", strconv.FormatInt(int64((d+time.Second-1)/time.Second), 10))
		w.Header().Set("anthropic-ratelimit-requests-reset", reset)
		w.Header().Set("anthropic-ratelimit-tokens-reset", reset)
		w.Header().Set("x-ratelimit-reset-requests", d.String())
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(st.Status)
	if api == "openai" {
		fmt.Fprintf(w, `{"error":{"message":"fake provider: scripted %d","type":%q,"code":null}}`, st.Status, kind)
		return
	}
	fmt.Fprintf(w, `{"type":"error","error":{"type":%q,"message":"fake provider: scripted %d"}}`, kind, st.Status)
}

// anthropicUsage is a step's usage in the Messages API's fields.
func anthropicUsage(u Usage, output int64) map[string]any {
	return map[string]any{"input_tokens": u.Input, "output_tokens": output,
		"cache_read_input_tokens": u.CacheRead, "cache_creation_input_tokens": u.CacheWrite}
}

// message writes one assistant message as a JSON body (no stream).
func message(w http.ResponseWriter, model string, n int, st Step) {
	content := []any{}
	if st.Text != "" {
		content = append(content, map[string]any{"type": "text", "text": st.Text})
	}
	stop := "end_turn"
	if st.Tool != nil {
		stop = "tool_use"
		content = append(content, map[string]any{"type": "tool_use", "id": "toolu_fake_" + strconv.Itoa(n), "name": st.Tool.Name, "input": st.Tool.Input})
	}
	m := map[string]any{"id": "msg_fake_" + strconv.Itoa(n), "type": "message", "role": "assistant", "content": content,
		"model": model, "stop_reason": stop, "stop_sequence": nil}
	if !st.NoUsage {
		m["usage"] = anthropicUsage(st.Usage, st.Usage.Output)
	}
	writeJSON(w, m)
}

func writeJSON(w http.ResponseWriter, v any) {
	b, _ := json.Marshal(v)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b)
}

// chatUsage is a step's usage in chat completions' fields: the prompt
// counts the cached tokens, and there is no cache write.
func chatUsage(u Usage) map[string]any {
	return map[string]any{"prompt_tokens": u.Input + u.CacheRead, "completion_tokens": u.Output,
		"total_tokens": u.Input + u.CacheRead + u.Output, "prompt_tokens_details": map[string]any{"cached_tokens": u.CacheRead}}
}

func toolCalls(n int, st Step) []any {
	input, _ := json.Marshal(st.Tool.Input)
	return []any{map[string]any{"index": 0, "id": "call_fake_" + strconv.Itoa(n), "type": "function",
		"function": map[string]any{"name": st.Tool.Name, "arguments": string(input)}}}
}

// chat writes one chat completion as a JSON body.
func chat(w http.ResponseWriter, model string, n int, st Step) {
	msg := map[string]any{"role": "assistant", "content": st.Text}
	finish := "stop"
	if st.Tool != nil {
		finish = "tool_calls"
		msg["tool_calls"] = toolCalls(n, st)
	}
	c := map[string]any{"id": "chatcmpl-fake-" + strconv.Itoa(n), "object": "chat.completion", "created": time.Now().Unix(), "model": model,
		"choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": finish}}}
	if !st.NoUsage {
		c["usage"] = chatUsage(st.Usage)
	}
	writeJSON(w, c)
}

// sender writes server-sent events, flushing each.
type sender struct {
	w       http.ResponseWriter
	flusher http.Flusher
}

func newSender(w http.ResponseWriter) *sender {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	f, _ := w.(http.Flusher)
	return &sender{w: w, flusher: f}
}

// raw writes one whole event.
func (s *sender) raw(b []byte) {
	_, _ = s.w.Write(b)
	if s.flusher != nil {
		s.flusher.Flush()
	}
}

// send writes an event with a name (Anthropic) or without (event "", chat).
func (s *sender) send(event string, data any) {
	b, _ := json.Marshal(data)
	if event != "" {
		s.raw(fmt.Appendf(nil, "event: %s\ndata: %s\n\n", event, b))
		return
	}
	s.raw(fmt.Appendf(nil, "data: %s\n\n", b))
}

// big streams total bytes of text in BigChunk events built once, delay
// apart.
func (s *sender) big(total int64, delay time.Duration, event func(text string) []byte) {
	chunk := event(strings.Repeat("x", BigChunk))
	for sent := int64(0); sent < total; sent += BigChunk {
		if left := total - sent; left < BigChunk {
			chunk = event(strings.Repeat("x", int(left)))
		}
		if delay > 0 && sent > 0 {
			time.Sleep(delay)
		}
		s.raw(chunk)
	}
}

// streamChat writes one chat completion as chunks, the usage in a final
// chunk of its own when the request asked for it.
func streamChat(w http.ResponseWriter, body reqBody, n int, st Step) {
	s := newSender(w)
	id, created := "chatcmpl-fake-"+strconv.Itoa(n), time.Now().Unix()
	chunk := func(delta map[string]any, finish any) map[string]any {
		return map[string]any{"id": id, "object": "chat.completion.chunk", "created": created, "model": body.Model,
			"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": finish}}}
	}
	s.send("", chunk(map[string]any{"role": "assistant", "content": ""}, nil))
	if st.Big > 0 {
		s.big(st.Big, st.ChunkDelay, func(text string) []byte {
			b, _ := json.Marshal(chunk(map[string]any{"content": text}, nil))
			return fmt.Appendf(nil, "data: %s\n\n", b)
		})
	}
	if st.Text != "" {
		s.send("", chunk(map[string]any{"content": st.Text}, nil))
	}
	finish := "stop"
	if st.Tool != nil {
		finish = "tool_calls"
		s.send("", chunk(map[string]any{"tool_calls": toolCalls(n, st)}, nil))
	}
	s.send("", chunk(map[string]any{}, finish))
	if body.StreamOptions.IncludeUsage && !st.NoUsage {
		s.send("", map[string]any{"id": id, "object": "chat.completion.chunk", "created": created, "model": body.Model,
			"choices": []any{}, "usage": chatUsage(st.Usage)})
	}
	s.raw([]byte("data: [DONE]\n\n"))
}

// stream writes one assistant message as the Messages API's event stream.
func stream(w http.ResponseWriter, model string, n int, st Step) {
	s := newSender(w)
	msg := map[string]any{
		"id": "msg_fake_" + strconv.Itoa(n), "type": "message", "role": "assistant", "content": []any{},
		"model": model, "stop_reason": nil, "stop_sequence": nil,
	}
	if !st.NoUsage {
		msg["usage"] = anthropicUsage(st.Usage, 0)
	}
	s.send("message_start", map[string]any{"type": "message_start", "message": msg})
	index := 0
	if st.Big > 0 || st.Text != "" {
		s.send("content_block_start", map[string]any{"type": "content_block_start", "index": index, "content_block": map[string]any{"type": "text", "text": ""}})
		if st.Big > 0 {
			s.big(st.Big, st.ChunkDelay, func(text string) []byte {
				b, _ := json.Marshal(map[string]any{"type": "content_block_delta", "index": index, "delta": map[string]any{"type": "text_delta", "text": text}})
				return fmt.Appendf(nil, "event: content_block_delta\ndata: %s\n\n", b)
			})
		}
		if st.Text != "" {
			s.send("content_block_delta", map[string]any{"type": "content_block_delta", "index": index, "delta": map[string]any{"type": "text_delta", "text": st.Text}})
		}
		s.send("content_block_stop", map[string]any{"type": "content_block_stop", "index": index})
		index++
	}
	stop := "end_turn"
	if st.Tool != nil {
		stop = "tool_use"
		input, _ := json.Marshal(st.Tool.Input)
		s.send("content_block_start", map[string]any{"type": "content_block_start", "index": index, "content_block": map[string]any{
			"type": "tool_use", "id": "toolu_fake_" + strconv.Itoa(n), "name": st.Tool.Name, "input": map[string]any{}}})
		s.send("content_block_delta", map[string]any{"type": "content_block_delta", "index": index, "delta": map[string]any{"type": "input_json_delta", "partial_json": string(input)}})
		s.send("content_block_stop", map[string]any{"type": "content_block_stop", "index": index})
	}
	delta := map[string]any{"type": "message_delta", "delta": map[string]any{"stop_reason": stop, "stop_sequence": nil}}
	if !st.NoUsage {
		delta["usage"] = anthropicUsage(st.Usage, st.Usage.Output)
	}
	s.send("message_delta", delta)
	s.send("message_stop", map[string]any{"type": "message_stop"})
}
