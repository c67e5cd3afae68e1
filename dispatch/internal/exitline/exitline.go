// Package exitline keeps what may be kept of a job's exit line: the
// telemetry the container printed last (docs/container-contract.md), rebuilt
// from its documented fields with each one checked, so nothing else the
// untrusted job printed reaches a record, the run mirror or a queue.
package exitline

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/pidispatch/pidispatch/internal/jobrule"
	"github.com/pidispatch/pidispatch/jobs"
)

// Bounds of the exit line's numbers (docs/container-contract.md). A value
// outside them is dropped, not clamped: it is not a count a run could make.
const (
	maxExitCount    = 1_000_000         // turns, requests, retries
	maxExitTokens   = 1_000_000_000_000 // each token count
	maxExitDuration = 7 * 24 * 3600 * 1000
)

// exitOutcomes and exitReasons are the job's own account a record keeps:
// the contract's fixed tokens, nothing else.
var (
	exitOutcomes = []string{jobs.OutcomeCompleted, jobs.OutcomePolicy, jobs.OutcomeFailed}
	exitReasons  = []string{"completed", "max-turns", "cost-limit", "refusal", "invalid-job",
		"rate-limited", "provider-error", "provider-unreachable", "agent-crashed", "terminated"}
)

// exitLine is the telemetry a record, the run mirror and the queue's return
// value keep of a job's exit line: its documented fields only, in this
// order, each checked against its type and bounds.
type exitLine struct {
	Event      string   `json:"event"`
	Outcome    string   `json:"outcome,omitempty"`
	Reason     string   `json:"reason,omitempty"`
	Turns      *int64   `json:"turns,omitempty"`
	Tokens     any      `json:"tokens,omitempty"` // *int64 or *exitTokens
	Cost       *float64 `json:"cost,omitempty"`
	Provider   string   `json:"provider,omitempty"`
	Model      string   `json:"model,omitempty"`
	Requests   *int64   `json:"requests,omitempty"`
	Retries    *int64   `json:"retries,omitempty"`
	MaxTurns   *int64   `json:"maxTurns,omitempty"`
	DurationMs *int64   `json:"durationMs,omitempty"`
}

type exitTokens struct {
	Input      *int64 `json:"input,omitempty"`
	Output     *int64 `json:"output,omitempty"`
	CacheRead  *int64 `json:"cacheRead,omitempty"`
	CacheWrite *int64 `json:"cacheWrite,omitempty"`
	Total      *int64 `json:"total,omitempty"`
}

// Refusal is a string field of an exit line that was not kept, and why. Why
// never repeats the field's value: it is the job's, and may hold a secret.
type Refusal struct {
	Field, Why string
}

// Clean rebuilds a job's exit line (raw, as the container printed
// it) from its documented fields, each validated; anything else the job
// printed is dropped. The job is untrusted: it may print a resolved secret
// in any field, so a string equal to or containing any of secrets' values is
// dropped too. unknownSecrets says the job held secrets whose values are no
// longer known (a run recorded after a restart): then every free-text
// string (provider, model) is dropped. nil when nothing is left.
func Clean(raw json.RawMessage, secrets map[string]string, unknownSecrets bool) json.RawMessage {
	out, _ := Check(raw, secrets, unknownSecrets)
	return out
}

// Check is Clean, and says which string fields it refused and why. A
// provider or model name is kept only when it obeys the rule by which the
// gateway shows a model as it is (jobrule.ShownName): a name holding a
// bidi control, another control or format character, markup (<!channel>,
// a link, a backtick) or that starts with - or @ is refused, never stored
// as it came.
func Check(raw json.RawMessage, secrets map[string]string, unknownSecrets bool) (json.RawMessage, []Refusal) {
	var fields map[string]json.RawMessage
	if len(raw) == 0 || json.Unmarshal(raw, &fields) != nil {
		return nil, nil
	}
	leaks := func(s string) bool {
		for _, v := range secrets {
			if v != "" && strings.Contains(s, v) {
				return true
			}
		}
		return false
	}
	var refused []Refusal
	token := func(key string, allowed []string) string {
		rawField, present := fields[key]
		if !present {
			return ""
		}
		var s string
		why := ""
		switch {
		case json.Unmarshal(rawField, &s) != nil:
			why = "not a string"
		case leaks(s):
			why = "holds a secret value"
		case allowed != nil && !slices.Contains(allowed, s):
			why = "not one of the contract's tokens"
		case allowed == nil && unknownSecrets:
			why = "free text, and the job's secret values are no longer known"
		case allowed == nil:
			why = nameFault(s)
		}
		if why != "" {
			refused = append(refused, Refusal{Field: key, Why: why})
			return ""
		}
		return s
	}
	out := exitLine{
		Event:      "exit",
		Outcome:    token("outcome", exitOutcomes),
		Reason:     token("reason", exitReasons),
		Turns:      count(fields["turns"], maxExitCount),
		Provider:   token("provider", nil),
		Model:      token("model", nil),
		Requests:   count(fields["requests"], maxExitCount),
		Retries:    count(fields["retries"], maxExitCount),
		MaxTurns:   count(fields["maxTurns"], jobrule.MaxTurns),
		DurationMs: count(fields["durationMs"], maxExitDuration),
	}
	if n := count(fields["tokens"], maxExitTokens); n != nil {
		out.Tokens = n
	} else {
		var tk map[string]json.RawMessage
		if json.Unmarshal(fields["tokens"], &tk) == nil && tk != nil {
			t := exitTokens{
				Input: count(tk["input"], maxExitTokens), Output: count(tk["output"], maxExitTokens),
				CacheRead: count(tk["cacheRead"], maxExitTokens), CacheWrite: count(tk["cacheWrite"], maxExitTokens),
				Total: count(tk["total"], maxExitTokens),
			}
			if t != (exitTokens{}) {
				out.Tokens = &t
			}
		}
	}
	var cost float64
	if json.Unmarshal(fields["cost"], &cost) == nil && !math.IsNaN(cost) && cost >= 0 && cost <= jobs.MaxUSD {
		out.Cost = &cost
	}
	b, err := json.Marshal(out)
	if err != nil || len(b) > jobs.MaxTelemetryBytes {
		return nil, refused
	}
	return bytes.Clone(b), refused
}

// nameFault says why s is not a name that may be shown as it is, naming the
// first character at fault by its code point; "" when it is one.
func nameFault(s string) string {
	if jobrule.ShownName(s) {
		return ""
	}
	switch {
	case s == "":
		return "empty"
	case len(s) > jobrule.MaxNameBytes:
		return fmt.Sprintf("longer than %d bytes", jobrule.MaxNameBytes)
	case !utf8.ValidString(s):
		return "not UTF-8"
	}
	for i, r := range s {
		ok := r < utf8.RuneSelf && (r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' ||
			i > 0 && strings.ContainsRune("._:@/-", r))
		if !ok {
			kind := "character"
			if unicode.IsControl(r) || unicode.Is(unicode.Cf, r) || r == '\u2028' || r == '\u2029' {
				kind = "control or format character"
			}
			return fmt.Sprintf("holds %s %U at byte %d: a name is a letter or digit, then letters, digits and . _ : @ / -", kind, r, i)
		}
	}
	return "not a name"
}

// count is a JSON integer in 0..limit, else nil.
func count(raw json.RawMessage, limit int64) *int64 {
	var f float64
	if len(raw) == 0 || json.Unmarshal(raw, &f) != nil || f != math.Trunc(f) || f < 0 || f > float64(limit) {
		return nil
	}
	n := int64(f)
	return &n
}
