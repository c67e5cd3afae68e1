package gateway

import (
	"strings"
	"testing"
)

// The meter reads every API's usage, whether a body arrives whole or a
// byte at a time.
func TestMeterShapes(t *testing.T) {
	for _, tc := range []struct {
		name  string
		sse   bool
		body  string
		want  Usage
		model string
	}{
		{"anthropic stream", true, "event: message_start\r\ndata: {\"type\":\"message_start\",\"message\":{\"model\":\"claude-x\",\"usage\":{\"input_tokens\":10,\"cache_read_input_tokens\":5,\"cache_creation_input_tokens\":2,\"output_tokens\":1}}}\r\n\r\n" +
			"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"delta\":{\"text\":\"the usage word\"}}\n\n" +
			"event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":40}}\n\n", Usage{10, 40, 5, 2}, "claude-x"},
		{"openai chat stream", true, "data: {\"model\":\"gpt\",\"choices\":[],\"usage\":null}\n\ndata: {\"choices\":[],\"usage\":{\"prompt_tokens\":100,\"completion_tokens\":7,\"prompt_tokens_details\":{\"cached_tokens\":60}}}\n\ndata: [DONE]\n\n", Usage{40, 7, 60, 0}, "gpt"},
		{"openai responses stream", true, "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"model\":\"gpt-5\",\"usage\":null}}\n\nevent: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"model\":\"gpt-5\",\"usage\":{\"input_tokens\":50,\"input_tokens_details\":{\"cached_tokens\":20},\"output_tokens\":9}}}\n\n", Usage{30, 9, 20, 0}, "gpt-5"},
		{"anthropic json", false, `{"id":"m","model":"claude-x","content":[{"type":"tool_use","input":{"usage":{"input_tokens":999}}}],"usage":{"input_tokens":3,"output_tokens":4}}`, Usage{3, 4, 0, 0}, "claude-x"},
		{"openai json", false, `{"model":"gpt","choices":[],"usage":{"prompt_tokens":8,"completion_tokens":2}}`, Usage{8, 2, 0, 0}, "gpt"},
		{"no usage", false, `{"model":"gpt","choices":[]}`, Usage{}, "gpt"},
	} {
		for _, step := range []int{len(tc.body), 1, 7} {
			m := &meter{sse: tc.sse}
			for b := []byte(tc.body); len(b) > 0; {
				n := min(step, len(b))
				m.write(b[:n])
				b = b[n:]
			}
			m.finish()
			if m.usage != tc.want || m.model != tc.model || m.saw != (tc.want != Usage{}) || m.bytes != int64(len(tc.body)) {
				t.Errorf("%s in pieces of %d: usage %+v model %q saw %v", tc.name, step, m.usage, m.model, m.saw)
			}
		}
	}
}

// A JSON body longer than the meter keeps is read from its tail; an SSE
// line longer than a line's bound is skipped, and the next line read.
func TestMeterBounds(t *testing.T) {
	m := &meter{}
	m.write([]byte(`{"content":"` + strings.Repeat("x", 3*maxTail) + `"`))
	m.write([]byte(`,"usage":{"input_tokens":3,"output_tokens":4}}`))
	m.finish()
	if !m.cut || m.usage != (Usage{3, 4, 0, 0}) || len(m.tail) > 2*maxTail {
		t.Fatalf("long JSON: cut %v usage %+v kept %d", m.cut, m.usage, len(m.tail))
	}
	m = &meter{sse: true}
	m.write([]byte("data: {\"usage\":{\"input_tokens\":1},\"pad\":\"" + strings.Repeat("x", maxLine)))
	m.write([]byte("\"}\n\ndata: {\"usage\":{\"output_tokens\":2}}\n\n"))
	if m.usage != (Usage{0, 2, 0, 0}) || cap(m.line) > 2*maxLine {
		t.Fatalf("long line: usage %+v", m.usage)
	}
}

// Metering a stream costs no allocation per event that carries no usage.
func TestMeterAllocs(t *testing.T) {
	m := &meter{sse: true}
	ev := []byte("event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"delta\":{\"type\":\"text_delta\",\"text\":\"" + strings.Repeat("x", 100) + "\"}}\n\n")
	half := len(ev) / 2
	m.write(ev) // grow the line buffer once
	if n := testing.AllocsPerRun(100, func() { m.write(ev[:half]); m.write(ev[half:]) }); n != 0 {
		t.Fatalf("%v allocations per event", n)
	}
}
