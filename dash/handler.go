package dash

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"html/template"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"time"

	"github.com/pidispatch/pidispatch/fleet"
)

// static holds the page's script and style; page.html is the page itself,
// a template that receives the token.
//
//go:embed static
var static embed.FS

//go:embed page.html job.html
var pageFS embed.FS

// Defaults of Options.
const (
	DefaultRefresh     = 3 * time.Second
	DefaultLimit       = 50
	DefaultReadTimeout = 5 * time.Second
	// DefaultActionTimeout covers a Cancel's wait for the worker.
	DefaultActionTimeout = 20 * time.Second
)

// TokenHeader carries the page's token on every POST. A form on another
// site cannot set it, and a page of another origin cannot read the token.
const TokenHeader = "X-Dash-Token"

// ContentSecurityPolicy is sent with every answer: the page's own script,
// style and endpoint, nothing else; no inline script, no frames, no forms.
const ContentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; " +
	"connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// Options tunes the handler. The zero value is a read-only dashboard.
type Options struct {
	// Actions, when set, adds the Pause, Resume and Cancel buttons and their
	// POST endpoints. Nil: the page has no buttons and every POST answers 404.
	Actions Actions
	// Dollars feeds the dollar windows; nil shows them as not configured.
	Dollars DollarWindows
	// Refresh is how often the page reads the state (DefaultRefresh when 0).
	Refresh time.Duration
	// Limit bounds each list: held, running, recent runs (DefaultLimit when 0).
	Limit int
	// Hosts, when set, are the only Host headers answered (host:port as the
	// browser sends it): a DNS name rebound to a loopback address then
	// reaches nothing. Empty answers any.
	Hosts []string
	// Logger receives dash_action (each action, with its outcome) and
	// dash_read_failed. Defaults to discarding.
	Logger *slog.Logger
	// Host is this machine's name, the host attribute of every log line.
	Host string
}

type handler struct {
	src   Source
	opts  Options
	token string
	page  []byte
	log   *slog.Logger
	mux   *http.ServeMux
}

var pageTemplate = template.Must(template.ParseFS(pageFS, "page.html"))

// New returns the dashboard over src. Its token, embedded in the page and
// required on every POST, is random per call.
func New(src Source, opts Options) (http.Handler, error) {
	if src == nil {
		return nil, errors.New("dash: nil source")
	}
	if opts.Refresh <= 0 {
		opts.Refresh = DefaultRefresh
	}
	if opts.Limit <= 0 {
		opts.Limit = DefaultLimit
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if opts.Host != "" {
		log = log.With("host", opts.Host)
	}
	var raw [32]byte
	_, _ = rand.Read(raw[:]) // crypto/rand.Read never fails
	h := &handler{src: src, opts: opts, token: hex.EncodeToString(raw[:]), log: log}
	var page bytes.Buffer
	err := pageTemplate.Execute(&page, map[string]any{
		"Actions": opts.Actions != nil, "Token": h.token, "RefreshMs": opts.Refresh.Milliseconds(),
	})
	if err != nil {
		return nil, err
	}
	h.page = page.Bytes()
	h.routes()
	return h, nil
}

func (h *handler) routes() {
	h.mux = http.NewServeMux()
	h.mux.HandleFunc("GET /{$}", h.servePage)
	h.mux.Handle("GET /static/", http.FileServerFS(static))
	h.mux.HandleFunc("GET /api/state", h.serveState)
	h.jobRoutes() // job.go
	if h.opts.Actions != nil {
		h.mux.HandleFunc("POST /api/pause", h.action("pause", func(ctx context.Context, _ string) (string, error) { return h.opts.Actions.Pause(ctx) }))
		h.mux.HandleFunc("POST /api/resume", h.action("resume", func(ctx context.Context, _ string) (string, error) { return h.opts.Actions.Resume(ctx) }))
		h.mux.HandleFunc("POST /api/cancel", h.action("cancel", h.opts.Actions.Cancel))
	}
}

// ServeHTTP sets the headers every answer carries and refuses a Host not in
// Options.Hosts.
func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hdr := w.Header()
	hdr.Set("Content-Security-Policy", ContentSecurityPolicy)
	hdr.Set("X-Content-Type-Options", "nosniff")
	hdr.Set("Referrer-Policy", "no-referrer")
	hdr.Set("X-Frame-Options", "DENY")
	hdr.Set("Cache-Control", "no-store")
	if len(h.opts.Hosts) > 0 && !slices.Contains(h.opts.Hosts, r.Host) {
		http.Error(w, "dash: unknown Host header (open the address pi-dispatch dash printed)", http.StatusMisdirectedRequest)
		return
	}
	h.mux.ServeHTTP(w, r)
}

func (h *handler) servePage(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, _ = w.Write(h.page)
}

func (h *handler) serveState(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), DefaultReadTimeout)
	defer cancel()
	st := h.read(ctx)
	for sec, msg := range st.Errors {
		h.log.Warn("dash_read_failed", "section", sec, "err", msg)
	}
	writeJSON(w, http.StatusOK, st)
}

// actionReply is a POST's answer.
type actionReply struct {
	OK      bool   `json:"ok"`
	Message string `json:"message"`
}

// action checks the token (and, for cancel, the job id) and runs do.
func (h *handler) action(verb string, do func(context.Context, string) (string, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		got := r.Header.Get(TokenHeader)
		if subtle.ConstantTimeCompare([]byte(got), []byte(h.token)) != 1 || r.Header.Get("Sec-Fetch-Site") == "cross-site" {
			writeJSON(w, http.StatusForbidden, actionReply{Message: "missing or wrong " + TokenHeader + ": reload the page"})
			return
		}
		var body struct {
			JobID string `json:"jobId"`
		}
		if verb == "cancel" {
			raw, _ := io.ReadAll(io.LimitReader(r.Body, 64<<10))
			if err := json.Unmarshal(raw, &body); err != nil || fleet.CheckJobID(body.JobID) != nil {
				writeJSON(w, http.StatusBadRequest, actionReply{Message: "cancel needs {\"jobId\": <a valid job id>}"})
				return
			}
		}
		ctx, cancel := context.WithTimeout(r.Context(), DefaultActionTimeout)
		defer cancel()
		msg, err := do(ctx, body.JobID)
		log := h.log.With("action", verb)
		if body.JobID != "" {
			log = log.With("jobId", body.JobID)
		}
		if err != nil {
			log.Warn("dash_action", "err", err)
			writeJSON(w, http.StatusInternalServerError, actionReply{Message: verb + " failed: " + err.Error()})
			return
		}
		log.Info("dash_action", "result", msg)
		writeJSON(w, http.StatusOK, actionReply{OK: true, Message: msg})
	}
}

// writeJSON answers v with HTML-escaped JSON (encoding/json's default).
func writeJSON(w http.ResponseWriter, code int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(code)
	_, _ = w.Write(body)
}
