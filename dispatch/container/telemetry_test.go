package container

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

func TestParseExitLine(t *testing.T) {
	const exit = `{"event":"exit","turns":3,"tokens":1234,"cost":0.05}`
	tests := []struct {
		name   string
		in     string
		ok     bool
		turns  int64
		tokens int64
		cost   float64
		raw    string // expected Raw when set
	}{
		{name: "plain last line", in: "hello\n" + exit + "\n", ok: true, turns: 3, tokens: 1234, cost: 0.05, raw: exit},
		{name: "no newline at end", in: "hello\n" + exit, ok: true, turns: 3, tokens: 1234, cost: 0.05},
		{name: "glued to text", in: "hello\ntext without newline" + exit + "\n", ok: true, turns: 3, tokens: 1234, cost: 0.05},
		{name: "glued to previous object", in: `{"event":"progress","n":1}` + exit, ok: true, turns: 3, tokens: 1234, cost: 0.05},
		{name: "text after exit line", in: exit + "\ntrailing log line\n", ok: true, turns: 3, tokens: 1234, cost: 0.05},
		{name: "glued text after exit object", in: exit + "more", ok: true, turns: 3, tokens: 1234, cost: 0.05},
		{name: "last of two exit lines wins", in: `{"event":"exit","turns":1}` + "\n" + `{"event":"exit","turns":2}` + "\n", ok: true, turns: 2},
		{name: "later non-exit object does not hide it", in: exit + "\n" + `{"event":"log"}` + "\n", ok: true, turns: 3, tokens: 1234, cost: 0.05},
		{name: "no exit line", in: "hello\n{\"event\":\"log\"}\n", ok: false},
		{name: "empty", in: "", ok: false},
		{name: "only braces", in: strings.Repeat("{", 5000), ok: false},
		{name: "only closing braces", in: strings.Repeat("}", 5000), ok: false},
		{name: "truncated exit line", in: `{"event":"exit","turns":1}` + "\n" + `{"event":"exit","turns":2`, ok: true, turns: 1},
		{name: "invalid json", in: `{"event":"exit",turns:3}`, ok: false},
		{name: "event not a string", in: `{"event":1}`, ok: false},
		{name: "case differs", in: `{"EVENT":"exit"}`, ok: false},
		{name: "braces inside strings", in: `{"event":"exit","msg":"a { b } {\"event\":\"exit\",\"turns\":9}","turns":4}`, ok: true, turns: 4},
		{name: "nested exit object in payload is data", in: `{"event":"tool","out":{"event":"exit","turns":9}}`, ok: false},
		{name: "nested exit in exit takes outer", in: `{"event":"exit","turns":5,"child":{"event":"exit","turns":9}}`, ok: true, turns: 5},
		{name: "tokens object", in: `{"event":"exit","turns":2,"tokens":{"input":10,"output":5,"total":15,"cost":0.25}}`, ok: true, turns: 2, tokens: 15, cost: 0.25},
		{name: "top-level cost wins", in: `{"event":"exit","cost":1.5,"tokens":{"total":7,"cost":0.25}}`, ok: true, tokens: 7, cost: 1.5},
		{name: "non-numeric fields", in: `{"event":"exit","turns":"three","tokens":null,"cost":true}`, ok: true},
		{name: "fractional and huge numbers", in: `{"event":"exit","turns":2.5,"tokens":1e300,"cost":1e400}`, ok: true},
		{name: "negative kept as printed", in: `{"event":"exit","turns":-1,"cost":-0.5}`, ok: true, turns: -1, cost: -0.5},
		{name: "NUL around", in: "\x00\x00" + exit + "\x00", ok: true, turns: 3, tokens: 1234, cost: 0.05},
		{name: "raw control char in string is invalid", in: "{\"event\":\"exit\",\"m\":\"a\x00b\"}", ok: false},
		{name: "compacted raw", in: `{ "event" : "exit" , "turns" : 1 }`, ok: true, turns: 1, raw: `{"event":"exit","turns":1}`},
		{name: "duplicate event key last wins", in: `{"event":"exit","event":"log"}`, ok: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := ParseExitLine([]byte(tt.in))
			if ok != tt.ok {
				t.Fatalf("ok = %v, want %v (got %+v)", ok, tt.ok, got)
			}
			if !ok {
				if got.Raw != nil {
					t.Fatalf("not found but Raw = %s", got.Raw)
				}
				return
			}
			if got.Turns != tt.turns || got.Tokens != tt.tokens || got.Cost != tt.cost {
				t.Fatalf("got turns=%d tokens=%d cost=%v, want %d %d %v", got.Turns, got.Tokens, got.Cost, tt.turns, tt.tokens, tt.cost)
			}
			if tt.raw != "" && string(got.Raw) != tt.raw {
				t.Fatalf("Raw = %s, want %s", got.Raw, tt.raw)
			}
			if !json.Valid(got.Raw) {
				t.Fatalf("Raw is not valid JSON: %q", got.Raw)
			}
		})
	}
}

