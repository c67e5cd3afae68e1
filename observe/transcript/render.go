package transcript

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/pidispatch/pidispatch/jobs"
)

// Summary is what a transcript says about its run, for a person.
type Summary struct {
	// Turns are the agent's turns (pi's turn_end events or its exit line).
	Turns int
	// ToolCalls counts the tool calls seen.
	ToolCalls int
	// FilesEdited are the paths of edit and write tool calls, in order.
	FilesEdited []string
	// ModelCalls and ModelMicros: the gateway's calls and their price.
	ModelCalls  int
	ModelMicros int64
	// Tokens of those calls.
	Tokens int64
	// Outcome and Reason from the agent's exit line, when it printed one.
	Outcome, Reason string
}

// piEvent is the part of a pi JSON event the renderer reads.
type piEvent struct {
	Type     string `json:"type"`
	ToolName string `json:"toolName"`
	IsError  bool   `json:"isError"`
	Message  *struct {
		Role       string          `json:"role"`
		Content    json.RawMessage `json:"content"`
		StopReason string          `json:"stopReason"`
	} `json:"message"`
	// The exit line's fields.
	Event   string `json:"event"`
	Outcome string `json:"outcome"`
	Reason  string `json:"reason"`
	Turns   int    `json:"turns"`
}

type piBlock struct {
	Type      string         `json:"type"`
	Text      string         `json:"text"`
	Name      string         `json:"name"`
	Arguments map[string]any `json:"arguments"`
}

// Render writes entries for a person, one line each with its time, then a
// summary: turns, tool calls, files edited, model calls with their cost.
// Control characters a job printed are shown escaped, never sent to the
// terminal.
func Render(w io.Writer, entries []Entry) Summary {
	r := NewRenderer(w)
	for _, e := range entries {
		r.Entry(e)
	}
	return r.Summary()
}

// Renderer writes entries for a person one at a time (logs --follow), and
// the summary at the end.
type Renderer struct {
	w      io.Writer
	s      Summary
	edited map[string]bool
}

// NewRenderer writes to w.
func NewRenderer(w io.Writer) *Renderer { return &Renderer{w: w, edited: map[string]bool{}} }

// Entry writes one entry's lines.
func (r *Renderer) Entry(e Entry) {
	for _, line := range renderEntry(e, &r.s, r.edit) {
		fmt.Fprintf(r.w, "%s  %s\n", e.Time().UTC().Format(time.TimeOnly), Printable(line))
	}
}

func (r *Renderer) edit(tool, path string) {
	r.s.ToolCalls++
	if (tool == "edit" || tool == "write") && path != "" && !r.edited[path] {
		r.edited[path] = true
		r.s.FilesEdited = append(r.s.FilesEdited, path)
	}
}

// Summary writes and returns the summary of the entries so far.
func (r *Renderer) Summary() Summary {
	s, w := r.s, r.w
	fmt.Fprintf(w, "-- %d turns, %d tool calls, %d model calls (%s USD, %d tokens)", s.Turns, s.ToolCalls, s.ModelCalls, jobs.FormatUSD(s.ModelMicros), s.Tokens)
	if s.Outcome != "" {
		fmt.Fprintf(w, ", %s: %s", Printable(s.Outcome), Printable(s.Reason))
	}
	fmt.Fprintln(w)
	if len(s.FilesEdited) > 0 {
		fmt.Fprintf(w, "-- files edited: %s\n", Printable(strings.Join(s.FilesEdited, ", ")))
	}
	return s
}

// renderEntry is the lines one entry shows, and what it adds to s.
func renderEntry(e Entry, s *Summary, edit func(tool, path string)) []string {
	switch e.Kind {
	case KindModel:
		c := e.Call
		s.ModelCalls++
		s.ModelMicros += c.Micros
		s.Tokens += c.Input + c.Output + c.CacheRead + c.CacheWrite
		est := ""
		if c.Estimated {
			est = " (estimated)"
		}
		return []string{fmt.Sprintf("model %s/%s %d: %d in, %d out tokens, %s USD%s, %s",
			c.Provider, c.Model, c.Status, c.Input+c.CacheRead+c.CacheWrite, c.Output, jobs.FormatUSD(c.Micros), est, (time.Duration(c.Millis) * time.Millisecond).String())}
	case KindNote:
		return []string{e.Line}
	case KindEnd:
		return []string{fmt.Sprintf("[attempt %d ended]", e.Attempt)}
	}
	line := e.Line
	if strings.HasPrefix(line, "{") {
		var ev piEvent
		if json.Unmarshal([]byte(line), &ev) == nil {
			return renderEvent(ev, line, s, edit)
		}
	}
	// The agent entrypoint's readable lines: "tool <name> <path or command>".
	if rest, ok := strings.CutPrefix(line, "tool "); ok {
		name, arg, _ := strings.Cut(rest, " ")
		edit(name, arg)
	}
	return []string{line}
}

func renderEvent(ev piEvent, raw string, s *Summary, edit func(tool, path string)) []string {
	switch {
	case ev.Event == "exit":
		s.Outcome, s.Reason = ev.Outcome, ev.Reason
		if ev.Turns > s.Turns {
			s.Turns = ev.Turns
		}
		return []string{"exit " + raw}
	case ev.Type == "turn_end":
		s.Turns++
		return nil
	case ev.Type == "tool_execution_end":
		if ev.IsError {
			return []string{"[tool " + ev.ToolName + " failed]"}
		}
		return nil
	case ev.Type == "message_end" && ev.Message != nil && ev.Message.Role == "assistant":
		var blocks []piBlock
		_ = json.Unmarshal(ev.Message.Content, &blocks)
		var out []string
		for _, b := range blocks {
			switch b.Type {
			case "text":
				if t := strings.TrimSpace(b.Text); t != "" {
					out = append(out, "assistant: "+t)
				}
			case "toolCall":
				arg := ""
				for _, k := range []string{"path", "command", "pattern"} {
					if v, ok := b.Arguments[k].(string); ok {
						arg = v
						break
					}
				}
				edit(b.Name, arg)
				out = append(out, strings.TrimSpace("tool "+b.Name+" "+arg))
			}
		}
		return out
	case ev.Type != "":
		return nil // pi's other events (deltas, starts) say nothing new
	}
	return []string{raw}
}

// Printable escapes the control characters of s (but tab), so text a job
// printed cannot move a terminal's cursor or change its title.
func Printable(s string) string {
	if !strings.ContainsFunc(s, isControl) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if isControl(r) {
			fmt.Fprintf(&b, "\\x%02x", r)
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

func isControl(r rune) bool {
	return r != '\t' && (r < 0x20 || r == 0x7f || r >= 0x80 && r < 0xa0 || r == 0x2028 || r == 0x2029 || r >= 0x202a && r <= 0x202e || r >= 0x2066 && r <= 0x2069)
}
