// Package redact removes secret values from text kept by the host (a job's
// transcript, its agent session): each value as it is and in its
// JSON-escaped form.
package redact

import (
	"encoding/json"
	"slices"
	"strings"
)

// Redacted replaces every redacted value.
const Redacted = "[redacted]"

// Redactor removes secret values from text. The zero value redacts nothing.
type Redactor struct {
	r *strings.Replacer
	// longest is the longest form of a value, for cutting lines safely.
	longest int
}

// New redacts each non-empty value, as it is and in its
// JSON-escaped form (a secret holding a quote or a backslash appears so in
// a JSON event). Longer values win where two overlap.
func New(values []string) *Redactor {
	forms := map[string]bool{}
	for _, v := range values {
		if v == "" {
			continue
		}
		forms[v] = true
		if b, err := json.Marshal(v); err == nil {
			if esc := string(b[1 : len(b)-1]); esc != v {
				forms[esc] = true
			}
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
	return &Redactor{r: strings.NewReplacer(pairs...), longest: len(list[0])}
}

// Line redacts one whole line.
func (r *Redactor) Line(s string) string {
	if r == nil || r.r == nil {
		return s
	}
	return r.r.Replace(s)
}

// Cut redacts the first part of a line too long to keep whole, s (the line's
// first bytes; the rest is not kept). A value that starts in s and goes on
// past its end cannot be seen whole, so the last bytes that could hold its
// beginning are dropped as well.
func (r *Redactor) Cut(s string) string {
	out := r.Line(s)
	if r != nil && r.longest > 0 {
		out = out[:max(0, len(out)-r.longest)]
	}
	return strings.ToValidUTF8(out, "")
}
