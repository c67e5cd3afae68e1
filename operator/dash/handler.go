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
	"strings"
	"sync"
	"time"

	"github.com/pidispatch/pidispatch/fleet"
)

// static holds the page's script and style; page.html is the page itself.
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

// SessionCookie names the browser's session. It is HttpOnly (no script
// reads it) and SameSite=Strict (no other site's page sends it).
const SessionCookie = "pidispatch_dash"

// LoginPath is the path of the one-time login; Handler.LoginURL adds its token.
const LoginPath = "/login"

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
	// PullRequests, when set, joins what became of each run's pull request
	// to the records the charts read (the merged share); nil charts none.
	PullRequests PullRequestOutcomes
	// Clock is the charts' now (time.Now when nil).
	Clock func() time.Time
}

// Handler is the dashboard. Only a browser holding its session sees the
// fleet or acts: the session is given once, to whoever first opens the
// one-time address (LoginURL) the serving program shows its operator. No
// page and no answer carries the login token or the session.
type Handler struct {
	src  Source
	opts Options
	page []byte
	log  *slog.Logger
	mux  *http.ServeMux

	// loginToken opens the one session; session is its cookie's value once
	// a browser has it.
	loginToken string
	mu         sync.Mutex
	loginUsed  bool
	session    string
}

var pageTemplate = template.Must(template.ParseFS(pageFS, "page.html"))

// New returns the dashboard over src, with a fresh random login token.
func New(src Source, opts Options) (*Handler, error) {
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
	h := &Handler{src: src, opts: opts, loginToken: randomHex(), log: log}
	var page bytes.Buffer
	err := pageTemplate.Execute(&page, map[string]any{
		"Actions": opts.Actions != nil, "RefreshMs": opts.Refresh.Milliseconds(),
		"Charts": isRecordReader(src), "Capacity": isCapacityReader(src),
	})
	if err != nil {
		return nil, err
	}
	h.page = page.Bytes()
	h.routes()
	return h, nil
}

func randomHex() string {
	var raw [32]byte
	_, _ = rand.Read(raw[:]) // crypto/rand.Read never fails
	return hex.EncodeToString(raw[:])
}

// LoginURL is the one-time address that gives a browser the session: base
// (such as "http://127.0.0.1:8477") with the login path and token. Show it
// only to the operator (a terminal), never in a page or a log.
func (h *Handler) LoginURL(base string) string {
	return strings.TrimSuffix(base, "/") + LoginPath + "?token=" + h.loginToken
}

func (h *Handler) routes() {
	h.mux = http.NewServeMux()
	h.mux.HandleFunc("GET "+LoginPath, h.login)
	h.mux.Handle("GET /static/", http.FileServerFS(static))
	h.mux.HandleFunc("GET /{$}", h.authed(h.servePage))
	h.mux.HandleFunc("GET /api/state", h.authed(h.serveState))
	h.jobRoutes()   // job.go
	h.chartRoutes() // charts.go
	if h.opts.Actions != nil {
		h.mux.HandleFunc("POST /api/pause", h.authed(h.action("pause", func(ctx context.Context, _ string) (string, error) { return h.opts.Actions.Pause(ctx) })))
		h.mux.HandleFunc("POST /api/resume", h.authed(h.action("resume", func(ctx context.Context, _ string) (string, error) { return h.opts.Actions.Resume(ctx) })))
		h.mux.HandleFunc("POST /api/cancel", h.authed(h.action("cancel", h.opts.Actions.Cancel)))
	}
}

// login exchanges the one-time token for the session, once, and sends the
// browser on to the page at an address without the token.
func (h *Handler) login(w http.ResponseWriter, r *http.Request) {
	got := r.URL.Query().Get("token")
	h.mu.Lock()
	ok := !h.loginUsed && subtle.ConstantTimeCompare([]byte(got), []byte(h.loginToken)) == 1
	if ok {
		h.loginUsed, h.session = true, randomHex()
	}
	session := h.session
	h.mu.Unlock()
	if !ok {
		h.log.Warn("dash_login_refused", "peer", r.RemoteAddr)
		http.Error(w, "dash: this login address is wrong or was already used; stop pi-dispatch dash and start it again for a new one", http.StatusForbidden)
		return
	}
	h.log.Info("dash_login", "peer", r.RemoteAddr)
	http.SetCookie(w, &http.Cookie{Name: SessionCookie, Value: session, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

// authed lets through only a request carrying the session.
func (h *Handler) authed(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		c, err := r.Cookie(SessionCookie)
		h.mu.Lock()
		session := h.session
		h.mu.Unlock()
		if err != nil || session == "" || subtle.ConstantTimeCompare([]byte(c.Value), []byte(session)) != 1 {
			if r.Method == http.MethodPost {
				h.log.Warn("dash_action_refused", "peer", r.RemoteAddr, "path", r.URL.Path)
			}
			http.Error(w, "dash: no session: open the one-time address pi-dispatch dash printed", http.StatusUnauthorized)
			return
		}
		next(w, r)
	}
}

// ServeHTTP sets the headers every answer carries and refuses a Host not in
// Options.Hosts.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
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

func (h *Handler) servePage(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, _ = w.Write(h.page)
}

func (h *Handler) serveState(w http.ResponseWriter, r *http.Request) {
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

// action checks the request comes from the page (and, for cancel, the job
// id) and runs do, logging the peer that asked. The session cookie is
// SameSite=Strict; a JSON body and the fetch metadata keep out, besides, a
// form or a request of another site.
func (h *Handler) action(verb string, do func(context.Context, string) (string, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") || r.Header.Get("Sec-Fetch-Site") == "cross-site" {
			h.log.Warn("dash_action_refused", "action", verb, "peer", r.RemoteAddr)
			writeJSON(w, http.StatusForbidden, actionReply{Message: "actions are sent by the dashboard's page only: reload it"})
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
		log := h.log.With("action", verb, "peer", r.RemoteAddr)
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
