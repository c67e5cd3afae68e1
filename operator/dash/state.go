package dash

import (
	"context"
	"time"

	"github.com/pidispatch/pidispatch/jobs"
	"github.com/pidispatch/pidispatch/operator"
	"github.com/pidispatch/pidispatch/registry"
)

// state is the JSON the page renders. Every string in it is data to show as
// text; encoding/json escapes <, > and & in it, so a hostile job id or host
// name is inert even where a reader would parse the JSON as HTML.
type state struct {
	Now     time.Time `json:"now"`
	Actions bool      `json:"actions"`
	// Fleet is "running", "paused" or "partly paused"; "" when the queues
	// could not be read.
	Fleet     string                 `json:"fleet"`
	PauseFlag bool                   `json:"pauseFlag"`
	Hosts     []hostView             `json:"hosts"`
	Queues    []operator.QueueStatus `json:"queues"`
	Held      []heldView             `json:"held"`
	Running   []runningView          `json:"running"`
	Runs      []runView              `json:"runs"`
	// RunsNote is the mirror's degraded state when it is not ok.
	RunsNote string       `json:"runsNote,omitempty"`
	Starts   *Starts      `json:"starts"`
	Dollars  []dollarView `json:"dollars"`
	// DollarsOff: no dollar source is configured.
	DollarsOff bool `json:"dollarsOff"`
	// Errors names each section that could not be read.
	Errors map[string]string `json:"errors"`
}

type hostView struct {
	Name        string   `json:"name"`
	AgeMs       *int64   `json:"ageMs"` // null: the row cannot be dated
	Routes      bool     `json:"routes"`
	Caps        string   `json:"caps"`
	Concurrency int      `json:"concurrency"`
	Version     string   `json:"version"`
	Running     []string `json:"running"`
	Problems    []string `json:"problems,omitempty"`
}

type heldView struct {
	JobID  string `json:"jobId"`
	AgeMs  *int64 `json:"ageMs"`
	Checks int    `json:"checks"`
}

type runningView struct {
	JobID  string `json:"jobId"`
	Queue  string `json:"queue"`
	Host   string `json:"host"`
	AgeMs  *int64 `json:"ageMs"`
	Kind   string `json:"kind"`
	Target string `json:"target"`
}

type runView struct {
	JobID      string    `json:"jobId"`
	Host       string    `json:"host"`
	Kind       string    `json:"kind"`
	Target     string    `json:"target"`
	Flow       string    `json:"flow"`
	Outcome    string    `json:"outcome"`
	Reason     string    `json:"reason"`
	Attempt    int       `json:"attempt"`
	EndedAt    time.Time `json:"endedAt"`
	DurationMs int64     `json:"durationMs"`
	// Dollars is the run's model spend; null when no call went through the
	// gateway. Estimated marks a spend whose tokens were partly estimated.
	Dollars   *float64 `json:"dollars"`
	Estimated bool     `json:"estimated,omitempty"`
	// PullRequestURL is a forge job's pull request (jobs.Record checked it
	// is an http(s) URL; the page links only those).
	PullRequestURL string `json:"pullRequestUrl,omitempty"`
	// StatusCommentURL is its status comment on the forge (checked as the
	// pull request's is).
	StatusCommentURL string `json:"statusCommentUrl,omitempty"`
}

type dollarView struct {
	Window string   `json:"window"`
	Used   float64  `json:"used"`
	Cap    *float64 `json:"cap"` // null: no cap
}

// Section names, the keys of state.Errors.
const (
	secHosts   = "hosts"
	secQueues  = "queues"
	secHeld    = "held"
	secRunning = "running"
	secRuns    = "runs"
	secStarts  = "starts"
	secDollars = "dollars"
)

