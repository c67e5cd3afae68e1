package gateway

import (
	"bytes"
	"encoding/json"
	"io"
)

// Bounds of what the meter keeps of a response: an SSE line longer than
// maxLine is skipped (no provider puts usage in such a line), and of a JSON
// body only the last maxTail bytes are kept once it is longer.
const (
	maxLine = 1 << 20
	maxTail = 1 << 20
)

var (
	usageKey  = []byte(`"usage"`)
	usageKeyC = []byte(`"usage":`)
	dataField = []byte("data:")
)

// wireUsage is every usage field the providers' APIs use: Anthropic
// Messages, OpenAI chat completions and OpenAI Responses.
type wireUsage struct {
	InputTokens      int64         `json:"input_tokens"`
	OutputTokens     int64         `json:"output_tokens"`
	CacheRead        int64         `json:"cache_read_input_tokens"`
	CacheWrite       int64         `json:"cache_creation_input_tokens"`
	PromptTokens     int64         `json:"prompt_tokens"`
	CompletionTokens int64         `json:"completion_tokens"`
	PromptDetails    *cachedDetail `json:"prompt_tokens_details"`
	InputDetails     *cachedDetail `json:"input_tokens_details"`
}

type cachedDetail struct {
	CachedTokens int64 `json:"cached_tokens"`
}

// norm is the usage in the gateway's terms. OpenAI counts cached tokens
// inside the prompt (or input) tokens; Anthropic counts them apart.
func (w wireUsage) norm() Usage {
	if w.PromptTokens != 0 || w.CompletionTokens != 0 || w.PromptDetails != nil {
		cached := int64(0)
		if w.PromptDetails != nil {
			cached = w.PromptDetails.CachedTokens
		}
		return Usage{Input: max(w.PromptTokens-cached, 0), Output: w.CompletionTokens, CacheRead: cached}
	}
	u := Usage{Input: w.InputTokens, Output: w.OutputTokens, CacheRead: w.CacheRead, CacheWrite: w.CacheWrite}
	if w.InputDetails != nil {
		c := w.InputDetails.CachedTokens
		u.Input, u.CacheRead = max(u.Input-c, 0), u.CacheRead+c
	}
	return u
}

// wireEvent is a JSON body or one SSE event's data: usage at the top
// (Anthropic message, message_delta; OpenAI), under message (Anthropic
// message_start) or under response (OpenAI Responses' response.completed).
type wireEvent struct {
	Model    string     `json:"model"`
	Usage    *wireUsage `json:"usage"`
	Message  *wireInner `json:"message"`
	Response *wireInner `json:"response"`
}

type wireInner struct {
	Model string     `json:"model"`
	Usage *wireUsage `json:"usage"`
}

// meter reads a response's usage as it streams through, keeping at most a
// line (SSE) or a bounded tail (JSON) of it.
type meter struct {
	sse   bool
	line  []byte // SSE: the line read so far
	skip  bool   // SSE: the current line is over maxLine
	tail  []byte // JSON: the body, or its last bytes
	cut   bool   // JSON: tail lost the body's start
	bytes int64
	usage Usage
	saw   bool
	// final is true once the answer's closing usage was read: a JSON
	// body's, a stream's message_delta, last chunk or response.completed.
	final bool
	model string
}

// write feeds the next bytes of the body.
func (m *meter) write(p []byte) {
	m.bytes += int64(len(p))
	if !m.sse {
		m.keepTail(p)
		return
	}
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			m.partial(p)
			return
		}
		switch {
		case m.skip:
			m.skip = false
		case len(m.line) > 0:
			m.line = append(m.line, p[:i]...)
			m.sseLine(m.line)
		default:
			m.sseLine(p[:i])
		}
		m.line = m.line[:0]
		p = p[i+1:]
	}
}

func (m *meter) partial(p []byte) {
	if m.skip {
		return
	}
	if len(m.line)+len(p) > maxLine {
		m.skip, m.line = true, m.line[:0]
		return
	}
	m.line = append(m.line, p...)
}

// sseLine reads a data line that mentions usage; every other line costs a
// prefix check and one scan.
func (m *meter) sseLine(l []byte) {
	if !bytes.HasPrefix(l, dataField) || !bytes.Contains(l, usageKey) {
		return
	}
	var ev wireEvent
	if json.Unmarshal(bytes.TrimSpace(l[len(dataField):]), &ev) == nil {
		m.event(ev)
	}
}

func (m *meter) event(ev wireEvent) {
	if ev.Usage != nil || ev.Response != nil && ev.Response.Usage != nil {
		m.final = true
	}
	for _, in := range []*wireInner{{ev.Model, ev.Usage}, ev.Message, ev.Response} {
		if in == nil {
			continue
		}
		if m.model == "" {
			m.model = in.Model
		}
		if in.Usage != nil {
			m.add(in.Usage.norm())
		}
	}
}

// add folds one usage report into the call's: streams repeat or grow the
// counts (Anthropic's message_delta is cumulative), so each field keeps its
// largest report.
func (m *meter) add(u Usage) {
	m.saw = true
	m.usage = Usage{max(m.usage.Input, u.Input), max(m.usage.Output, u.Output),
		max(m.usage.CacheRead, u.CacheRead), max(m.usage.CacheWrite, u.CacheWrite)}
}

func (m *meter) keepTail(p []byte) {
	m.tail = append(m.tail, p...)
	if len(m.tail) > 2*maxTail {
		n := copy(m.tail, m.tail[len(m.tail)-maxTail:])
		m.tail, m.cut = m.tail[:n], true
	}
}

// finish reads a JSON body's usage: the whole body when it was kept, else
// the last "usage" object of its tail (both APIs write usage last).
func (m *meter) finish() {
	if m.sse {
		if len(m.line) > 0 && !m.skip {
			m.sseLine(m.line)
		}
		return
	}
	var ev wireEvent
	if !m.cut && json.Unmarshal(m.tail, &ev) == nil {
		m.event(ev)
		return
	}
	i := bytes.LastIndex(m.tail, usageKeyC)
	if i < 0 {
		return
	}
	var u wireUsage
	if json.NewDecoder(bytes.NewReader(m.tail[i+len(usageKeyC):])).Decode(&u) == nil {
		m.add(u.norm())
		m.final = true
	}
}

// meterBody is a response body that feeds the meter as the proxy reads it
// and settles the call when the proxy closes it.
// A body of known length is settled as its last bytes are read, before the
// proxy writes them: the container, which has them then, may ask for the
// spend at once.
type meterBody struct {
	rc     io.ReadCloser
	c      *call
	length int64 // -1: unknown
	done   bool  // the body was read to its end
}

func (b *meterBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if n > 0 {
		b.c.meter.write(p[:n])
	}
	if err == io.EOF || b.length >= 0 && b.c.meter.bytes >= b.length {
		b.done = true
		b.c.finish(true)
	}
	return n, err
}

// Close reads what is left of an answer the container hung up on, to meter
// it: the call's context ends that when the session closes or DrainTimeout
// passes.
func (b *meterBody) Close() error {
	if !b.done && !b.c.meter.final {
		buf := buffers.Get().(*[]byte)
		for {
			n, err := b.rc.Read(*buf)
			b.c.meter.write((*buf)[:n])
			if err != nil || b.c.meter.final && b.c.meter.sse {
				break
			}
		}
		buffers.Put(buf)
	}
	err := b.rc.Close()
	b.c.finish(true)
	return err
}
