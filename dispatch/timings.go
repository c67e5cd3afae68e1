package dispatch

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"strings"
	"time"

	"github.com/pidispatch/pidispatch/dispatch/container"
	"github.com/pidispatch/pidispatch/internal/check"
	"github.com/pidispatch/pidispatch/jobs"
)

// NotedDeferrer is a JobQueue that keeps a note on a job it defers and hands
// it back in HeldJob.GateWaits at the job's next take (*stack.Queue does).
// The Worker notes there how long the job has waited in each gate, so the
// record of the attempt that runs says so whichever host deferred it. A
// queue without it loses the waits of earlier pickups.
type NotedDeferrer interface {
	DeferNoted(ctx context.Context, id, token string, delay time.Duration, note string) error
}

// gateNote is the note a deferral leaves: the attempt it is of, the waits
// so far by gate reason, and the deferral still running (its reason and
// when it began, unix milliseconds on the deferring worker's clock).
type gateNote struct {
	Attempt int                   `json:"a"`
	Waits   map[jobs.Reason]int64 `json:"w,omitempty"`
	Reason  jobs.Reason           `json:"r"`
	At      int64                 `json:"at"`
}

// Bounds of a gate note read back: its size, its gates (as many as a record
// holds) and each gate's name.
const (
	maxGateNoteBytes = 4 << 10
	maxGateWaits     = 32
	maxGateReason    = 64
)

// readGateWaits is the waits the job's note says it spent in each gate before
// this pickup, the deferral it ends included. The note is the job hash's, and
// anyone who writes Valkey may have written it: it is taken only when it is
// of this attempt, its gates are reason tokens, and no wait (nor their sum)
// is longer than the job has existed. Otherwise it is dropped whole. It only
// ever describes the run: nothing decides on it.
func (w *Worker) readGateWaits(h *held) map[jobs.Reason]int64 {
	raw := h.job.GateWaits
	if raw == "" || h.job.EnqueuedAt.IsZero() {
		return nil
	}
	// The queue's own clock says how long the job has existed too: the
	// longer of the two bounds, so a skewed clock costs no waits.
	bound := h.pickedAt.Sub(h.job.EnqueuedAt).Milliseconds()
	if p := h.job.ProcessedOn; !p.IsZero() {
		bound = max(bound, p.Sub(h.job.EnqueuedAt).Milliseconds())
	}
	bound = max(bound, 0)
	var n gateNote
	why := ""
	switch {
	case len(raw) > maxGateNoteBytes:
		why = "longer than 4 KiB"
	case decodeNote(raw, &n) != nil:
		why = "not a gate note"
	case n.Attempt != h.rec.Attempt:
		return nil // an earlier attempt's: its record counted those waits
	case len(n.Waits) > maxGateWaits || !gateReason(n.Reason):
		why = "too many gates, or a gate that is no reason"
	}
	var sum int64
	for r, ms := range n.Waits {
		if why != "" {
			break
		}
		sum += ms
		if !gateReason(r) || ms < 0 || ms > bound || sum > bound {
			why = "a gate that is no reason, or a wait longer than the job has existed"
		}
	}
	if why != "" {
		h.log.Warn("job_gate_waits_refused", "why", why)
		return nil
	}
	waits := maps.Clone(n.Waits)
	if waits == nil {
		waits = map[jobs.Reason]int64{}
	}
	if _, ok := waits[n.Reason]; ok || len(waits) < maxGateWaits {
		// The deferring host's clock may be ahead of this one's or behind.
		waits[n.Reason] += min(max(h.pickedAt.UnixMilli()-n.At, 0), bound-sum)
	}
	return waits
}

// decodeNote reads one note, strictly.
func decodeNote(raw string, n *gateNote) error {
	dec := json.NewDecoder(strings.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(n); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("more than one note")
	}
	return nil
}

// gateReason reports whether r may name a gate's wait: a deferral reason
// token (rate-limited:<provider> included), never free text.
func gateReason(r jobs.Reason) bool {
	if r == "" || len(r) > maxGateReason {
		return false
	}
	for _, c := range []byte(r) {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == ':' || c == '.' || c == '_') {
			return false
		}
	}
	return true
}

// deferNoted defers the job for d, noting its waits so far and this
// deferral for whichever host takes it next.
func (w *Worker) deferNoted(ctx context.Context, h *held, d time.Duration, why jobs.Reason) error {
	nd, ok := h.q.(NotedDeferrer)
	if !ok || !gateReason(why) {
		return h.q.Defer(ctx, h.job.ID, h.token, d)
	}
	note, err := json.Marshal(gateNote{Attempt: h.rec.Attempt, Waits: h.gateWaits, Reason: why, At: w.tune.Now().UnixMilli()})
	if err != nil || len(note) > maxGateNoteBytes {
		return h.q.Defer(ctx, h.job.ID, h.token, d)
	}
	return nd.DeferNoted(ctx, h.job.ID, h.token, d, string(note))
}

// timings is where the attempt's time went, as its record says it.
func (h *held) timings() *jobs.Timings {
	t := &jobs.Timings{AgentMs: h.agentMs}
	if len(h.gateWaits) > 0 {
		t.GatesMs = maps.Clone(h.gateWaits)
	}
	if e := h.job.EnqueuedAt; !e.IsZero() {
		t.EnqueuedAt = e.UTC().Truncate(time.Millisecond)
		t.QueuedMs = max(h.pickedAt.Sub(e).Milliseconds(), 0)
	}
	return t
}

// trigger is the triggers.json entry name a record may carry: a name, never
// free text.
func trigger(name string) string {
	if !check.Name(name) {
		return ""
	}
	return name
}

// ranFor measures a run that started: how long its container ran and what
// it used, each clamped to what a record holds.
func (h *held) ranFor(r container.Result) {
	if !r.StartedAt.IsZero() && r.EndedAt.After(r.StartedAt) {
		h.agentMs = r.EndedAt.Sub(r.StartedAt).Milliseconds()
	}
	h.rec.Container = &jobs.ContainerStats{
		PeakMemoryBytes: max(r.PeakMemoryBytes, 0),
		CPUMillis:       max(r.CPUTime.Milliseconds(), 0),
		OOMKilled:       r.OOMKilled,
	}
}