// read gathers every section; a failed one is named in Errors.
func (h *Handler) read(ctx context.Context) state {
	now := time.Now()
	st := state{Now: now.UTC(), Actions: h.opts.Actions != nil, Errors: map[string]string{},
		Hosts: []hostView{}, Queues: []operator.QueueStatus{}, Held: []heldView{},
		Running: []runningView{}, Runs: []runView{}, Dollars: []dollarView{}}
	fail := func(sec string, err error) bool {
		if err != nil {
			st.Errors[sec] = err.Error()
		}
		return err != nil
	}
	if rep, err := h.src.Queues(ctx); !fail(secQueues, err) {
		st.Fleet, st.PauseFlag = fleetWord(rep), rep.PauseFlag
		st.Queues = append(st.Queues, rep.PerQueue...) // [] in JSON, never null
	}
	running, err := h.src.Running(ctx, h.opts.Limit)
	if !fail(secRunning, err) {
		for _, r := range running {
			st.Running = append(st.Running, runningView{JobID: r.JobID, Queue: r.Queue, Host: r.Host,
				AgeMs: since(now, r.Since), Kind: r.Kind, Target: r.Target})
		}
	}
	if hosts, err := h.src.Hosts(ctx); !fail(secHosts, err) {
		for _, host := range hosts {
			st.Hosts = append(st.Hosts, toHostView(host, running))
		}
	}
	if held, err := h.src.Held(ctx, h.opts.Limit); !fail(secHeld, err) {
		for _, x := range held {
			st.Held = append(st.Held, heldView{JobID: x.JobID, AgeMs: since(now, x.Since), Checks: x.Checks})
		}
	}
	if runs, degraded, err := h.src.Runs(ctx, h.opts.Limit); !fail(secRuns, err) {
		for _, r := range runs {
			st.Runs = append(st.Runs, toRunView(r))
		}
		if degraded != "" && degraded != "ok" {
			st.RunsNote = degraded
		}
	}
	if s, err := h.src.Starts(ctx); !fail(secStarts, err) {
		st.Starts = &s
	}
	h.readDollars(ctx, &st)
	return st
}

func (h *Handler) readDollars(ctx context.Context, st *state) {
	if h.opts.Dollars == nil {
		st.DollarsOff = true
		return
	}
	ws, err := h.opts.Dollars.DollarWindows(ctx)
	if err != nil {
		st.Errors[secDollars] = err.Error()
		return
	}
	for _, w := range ws {
		d := dollarView{Window: w.Window, Used: float64(w.UsedMicros) / 1e6}
		if w.CapMicros > 0 {
			c := float64(w.CapMicros) / 1e6
			d.Cap = &c
		}
		st.Dollars = append(st.Dollars, d)
	}
}

func fleetWord(rep operator.StatusReport) string {
	switch {
	case rep.PausedState:
		return "paused"
	case rep.PausedPartial:
		return "partly paused"
	}
	return "running"
}

// since is the age of t at now in milliseconds; nil for the zero time.
func since(now, t time.Time) *int64 {
	if t.IsZero() {
		return nil
	}
	ms := max(now.Sub(t).Milliseconds(), 0)
	return &ms
}

func toHostView(h registry.Host, running []Running) hostView {
	v := hostView{Name: h.Name, Routes: h.Routes, Caps: h.Caps, Concurrency: h.Concurrency,
		Version: h.Version, Running: []string{}, Problems: h.Problems}
	if h.AgeKnown {
		ms := h.Age.Milliseconds()
		v.AgeMs = &ms
	}
	for _, r := range running {
		if r.Host == h.Name {
			v.Running = append(v.Running, r.JobID)
		}
	}
	return v
}

func toRunView(r jobs.Record) runView {
	v := runView{JobID: r.JobID, Host: r.Host, Kind: string(r.Kind), Target: r.Target, Flow: r.Flow,
		Outcome: r.Outcome, Reason: string(r.Reason), Attempt: r.Attempt, EndedAt: r.EndedAt.UTC(),
		DurationMs: max(r.EndedAt.Sub(r.StartedAt).Milliseconds(), 0), PullRequestURL: r.PullRequestURL,
		StatusCommentURL: r.StatusCommentURL}
	if r.JobIDQuoted != "" {
		v.JobID = r.JobIDQuoted
	}
	if r.Spend != nil {
		d := r.Spend.Dollars
		v.Dollars = &d
		v.Estimated = r.Spend.Basis == jobs.BasisEstimated
	}
	return v
}
