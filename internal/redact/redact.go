// Package redact removes secret values from text kept by the host (a job's
// transcript, its agent session): each value as it is, in its JSON-escaped
// form, and written with any JSON escapes (\u0073k-... is sk-... once
// `pi-dispatch logs` decodes the line).
package redact

import (
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// Redacted replaces every redacted value.
const Redacted = "[redacted]"

// maxEscapeRatio is how many bytes of JSON escapes one byte of a value may
// take at most (\u0073 for s).
const maxEscapeRatio = 6

// Redactor removes secret values from text. The zero value redacts nothing.
type Redactor struct {
	r *strings.Replacer
	// longest is the most bytes a value may take written with escapes, for
	// cutting lines safely.
	longest int
}

// New redacts each non-empty value, as it is and in its JSON-escaped forms
// (a secret holding a quote or a backslash appears so in a JSON event).
// Longer values win where two overlap.
func New(values []string) *Redactor {
	forms := map[string]bool{}
	longest := 0
	for _, v := range values {
		if v == "" {
			continue
		}
		longest = max(longest, maxEscapeRatio*len(v))
		forms[v] = true
		forms[canonical(v)] = true
		if b, err := json.Marshal(v); err == nil {
			forms[string(b[1:len(b)-1])] = true
		}
	}
	if len(forms) == 0 {
		return &Redactor{}
	}
	list := make([]string, 0, len(forms))
	for f := range forms {
		list = append(list, f)
	}
	slices.SortFunc(list, func(a, b string) int {
		if len(a) != len(b) {
			return len(b) - len(a)
		}
		return strings.Compare(a, b)
	})
	pairs := make([]string, 0, 2*len(list))
	for _, f := range list {
		pairs = append(pairs, f, Redacted)
	}
	return &Redactor{r: strings.NewReplacer(pairs...), longest: longest}
}

// Line redacts one whole line. A line whose JSON escapes hide a value
// (written \uXXXX, whole or in part) is answered with its escapes decoded
// and the value redacted; any other line keeps its bytes as written.
func (r *Redactor) Line(s string) string {
	if r == nil || r.r == nil {
		return s
	}
	out := r.r.Replace(s)
	if !strings.Contains(out, `\`) {
		return out
	}
	if dec := unescape(out); dec != out {
		if red := r.r.Replace(dec); red != dec {
			return red
		}
	}
	return out
}

// Cut redacts the first part of a line too long to keep whole, s (the line's
// first bytes; the rest is not kept). A value that starts in s and goes on
// past its end cannot be seen whole, so the last bytes that could hold its
// beginning, written with escapes, are dropped as well.
func (r *Redactor) Cut(s string) string {
	out := r.Line(s)
	if r != nil && r.longest > 0 {
		out = out[:max(0, len(out)-r.longest)]
	}
	return strings.ToValidUTF8(out, "")
}

// canonical writes s as the inside of a JSON string with only what JSON
// requires escaped: a quote, a backslash, control characters. unescape
// writes every decoded escape so.
func canonical(s string) string {
	var b strings.Builder
	for _, c := range s {
		writeCanonical(&b, c)
	}
	return b.String()
}

func writeCanonical(b *strings.Builder, c rune) {
	switch c {
	case '"':
		b.WriteString(`\"`)
	case '\\':
		b.WriteString(`\\`)
	case '\b':
		b.WriteString(`\b`)
	case '\f':
		b.WriteString(`\f`)
	case '\n':
		b.WriteString(`\n`)
	case '\r':
		b.WriteString(`\r`)
	case '\t':
		b.WriteString(`\t`)
	default:
		if c < 0x20 {
			b.WriteString(`\u00`)
			b.WriteString(strconv.FormatInt(int64(c)>>4, 16))
			b.WriteString(strconv.FormatInt(int64(c)&0xf, 16))
			return
		}
		b.WriteRune(c)
	}
}

// unescape decodes the JSON escapes of s that a decoder reads as another
// character (\uXXXX, a surrogate pair, \/), each written canonically; a
// backslash pair (\\, \", \n ...) is kept as it is, so \\u0073 stays. A
// lone surrogate or a malformed escape is left as written.
func unescape(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); {
		if s[i] != '\\' || i+1 >= len(s) {
			b.WriteByte(s[i])
			i++
			continue
		}
		switch s[i+1] {
		case '/':
			b.WriteByte('/')
			i += 2
			continue
		case 'u':
		default:
			b.WriteString(s[i : i+2])
			i += 2
			continue
		}
		c, ok := hex4(s, i+2)
		if !ok {
			b.WriteString(s[i : i+2])
			i += 2
			continue
		}
		n := 6
		if utf16.IsSurrogate(c) {
			lo, ok := rune(0), false
			if i+7 < len(s) && s[i+6] == '\\' && s[i+7] == 'u' {
				lo, ok = hex4(s, i+8)
			}
			c = utf16.DecodeRune(c, lo)
			if !ok || c == utf8.RuneError {
				b.WriteString(s[i : i+6])
				i += 6
				continue
			}
			n = 12
		}
		writeCanonical(&b, c)
		i += n
	}
	return b.String()
}

// hex4 reads the four hex digits at s[i:].
func hex4(s string, i int) (rune, bool) {
	if i+4 > len(s) {
		return 0, false
	}
	n, err := strconv.ParseUint(s[i:i+4], 16, 32)
	if err != nil {
		return 0, false
	}
	return rune(n), true
}
