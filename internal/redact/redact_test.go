package redact_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"unicode/utf16"

	"github.com/pidispatch/pidispatch/internal/redact"
	"github.com/pidispatch/pidispatch/observe/transcript"
)

// escapeAll writes every character of s as a JSON \uXXXX escape, the way a
// hostile job hides a secret from a redactor that looks for it as printed.
func escapeAll(s string, upper bool) string {
	var b strings.Builder
	for _, u := range utf16.Encode([]rune(s)) {
		if upper {
			fmt.Fprintf(&b, `\u%04X`, u)
		} else {
			fmt.Fprintf(&b, `\u%04x`, u)
		}
	}
	return b.String()
}

// shown is what `pi-dispatch logs` prints of one transcript line.
func shown(line string) string {
	var out bytes.Buffer
	transcript.Render(&out, []transcript.Entry{{Kind: transcript.KindOut, Line: line}})
	return out.String()
}

// A job prints its secret inside a JSON event with the secret's characters
// written as \u escapes (all of them, some of them, upper-case hex, a quote
// as \u0022, a non-ASCII character as a surrogate pair): logs decodes the
// event and would print the secret, so the redactor finds it decoded.
func TestEscapedSecretIsRedacted(t *testing.T) {
	secret := "sk-ant-Zq9\"x\U0001F511y<tag>&"
	r := redact.New([]string{secret, "other-value"})
	plain := "sk-ant-Zq9"
	for name, field := range map[string]string{
		"every character":   escapeAll(secret, false),
		"upper-case hex":    escapeAll(secret, true),
		"some characters":   `\u0073k-ant-Z\u0071` + `9\"x` + `\ud83d\udd11` + `y\u003ctag\u003e\u0026`,
		"quote as \\u0022":  `sk-ant-Zq9\u0022x` + "\U0001F511" + `y<tag>&`,
		"html-escaped form": `sk-ant-Zq9\"x` + "\U0001F511" + `y\u003ctag\u003e\u0026`,
		"first letter":      `\u0073k-ant-Zq9\"x\ud83d\udd11y<tag>&`,
	} {
		line := `{"type":"message_end","message":{"role":"assistant","content":[{"type":"text","text":"key: ` + field + ` end"}]}}`
		var check any
		if err := json.Unmarshal([]byte(line), &check); err != nil {
			t.Fatalf("%s: the attack line is not JSON: %v", name, err)
		}
		if !strings.Contains(shown(line), plain) {
			t.Fatalf("%s: the attack does not show the secret unredacted: %s", name, shown(line))
		}
		got := r.Line(line)
		if out := shown(got); strings.Contains(out, plain) || strings.Contains(out, "tag>&") {
			t.Errorf("%s: logs prints the secret: %s", name, out)
		}
		if !strings.Contains(got, redact.Redacted) {
			t.Errorf("%s: nothing redacted: %s", name, got)
		}
	}
}

// A line without a hidden secret is kept byte for byte, its escapes too;
// an escaped backslash before u is not an escape.
func TestLineWithoutSecretKeptAsWritten(t *testing.T) {
	r := redact.New([]string{"sk-secret"})
	for _, line := range []string{
		`{"text":"\u0041\u00e9 \ud83d\ude00 \u003c \/ \\u0073k-secret"}`,
		`plain \u0073 text`,
		`{"text":"\ud800 lone"}`,
	} {
		if got := r.Line(line); got != line {
			t.Errorf("changed: %q -> %q", line, got)
		}
	}
}

// A line too long to keep whole is cut where an escaped secret could begin
// and not be seen whole: the kept part holds no escaped prefix of it.
func TestCutDropsEscapedPrefix(t *testing.T) {
	secret := "sk-0123456789"
	r := redact.New([]string{secret})
	esc := escapeAll(secret, false)
	for n := 1; n < len(esc); n++ {
		line := strings.Repeat("x", 100) + esc[:n]
		got := r.Cut(line)
		if strings.Contains(got, `\u0073`) {
			t.Fatalf("cut at %d keeps the escaped secret's beginning: %q", n, got)
		}
	}
}
