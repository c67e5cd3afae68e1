package entrypoint

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strings"
)

// Tokens is a run's token usage, summed over its assistant messages.
type Tokens struct {
	Input      int64 `json:"input"`
	Output     int64 `json:"output"`
	CacheRead  int64 `json:"cacheRead"`
	CacheWrite int64 `json:"cacheWrite"`
	Total      int64 `json:"total"`
}

// event is the part of a pi 1.x JSON event (pi's docs/json.md) the
// entrypoint reads.
type event struct {
	Type     string   `json:"type"`
	Message  *message `json:"message"`
	ToolName string   `json:"toolName"`
	IsError  bool     `json:"isError"`
	// Attempt and ErrorText: auto_retry_start; ErrorText also a failed
	// compaction_end.
	Attempt   int    `json:"attempt"`
	ErrorText string `json:"errorMessage"`
	// Usage: message_update's running total of the assistant message in
	// flight (replaced, never added, by the message_end that follows).
	Usage *usage `json:"usage"`
	// Aborted: compaction_end. (agent_end's willRetry needs no reading:
	// the run goes on until agent_settled.)
	Aborted bool `json:"aborted"`
	// Reason and Result: compaction_start and compaction_end.
	Reason string `json:"reason"`
	Result *struct {
		TokensBefore int64  `json:"tokensBefore"`
		Usage        *usage `json:"usage"`
	} `json:"result"`
}

type message struct {
	Role         string          `json:"role"`
	Content      json.RawMessage `json:"content"`
	Provider     string          `json:"provider"`
	Model        string          `json:"model"`
	StopReason   string          `json:"stopReason"`
	ErrorMessage string          `json:"errorMessage"`
	Usage        *usage          `json:"usage"`
}

// usage is pi's usage of one model request, its cost in USD included.
type usage struct {
	Input       int64 `json:"input"`
	Output      int64 `json:"output"`
	CacheRead   int64 `json:"cacheRead"`
	CacheWrite  int64 `json:"cacheWrite"`
	TotalTokens int64 `json:"totalTokens"`
	Cost        struct {
		Total float64 `json:"total"`
	} `json:"cost"`
}

type contentBlock struct {
	Type      string          `json:"type"`
	Text      string          `json:"text"`
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
}

// Tally follows a pi run's event stream: turns, tokens, cost, the provider
// and model that answered, and how the last assistant message ended.
//
// Usage is summed from each assistant message_end and each compaction_end
// (pi's summary request is billed too). message_update carries a running
// total of the message in flight: it is kept aside and counted only when
// the stream ends before that message's message_end (pi stopped or killed
// mid-answer), so nothing is counted twice and a cut answer still counts.
type Tally struct {
	Turns    int
	Tokens   Tokens
	Cost     float64
	Provider string
	Model    string
	// Requests counts assistant messages, errors included, and compaction
	// summaries: one per model request pi made.
	Requests int
	// LastStop and LastError are the stop reason and error message of the
	// last assistant message.
	LastStop  string
	LastError string
	// Retries counts pi's own automatic retries.
	Retries int
	// Compactions counts the context compactions pi finished.
	Compactions int
	// Settled: pi said agent_settled, the end of its run (nothing left to
	// retry, compact or continue).
	Settled bool

	inflight *usage // the running total of the assistant message in flight
}

// Step is what one event means for the run's limits.
type Step struct {
	// TurnEnded: an assistant turn finished (its tools have run).
	TurnEnded bool
	// Continues: that turn asked for tools, so the agent will call the
	// model again.
	Continues bool
}

