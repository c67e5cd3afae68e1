package dash

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/observe/transcript"
	"github.com/pidispatch/pidispatch/operator"
	"github.com/pidispatch/pidispatch/queue"
)

// JobReader is what the job page and the queued lists read. New adds them
// (GET /job, /api/job, /api/queued) when the Source is also a JobReader, as
// *Valkey is.
type JobReader interface {
	// Job is one job: where it is and what holds it (operator.Explain, with
	// its run records), and its newest transcript.
	Job(ctx context.Context, jobID string) (JobDetail, error)
	// Queued is up to limit waiting and delayed job ids of each queue.
	Queued(ctx context.Context, limit int) ([]QueuedList, error)
}

// JobDetail is what the job page shows.
type JobDetail struct {
	Explanation operator.Explanation
	// Attempt is the attempt Transcript is of (0: none found), and
	// TranscriptFrom where it was read: "logs-dir" or "live".
	Attempt        int
	TranscriptFrom string
	Transcript     []transcript.Entry
}

// QueuedList is one queue's waiting and delayed jobs.
type QueuedList struct {
	Queue   string
	Waiting []string
	Delayed []queue.Delayed
}

// maxTranscriptLines bounds the transcript lines the page gets per read.
const maxTranscriptLines = 2000

type jobView struct {
	operator.Explanation
	Attempt        int      `json:"transcriptAttempt"`
	TranscriptFrom string   `json:"transcriptFrom"`
	Lines          []string `json:"lines"`
	LinesCut       int      `json:"linesCut"`
	Running        bool     `json:"running"`
}

type queuedView struct {
	Queue   string        `json:"queue"`
	Waiting []string      `json:"waiting"`
	Delayed []delayedView `json:"delayed"`
}

type delayedView struct {
	JobID string    `json:"jobId"`
	Until time.Time `json:"until"`
}

// jobRoutes adds the job page when the source can read jobs.
func (h *Handler) jobRoutes() {
	jr, ok := h.src.(JobReader)
	if !ok {
		return
	}
	h.mux.HandleFunc("GET /job", h.authed(h.serveJobPage))
	h.mux.HandleFunc("GET /api/job", h.authed(func(w http.ResponseWriter, r *http.Request) { h.serveJob(w, r, jr) }))
	h.mux.HandleFunc("GET /api/queued", h.authed(func(w http.ResponseWriter, r *http.Request) { h.serveQueued(w, r, jr) }))
}

func (h *Handler) serveJobPage(w http.ResponseWriter, _ *http.Request) {
	b, err := pageFS.ReadFile("job.html")
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, _ = w.Write(bytes.ReplaceAll(b, []byte("{{RefreshMs}}"), []byte(itoa(h.opts.Refresh.Milliseconds()))))
}

func (h *Handler) serveJob(w http.ResponseWriter, r *http.Request, jr JobReader) {
	id := r.URL.Query().Get("id")
	if fleet.CheckJobID(id) != nil {
		writeJSON(w, http.StatusBadRequest, actionReply{Message: "job needs ?id=<a valid job id>"})
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), DefaultReadTimeout)
	defer cancel()
	d, err := jr.Job(ctx, id)
	if err != nil && !errors.Is(err, operator.ErrJobNotFound) {
		h.log.Warn("dash_read_failed", "section", "job", "jobId", id, "err", err)
		writeJSON(w, http.StatusBadGateway, actionReply{Message: "could not read the job: " + err.Error()})
		return
	}
	var text bytes.Buffer
	transcript.Render(&text, d.Transcript)
	lines := strings.Split(strings.TrimRight(text.String(), "\n"), "\n")
	v := jobView{Explanation: d.Explanation, Attempt: d.Attempt, TranscriptFrom: d.TranscriptFrom,
		Running: d.Explanation.State == string(queue.StateActive)}
	if len(d.Transcript) == 0 {
		lines = nil
	}
	if len(lines) > maxTranscriptLines {
		v.LinesCut = len(lines) - maxTranscriptLines
		lines = lines[len(lines)-maxTranscriptLines:]
	}
	v.Lines = lines
	writeJSON(w, http.StatusOK, v)
}

func (h *Handler) serveQueued(w http.ResponseWriter, r *http.Request, jr JobReader) {
	ctx, cancel := context.WithTimeout(r.Context(), DefaultReadTimeout)
	defer cancel()
	lists, err := jr.Queued(ctx, h.opts.Limit)
	if err != nil {
		h.log.Warn("dash_read_failed", "section", "queued", "err", err)
		writeJSON(w, http.StatusBadGateway, actionReply{Message: "could not read the queues: " + err.Error()})
		return
	}
	out := make([]queuedView, 0, len(lists))
	for _, l := range lists {
		v := queuedView{Queue: l.Queue, Waiting: l.Waiting, Delayed: []delayedView{}}
		if v.Waiting == nil {
			v.Waiting = []string{}
		}
		for _, d := range l.Delayed {
			v.Delayed = append(v.Delayed, delayedView{JobID: d.ID, Until: d.Until})
		}
		out = append(out, v)
	}
	writeJSON(w, http.StatusOK, out)
}

func itoa(n int64) string {
	var b [20]byte
	i := len(b)
	if n == 0 {
		return "0"
	}
	for n > 0 {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
	}
	return string(b[i:])
}
