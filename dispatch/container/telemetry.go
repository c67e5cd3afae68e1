package container

import (
	"bytes"
	"encoding/json"
	"math"
)

// TelemetryScanBytes is how much of the end of stdout is searched for the exit
// line. A job that prints more than this after its exit line, or an exit line
// longer than this, reports no telemetry.
const TelemetryScanBytes = 8 << 10

// Telemetry is what a job reported in its exit line.
type Telemetry struct {
	// Raw is the exit object as the job printed it (compacted; bytes that are
	// not UTF-8 replaced by U+FFFD), for run records that keep every field.
	Raw json.RawMessage
	// Turns is the "turns" number; 0 when absent or not a number.
	Turns int64
	// Tokens is the "tokens" number, or "tokens"."total" when tokens is an
	// object; 0 when absent or not a number.
	Tokens int64
	// Cost is the "cost" number, or "tokens"."cost"; 0 when absent or not a
	// number.
	Cost float64
	// Input, Output, CacheRead and CacheWrite break Tokens down when "tokens"
	// is an object carrying them (the agent image's exit line); 0 otherwise.
	Input, Output, CacheRead, CacheWrite int64
	// Provider and Model name what answered the agent; Outcome and Reason
	// are the job's own account of how it ended (the worker decides by the
	// exit code). Empty when absent or not strings.
	Provider, Model, Outcome, Reason string
}

// ParseExitLine finds the job's exit line in the end of its stdout: the JSON
// object with "event":"exit" that ends last within the final
// TelemetryScanBytes. It finds the object wherever it starts, so lines glued
// by a missing newline (`text{"event":"exit",...}`, `{...}{"event":"exit",...}`)
// are repaired. Only objects not nested inside another object count: an exit
// object inside a log event's payload is data, not the job's exit line.
// Invalid JSON, truncated objects and objects without "event":"exit" are
// skipped; ok is false when none is found.
func ParseExitLine(stdout []byte) (t Telemetry, ok bool) {
	if len(stdout) > TelemetryScanBytes {
		stdout = stdout[len(stdout)-TelemetryScanBytes:]
	}
	// Every '{' that starts a valid object, latest first.
	type span struct{ start, end int }
	var spans []span
	for i := bytes.LastIndexByte(stdout, '{'); i >= 0; i = bytes.LastIndexByte(stdout[:i], '{') {
		dec := json.NewDecoder(bytes.NewReader(stdout[i:]))
		var skip struct{}
		if dec.Decode(&skip) != nil {
			continue
		}
		spans = append(spans, span{i, i + int(dec.InputOffset())})
	}
	// Walk them in order of start; an object ending within an earlier-starting
	// one is nested in it.
	best, maxEnd := span{-1, -1}, -1
	for k := len(spans) - 1; k >= 0; k-- {
		s := spans[k]
		nested := s.end <= maxEnd
		maxEnd = max(maxEnd, s.end)
		if nested || s.end <= best.end || !isExitObject(stdout[s.start:s.end]) {
			continue
		}
		best = s
	}
	if best.start < 0 {
		return Telemetry{}, false
	}
	return telemetryOf(stdout[best.start:best.end]), true
}

// isExitObject reports whether raw is an object whose "event" key (exactly
// that spelling) is the string "exit".
func isExitObject(raw json.RawMessage) bool {
	var fields map[string]json.RawMessage
	if json.Unmarshal(raw, &fields) != nil {
		return false
	}
	var event string
	return json.Unmarshal(fields["event"], &event) == nil && event == "exit"
}

func telemetryOf(raw json.RawMessage) Telemetry {
	var compact bytes.Buffer
	if json.Compact(&compact, raw) != nil {
		compact.Reset()
		compact.Write(raw)
	}
	t := Telemetry{Raw: json.RawMessage(bytes.ToValidUTF8(compact.Bytes(), []byte("\uFFFD")))}

	var fields map[string]json.RawMessage
	_ = json.Unmarshal(raw, &fields)
	t.Turns = intOf(fields["turns"])
	t.Cost = floatOf(fields["cost"])

	t.Provider, t.Model = stringOf(fields["provider"]), stringOf(fields["model"])
	t.Outcome, t.Reason = stringOf(fields["outcome"]), stringOf(fields["reason"])

	var tokens map[string]json.RawMessage
	if json.Unmarshal(fields["tokens"], &tokens) == nil && tokens != nil {
		t.Tokens = intOf(tokens["total"])
		t.Input, t.Output = intOf(tokens["input"]), intOf(tokens["output"])
		t.CacheRead, t.CacheWrite = intOf(tokens["cacheRead"]), intOf(tokens["cacheWrite"])
		if _, has := fields["cost"]; !has {
			t.Cost = floatOf(tokens["cost"])
		}
	} else {
		t.Tokens = intOf(fields["tokens"])
	}
	return t
}

// stringOf is a JSON string of at most 256 bytes, else "".
func stringOf(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) != nil || len(s) > 256 {
		return ""
	}
	return s
}

// floatOf is a finite JSON number, else 0.
func floatOf(raw json.RawMessage) float64 {
	var f float64
	if json.Unmarshal(raw, &f) != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0
	}
	return f
}

// intOf is a JSON number with an integral value in int64's range, else 0.
func intOf(raw json.RawMessage) int64 {
	f := floatOf(raw)
	if f != math.Trunc(f) || f < math.MinInt64 || f >= math.MaxInt64 {
		return 0
	}
	var n int64
	if json.Unmarshal(raw, &n) == nil {
		return n
	}
	return int64(f)
}
