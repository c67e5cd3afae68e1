// Package exitline keeps what may be kept of a job's exit line: the
// telemetry the container printed last (docs/container-contract.md), rebuilt
// from its documented fields with each one checked, so nothing else the
// untrusted job printed reaches a record, the run mirror or a queue.
package exitline

import (
	"bytes"
	"encoding/json"
	"math"
	"slices"
	"strings"

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

// Clean rebuilds a job's exit line (raw, as the container printed
// it) from its documented fields, each validated; anything else the job
// printed is dropped. The job is untrusted: it may print a resolved secret
// in any field, so a string equal to or containing any of secrets' values is
// dropped too. unknownSecrets says the job held secrets whose values are no
// longer known (a run recorded after a restart): then every free-text
// string (provider, model) is dropped. nil when nothing is left.
func Clean(raw json.RawMessage, secrets map[string]string, unknownSecrets bool) json.RawMessage {
	var fields map[string]json.RawMessage
	if len(raw) == 0 || json.Unmarshal(raw, &fields) != nil {
		return nil
	}
	leaks := func(s string) bool {
		for _, v := range secrets {
			if v != "" && strings.Contains(s, v) {
				return true
			}
		}
		return false
	}
	token := func(key string, allowed []string) string {
		var s string
		if json.Unmarshal(fields[key], &s) != nil || leaks(s) {
			return ""
		}
		if allowed != nil {
			if !slices.Contains(allowed, s) {
				return ""
			}
		} else if unknownSecrets || !jobrule.Token(s) {
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
		return nil
	}
	return bytes.Clone(b)
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