// TestParseExitLineWindow pins the 8 KiB window: an exit line wholly inside
// it is found, one that straddles its start is not.
func TestParseExitLineWindow(t *testing.T) {
	line := `{"event":"exit","turns":7}`
	inside := strings.Repeat("x", 20000) + "\n" + line + strings.Repeat(" ", TelemetryScanBytes-len(line)-1)
	if got, ok := ParseExitLine([]byte(inside)); !ok || got.Turns != 7 {
		t.Fatalf("exit line at the window's start: ok=%v %+v", ok, got)
	}
	straddling := strings.Repeat("x", 20000) + "\n" + line + strings.Repeat(" ", TelemetryScanBytes-len(line)+1)
	if _, ok := ParseExitLine([]byte(straddling)); ok {
		t.Fatal("exit line cut by the window's start was found")
	}
	// A longer exit line than the window never fits.
	huge := `{"event":"exit","pad":"` + strings.Repeat("p", TelemetryScanBytes) + `"}`
	if _, ok := ParseExitLine([]byte(huge)); ok {
		t.Fatal("exit line larger than the window was found")
	}
	// An earlier exit line beyond the window is not used either.
	old := line + "\n" + strings.Repeat("y", TelemetryScanBytes)
	if _, ok := ParseExitLine([]byte(old)); ok {
		t.Fatal("exit line outside the window was found")
	}
}

func TestParseExitLineInvalidUTF8(t *testing.T) {
	in := []byte("{\"event\":\"exit\",\"note\":\"bad \xff\xfe bytes\",\"turns\":1}")
	got, ok := ParseExitLine(in)
	if !ok || got.Turns != 1 {
		t.Fatalf("ok=%v %+v", ok, got)
	}
	if !utf8.Valid(got.Raw) || !json.Valid(got.Raw) {
		t.Fatalf("Raw not valid UTF-8 JSON: %q", got.Raw)
	}
	if _, err := json.Marshal(struct{ T json.RawMessage }{got.Raw}); err != nil {
		t.Fatalf("Raw does not re-marshal: %v", err)
	}
}

// TestParseExitLineHostileCost bounds the parser's work on the worst inputs
// the window can hold: deep nesting (every '{' starts a long valid object) and
// thousands of near-miss candidates.
// hostileTails are stdout tails shaped to make an exit-line search slow:
// deep nesting, objects never closed, and near misses.
func hostileTails() map[string]string {
	depth := TelemetryScanBytes / 5
	nested := strings.Repeat(`{"a":`, depth) + "1" + strings.Repeat("}", depth)
	return map[string]string{
		"nested":      nested[len(nested)-TelemetryScanBytes:],
		"unclosed":    strings.Repeat(`{"a":`, depth),
		"near misses": strings.Repeat(`{"event":"exi"}`, TelemetryScanBytes/15),
	}
}

// A hostile tail yields no exit line, and its search ends: the scan is
// bounded to TelemetryScanBytes, so its worst case is bounded too. The
// bound here catches a hang, not a slow machine; the cost against a benign
// tail is BenchmarkParseExitLineHostile's to report.
func TestParseExitLineHostileTails(t *testing.T) {
	for name, in := range hostileTails() {
		start := time.Now()
		if _, ok := ParseExitLine([]byte(in)); ok {
			t.Fatalf("%s: found an exit line", name)
		}
		if d := time.Since(start); d > 60*time.Second {
			t.Fatalf("%s: took %v", name, d)
		}
	}
}

// BenchmarkParseExitLineHostile reports each hostile tail's search beside a
// benign tail of the same size: go test -run '^$' -bench ParseExitLine ./dispatch/container/
func BenchmarkParseExitLineHostile(b *testing.B) {
	tails := hostileTails()
	tails["benign"] = strings.Repeat(`{"event":"log","n":1} `, TelemetryScanBytes/22)
	for _, name := range []string{"benign", "near misses", "nested", "unclosed"} {
		in := []byte(tails[name])
		b.Run(strings.ReplaceAll(name, " ", "-"), func(b *testing.B) {
			for b.Loop() {
				_, _ = ParseExitLine(in)
			}
		})
	}
}

func FuzzParseExitLine(f *testing.F) {
	f.Add([]byte(`{"event":"exit","turns":3,"tokens":1234,"cost":0.05}`))
	f.Add([]byte(`text{"event":"exit"}{"event":"exit","tokens":{"total":1}}`))
	f.Add([]byte("{\"a\":{\"event\":\"exit\"}}\xff"))
	f.Fuzz(func(t *testing.T, in []byte) {
		got, ok := ParseExitLine(in)
		if ok != (got.Raw != nil) {
			t.Fatalf("ok=%v but Raw=%q", ok, got.Raw)
		}
		if ok && (!json.Valid(got.Raw) || !utf8.Valid(got.Raw) || !bytes.Contains(got.Raw, []byte(`"event"`))) {
			t.Fatalf("bad Raw %q", got.Raw)
		}
	})
}

// The agent image's exit line (agent/entrypoint) carries a token breakdown,
// the provider and model, and its own outcome; an older reader's fields
// (turns, tokens as the total, cost) read the same from it.
func TestParseExitLineAgentTelemetry(t *testing.T) {
	line := `{"event":"exit","outcome":"policy","reason":"max-turns","turns":3,` +
		`"tokens":{"input":2500,"output":52,"cacheRead":1800,"cacheWrite":100,"total":4452},"cost":0.003065,` +
		`"provider":"anthropic","model":"claude-haiku-4-5","requests":4,"retries":0,"maxTurns":3,"durationMs":9000}`
	got, ok := ParseExitLine([]byte("transcript\n" + line + "\n"))
	if !ok {
		t.Fatal("no exit line found")
	}
	want := Telemetry{
		Raw: json.RawMessage(line), Turns: 3, Tokens: 4452, Cost: 0.003065,
		Input: 2500, Output: 52, CacheRead: 1800, CacheWrite: 100,
		Provider: "anthropic", Model: "claude-haiku-4-5", Outcome: "policy", Reason: "max-turns",
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got  %+v\nwant %+v", got, want)
	}
}