// Feed reads one line of pi's JSON output. Lines that are not events are
// ignored (pi prints only JSON in json mode, but a crash may not).
func (t *Tally) Feed(line []byte, transcript io.Writer) Step {
	var ev event
	if json.Unmarshal(line, &ev) != nil {
		return Step{}
	}
	switch ev.Type {
	case "message_start":
		if m := ev.Message; m != nil && m.Role == "assistant" {
			t.inflight = m.Usage
		}
	case "message_update":
		if ev.Usage != nil {
			t.inflight = ev.Usage
		}
	case "message_end":
		if m := ev.Message; m != nil && m.Role == "assistant" {
			t.inflight = nil
			t.addAssistant(m)
			writeAssistant(transcript, m)
		}
	case "turn_end":
		if m := ev.Message; m != nil && m.Role == "assistant" && m.StopReason != "error" && m.StopReason != "aborted" {
			t.Turns++
			return Step{TurnEnded: true, Continues: m.StopReason == "toolUse"}
		}
	case "tool_execution_end":
		if ev.IsError {
			fmt.Fprintf(transcript, "[tool %s failed]\n", oneLine(ev.ToolName, 64))
		}
	case "auto_retry_start":
		t.Retries++
		fmt.Fprintf(transcript, "[provider error, pi retries (attempt %d): %s]\n", ev.Attempt, oneLine(ev.ErrorText, 300))
	case "compaction_start":
		fmt.Fprintf(transcript, "[pi compacts its context (%s)]\n", oneLine(ev.Reason, 32))
	case "compaction_end":
		t.addCompaction(ev, transcript)
	case "agent_settled":
		t.Settled = true
	}
	return Step{}
}

// Finish counts the running total of an assistant message whose
// message_end never came: the provider billed what it streamed.
func (t *Tally) Finish() {
	if t.inflight != nil {
		t.Requests++
		t.addUsage(t.inflight)
		t.inflight = nil
	}
}

func (t *Tally) addCompaction(ev event, transcript io.Writer) {
	switch {
	case ev.Result != nil:
		t.Compactions++
		if u := ev.Result.Usage; u != nil {
			// An extension's summary may cost nothing: no request then.
			if u.Input+u.Output+u.CacheRead+u.CacheWrite+u.TotalTokens > 0 {
				t.Requests++
			}
			t.addUsage(u)
		}
		fmt.Fprintf(transcript, "[pi compacted %d tokens of context]\n", ev.Result.TokensBefore)
	case ev.Aborted:
		fmt.Fprintln(transcript, "[pi's compaction was aborted]")
	default:
		fmt.Fprintf(transcript, "[pi's compaction failed: %s]\n", oneLine(ev.ErrorText, 300))
	}
}

func (t *Tally) addAssistant(m *message) {
	t.Requests++
	if m.Provider != "" {
		t.Provider = m.Provider
	}
	if m.Model != "" {
		t.Model = m.Model
	}
	t.LastStop, t.LastError = m.StopReason, m.ErrorMessage
	if m.Usage != nil {
		t.addUsage(m.Usage)
	}
}

func (t *Tally) addUsage(u *usage) {
	t.Tokens.Input += max(u.Input, 0)
	t.Tokens.Output += max(u.Output, 0)
	t.Tokens.CacheRead += max(u.CacheRead, 0)
	t.Tokens.CacheWrite += max(u.CacheWrite, 0)
	total := u.TotalTokens
	if total <= 0 {
		total = max(u.Input, 0) + max(u.Output, 0) + max(u.CacheRead, 0) + max(u.CacheWrite, 0)
	}
	t.Tokens.Total += total
	if c := u.Cost.Total; c > 0 && !math.IsInf(c, 0) && !math.IsNaN(c) {
		t.Cost += c
	}
}

// writeAssistant prints an assistant message readably: its text, one line
// per tool call with the call's path or command, and its error.
func writeAssistant(w io.Writer, m *message) {
	var blocks []contentBlock
	_ = json.Unmarshal(m.Content, &blocks)
	for _, b := range blocks {
		switch b.Type {
		case "text":
			if s := strings.TrimSpace(b.Text); s != "" {
				fmt.Fprintf(w, "assistant: %s\n", bounded(s, 4000))
			}
		case "toolCall":
			fmt.Fprintf(w, "tool %s %s\n", oneLine(b.Name, 64), callSummary(b.Arguments))
		}
	}
	if m.StopReason == "error" && m.ErrorMessage != "" {
		fmt.Fprintf(w, "[model request failed: %s]\n", oneLine(m.ErrorMessage, 300))
	}
}

// callSummary names what a tool call acts on (a path or a command), not its
// whole input: file contents stay out of the transcript.
func callSummary(raw json.RawMessage) string {
	var args map[string]any
	_ = json.Unmarshal(raw, &args)
	for _, k := range []string{"path", "command", "pattern"} {
		if s, ok := args[k].(string); ok {
			return oneLine(s, 200)
		}
	}
	return ""
}

func bounded(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + " [...]"
}

func oneLine(s string, n int) string {
	return bounded(strings.Join(strings.Fields(s), " "), n)
}
