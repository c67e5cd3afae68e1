// Package receiver is the HTTP front door of forge webhooks: one route per
// forge (/github, /gitlab, /forgejo), each verified with that forge's own
// scheme over the raw body and bounded in size. A verified delivery of an
// event type some trigger handles is stored durably in the inbox (package
// forge/inbox: Valkey, or a local spool when Valkey does not answer in time)
// and then answered; the inbox's processor decides it later. An event type
// no trigger handles (GitHub's ping) is answered 200 and not stored. It also
// serves /healthz and its own Prometheus metrics at /metrics.
package receiver

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	"code.gitea.io/sdk/gitea"
	"github.com/google/go-github/v84/github"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/net/netutil"

	"github.com/pidispatch/pidispatch/forge"
	"github.com/pidispatch/pidispatch/forge/inbox"
	"github.com/pidispatch/pidispatch/jobs"
)

// Defaults of Config.
const (
	DefaultMaxBody       = 2 << 20 // 2 MiB, as the original
	DefaultSignatureSkew = 5 * time.Minute
	DefaultMaxInFlight   = 32
	DefaultMaxConns      = 256
	handleTimeout        = 20 * time.Second
)

// GitLab webhook modes (GITLAB_WEBHOOK_MODE).
const (
	GitLabToken     = "token"     // X-Gitlab-Token equals the secret
	GitLabSignature = "signature" // Standard Webhooks HMAC over id.timestamp.body
)

// Storer keeps a verified delivery durably before it is answered: an
// *inbox.Inbox. Put's error means it was stored nowhere (answered 503).
type Storer interface {
	Put(ctx context.Context, d inbox.Delivery) (inbox.Outcome, error)
}

// Config configures a Receiver. A forge whose secret is empty is not served:
// its route answers 404, so nothing looks armed.
type Config struct {
	// Intake logs every refusal and ignored event; in the synchronous mode
	// (no Inbox) it also handles every verified event. Required.
	Intake *forge.Intake
	// Inbox stores each verified delivery before it is answered (202), and
	// its processor decides it afterwards. Required unless Replay is set.
	Inbox Storer
	// Replay is the synchronous mode, used only without an Inbox: a
	// delivery's key (the digest of its body) is claimed, the event handled, and the outcome answered
	// (409 for a replay, 503 when undecided). Nothing is stored: a delivery
	// the forge does not deliver again after a 503 is lost.
	Replay ReplayStore
	// GitHubSecret is WEBHOOK_SECRET (X-Hub-Signature-256).
	GitHubSecret string
	// GitLabMode and GitLabSecret are GITLAB_WEBHOOK_MODE and
	// GITLAB_WEBHOOK_SECRET. In signature mode the secret is the whsec_
	// signing token GitLab shows.
	GitLabMode, GitLabSecret string
	// ForgejoSecret is FORGEJO_WEBHOOK_SECRET (X-Forgejo-Signature or
	// X-Gitea-Signature).
	ForgejoSecret string
	// MaxBody bounds a delivery; larger ones get 413. Default 2 MiB.
	MaxBody int64
	// MaxInFlight bounds the deliveries whose bodies are read at once, so
	// the memory a flood can take is MaxInFlight × MaxBody; one more is
	// answered 503 with Retry-After before its body is read. Default 32.
	MaxInFlight int
	// MaxConns bounds the connections Serve accepts at once; more wait in
	// the kernel's backlog. Default 256.
	MaxConns int
	// SignatureSkew is how far a GitLab signature timestamp may be from now.
	// Default 5 minutes.
	SignatureSkew time.Duration
	// Now is the clock of the GitLab timestamp check. Default time.Now.
	Now func() time.Time
	// Logger receives receiver_* events and the refusals; Host is on every line.
	Logger *slog.Logger
	Host   string
}

// Receiver serves the webhook routes.
type Receiver struct {
	cfg       Config
	inFlight  chan struct{} // one token per delivery whose body is being read
	log       *slog.Logger
	gitlabKey []byte
	reg       *prometheus.Registry
	received  *prometheus.CounterVec
	duration  *prometheus.HistogramVec
	mux       *http.ServeMux
}

// New checks cfg and returns a Receiver. A GitLab signature secret that does
// not decode, or a mode without a secret, is an error.
func New(cfg Config) (*Receiver, error) {
	if cfg.Intake == nil || (cfg.Inbox == nil && cfg.Replay == nil) {
		return nil, errors.New("receiver: Intake and an Inbox (or a Replay store) are required")
	}
	var inboxMax int64 // what the inbox stores at most; 0: it does not say
	if ib, ok := cfg.Inbox.(interface{ MaxBody() int64 }); ok {
		inboxMax = ib.MaxBody()
	}
	if cfg.MaxBody <= 0 {
		cfg.MaxBody = DefaultMaxBody
		if inboxMax > 0 {
			cfg.MaxBody = min(cfg.MaxBody, inboxMax)
		}
	}
	if inboxMax > 0 && cfg.MaxBody > inboxMax {
		return nil, fmt.Errorf("receiver: MaxBody %d is over the inbox's %d", cfg.MaxBody, inboxMax)
	}
	if cfg.SignatureSkew <= 0 {
		cfg.SignatureSkew = DefaultSignatureSkew
	}
	if cfg.MaxInFlight <= 0 {
		cfg.MaxInFlight = DefaultMaxInFlight
	}
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = DefaultMaxConns
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	r := &Receiver{cfg: cfg, log: log.With("host", cfg.Host), reg: prometheus.NewRegistry(),
		inFlight: make(chan struct{}, cfg.MaxInFlight)}
	switch {
	case cfg.GitLabSecret == "" && cfg.GitLabMode == "":
	case cfg.GitLabSecret == "":
		return nil, errors.New("receiver: GitLab mode set without a secret")
	case cfg.GitLabMode == GitLabToken:
	case cfg.GitLabMode == GitLabSignature:
		key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(cfg.GitLabSecret, "whsec_"))
		if err != nil || len(key) == 0 {
			return nil, errors.New("receiver: the GitLab signing token is not whsec_ followed by base64")
		}
		r.gitlabKey = key
	default:
		return nil, fmt.Errorf("receiver: GitLab mode %q (want token or signature)", cfg.GitLabMode)
	}
	r.received = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "pidispatch_receiver_deliveries_total",
		Help: "Webhook deliveries by forge and outcome: stored, spooled, duplicate, ignored, inbox-full, unavailable, or a refusal reason (bad-signature, too-large, ...).",
	}, []string{"forge", "outcome"})
	r.duration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "pidispatch_receiver_delivery_seconds",
		Help:    "Time to answer a webhook delivery, by forge.",
		Buckets: prometheus.DefBuckets,
	}, []string{"forge"})
	r.reg.MustRegister(r.received, r.duration)

	r.mux = http.NewServeMux()
	r.mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		io.WriteString(w, "ok\n")
	})
	r.mux.Handle("/metrics", promhttp.HandlerFor(r.reg, promhttp.HandlerOpts{}))
	r.mux.Handle("/github", r.route(jobs.ForgeGitHub, cfg.GitHubSecret != "", r.verifyGitHub))
	r.mux.Handle("/gitlab", r.route(jobs.ForgeGitLab, cfg.GitLabSecret != "", r.verifyGitLab))
	r.mux.Handle("/forgejo", r.route(jobs.ForgeForgejo, cfg.ForgejoSecret != "", r.verifyForgejo))
	return r, nil
}

// Handler is the receiver's HTTP handler.
func (r *Receiver) Handler() http.Handler { return r.mux }

// Registry holds the receiver's metrics.
func (r *Receiver) Registry() *prometheus.Registry { return r.reg }

// Serve serves on ln until ctx ends, then shuts down gracefully (up to 10 s)
// and returns. Timeouts bound slow clients.
func (r *Receiver) Serve(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{
		Handler:           r.mux,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       15 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       60 * time.Second,
		MaxHeaderBytes:    32 << 10,
		ErrorLog:          slog.NewLogLogger(r.log.Handler(), slog.LevelWarn),
		BaseContext:       func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
	}
	ln = netutil.LimitListener(ln, r.cfg.MaxConns)
	r.log.Info("receiver_started", "addr", ln.Addr().String())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	r.log.Info("receiver_stopping")
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	err := srv.Shutdown(sctx)
	<-done
	return err
}

// verified is what a forge's verifier extracts from a request whose body
// passed its credential check.
type verified struct {
	event    string
	delivery string
}

// verifier checks the credential over the raw body and returns the event
// type and delivery id, or the refusal reason and status.
type verifier func(h http.Header, body []byte) (verified, string, int)

func (r *Receiver) route(f jobs.Forge, armed bool, verify verifier) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		start := time.Now()
		outcome := r.serve(f, armed, verify, w, req)
		r.received.WithLabelValues(string(f), outcome).Inc()
		r.duration.WithLabelValues(string(f)).Observe(time.Since(start).Seconds())
	})
}

func answer(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	fmt.Fprintf(w, "{\"status\":%q}\n", msg)
}

// serve answers one delivery and returns its outcome: a refusal reason, or
// stored, spooled, duplicate, ignored, inbox-full, unavailable (the
// synchronous mode: enqueued, dropped, error).
func (r *Receiver) serve(f jobs.Forge, armed bool, verify verifier, w http.ResponseWriter, req *http.Request) string {
	if outcome := screen(f, armed, w, req); outcome != "" {
		return outcome
	}
	// Nothing unsigned is read: the headers the signature needs come first.
	if reason, status := r.preverify(f, req.Header); reason != "" {
		return r.refuse(f, w, status, reason, "")
	}
	select {
	case r.inFlight <- struct{}{}:
		defer func() { <-r.inFlight }()
	default:
		w.Header().Set("Retry-After", "1")
		answer(w, http.StatusServiceUnavailable, "busy")
		r.log.Warn("receiver_busy", "forge", string(f), "inFlight", r.cfg.MaxInFlight)
		return "busy"
	}
	body, outcome := r.readBody(f, w, req)
	if outcome != "" {
		return outcome
	}
	v, reason, status := verify(req.Header, body)
	if reason != "" {
		return r.refuse(f, w, status, reason, v.delivery)
	}
	if !validDelivery(v.delivery) {
		return r.refuse(f, w, http.StatusBadRequest, forge.ReasonMissingDelivery, "")
	}
	d := inbox.Delivery{Forge: f, ID: v.delivery, Event: v.event, Body: body, Received: r.cfg.Now()}
	ev, err := inbox.Parse(d)
	if err != nil {
		return r.refuse(f, w, http.StatusBadRequest, forge.ReasonMalformed, v.delivery, "event", v.event, "err", err.Error())
	}
	if ev.Kind == "" {
		// A ping, a push, an edited comment: no trigger handles it, nothing is stored.
		r.cfg.Intake.Ignore(f, v.delivery, printableEvent(v.event))
		answer(w, http.StatusOK, "ignored")
		return "ignored"
	}
	if r.cfg.Inbox != nil {
		return r.store(f, w, req, d)
	}
	ctx, cancel := context.WithTimeout(req.Context(), handleTimeout)
	defer cancel()
	// Claimed by the body's digest: the id header is no forge's to sign.
	if outcome := r.claim(ctx, f, w, d.Key(), v.delivery); outcome != "" {
		return outcome
	}
	return r.handle(ctx, f, w, d.Key(), ev)
}

// refuse answers a refusal and reports it to the intake, so every refusal is logged alike.
func (r *Receiver) refuse(f jobs.Forge, w http.ResponseWriter, status int, reason, delivery string, attrs ...any) string {
	if !validDelivery(delivery) {
		delivery = "" // a header of an unverified sender is not logged as it came
	}
	r.cfg.Intake.Refuse(f, delivery, reason, attrs...)
	answer(w, status, reason)
	return reason
}

// screen turns away what no armed forge sends before the body is read; "" lets it on.
func screen(f jobs.Forge, armed bool, w http.ResponseWriter, req *http.Request) string {
	if !armed {
		answer(w, http.StatusNotFound, string(f)+" webhooks are not configured")
		return "not-configured"
	}
	if req.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		answer(w, http.StatusMethodNotAllowed, "method-not-allowed")
		return "method-not-allowed"
	}
	if mt, _, err := mime.ParseMediaType(req.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		answer(w, http.StatusUnsupportedMediaType, "content-type-not-json")
		return "content-type-not-json"
	}
	return ""
}

// readBody reads at most MaxBody, so an oversized delivery is refused, not held in memory.
func (r *Receiver) readBody(f jobs.Forge, w http.ResponseWriter, req *http.Request) (body []byte, outcome string) {
	if req.ContentLength > r.cfg.MaxBody {
		return nil, r.refuse(f, w, http.StatusRequestEntityTooLarge, forge.ReasonTooLarge, "", "bytes", req.ContentLength)
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, req.Body, r.cfg.MaxBody))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return nil, r.refuse(f, w, http.StatusRequestEntityTooLarge, forge.ReasonTooLarge, "", "limit", r.cfg.MaxBody)
		}
		answer(w, http.StatusBadRequest, "unreadable-body")
		return nil, "unreadable-body"
	}
	return body, ""
}

var eventRE = regexp.MustCompile(`^[A-Za-z0-9 _.-]{1,64}$`)

// printableEvent is an event header as it may be logged: the header is not
// signed, so anything else is logged as "other".
func printableEvent(s string) string {
	if eventRE.MatchString(s) {
		return s
	}
	return "other"
}

// store keeps a verified delivery in the inbox and answers where it is: 202
// stored (Valkey or the spool), 200 a duplicate of a stored one, 503 when it
// could be stored nowhere or the inbox is full.
func (r *Receiver) store(f jobs.Forge, w http.ResponseWriter, req *http.Request, d inbox.Delivery) string {
	// Not cut short by a client that hangs up: a store begun is finished.
	out, err := r.cfg.Inbox.Put(context.WithoutCancel(req.Context()), d)
	attrs := []any{"forge", f, "delivery", d.Key(), "forgeDelivery", d.ID, "event", d.Event}
	switch {
	case err != nil:
		reason := "store-failed"
		var se *inbox.StoreError
		if errors.As(err, &se) {
			reason = se.Reason()
		}
		r.log.Error("receiver_store_failed", append(attrs, "reason", reason, "err", err.Error())...)
		answer(w, http.StatusServiceUnavailable, "unavailable")
		return "unavailable"
	case out == inbox.Full:
		r.log.Error("receiver_inbox_full", attrs...)
		answer(w, http.StatusServiceUnavailable, string(inbox.Full))
		return string(inbox.Full)
	case out == inbox.Duplicate:
		r.log.Info("forge_received", append(attrs, "outcome", string(out))...)
		answer(w, http.StatusOK, "already received")
		return string(out)
	}
	r.log.Info("forge_received", append(attrs, "outcome", string(out))...)
	answer(w, http.StatusAccepted, "received")
	return string(out)
}

// claim records the delivery's key, so a body is processed once whatever
// id it comes under; "" lets a fresh one on.
func (r *Receiver) claim(ctx context.Context, f jobs.Forge, w http.ResponseWriter, delivery, forgeDelivery string) string {
	fresh, err := r.cfg.Replay.Claim(ctx, f, delivery)
	if err != nil {
		r.log.Error("receiver_replay_store_failed", "forge", f, "delivery", delivery, "err", err.Error())
		answer(w, http.StatusServiceUnavailable, "unavailable")
		return "error"
	}
	if !fresh {
		return r.refuse(f, w, http.StatusConflict, forge.ReasonReplayed, delivery, "forgeDelivery", forgeDelivery)
	}
	return ""
}

// handle hands ev to the intake and answers its outcome; undecided, the forge may redeliver.
func (r *Receiver) handle(ctx context.Context, f jobs.Forge, w http.ResponseWriter, delivery string, ev forge.Event) string {
	out, err := r.cfg.Intake.Handle(ctx, ev)
	if err != nil {
		// Not decided: let the forge's redelivery through the replay gate.
		if rerr := r.cfg.Replay.Release(context.WithoutCancel(ctx), f, delivery); rerr != nil {
			r.log.Error("receiver_replay_store_failed", "forge", f, "delivery", delivery, "err", rerr.Error())
		}
		answer(w, http.StatusServiceUnavailable, "retry-later")
		return "error"
	}
	switch out.Status {
	case forge.StatusEnqueued:
		answer(w, http.StatusAccepted, "queued")
		return out.Status
	case forge.StatusRefused:
		answer(w, http.StatusForbidden, out.Reason)
		return out.Reason
	}
	answer(w, http.StatusOK, "ignored: "+out.Reason)
	return out.Status
}

var deliveryRE = regexp.MustCompile(`^[A-Za-z0-9._-]{1,100}$`)

// validDelivery: the delivery id becomes part of a job id, so its alphabet
// is narrow (a GUID, a UUID, a number).
func validDelivery(s string) bool { return deliveryRE.MatchString(s) }

// verifyGitHub checks X-Hub-Signature-256 (HMAC-SHA256 of the raw body with
// WEBHOOK_SECRET) with go-github's validator.
func (r *Receiver) verifyGitHub(h http.Header, body []byte) (verified, string, int) {
	v := verified{event: h.Get(github.EventTypeHeader), delivery: h.Get(github.DeliveryIDHeader)}
	sig := h.Get(github.SHA256SignatureHeader)
	if sig == "" {
		return v, forge.ReasonNoSignature, http.StatusUnauthorized
	}
	if err := github.ValidateSignature(sig, body, []byte(r.cfg.GitHubSecret)); err != nil {
		return v, forge.ReasonBadSignature, http.StatusUnauthorized
	}
	if v.event == "" {
		return v, forge.ReasonMalformed, http.StatusBadRequest
	}
	return v, "", 0
}

// sha256Hex matches a hex HMAC-SHA256.
var sha256Hex = regexp.MustCompile(`^[0-9a-fA-F]{64}$`)

// preverify checks, before the body is read, the headers its signature
// check needs: present and well formed (GitHub: sha256= and 64 hex digits,
// never sha1=; Forgejo: 64 hex digits; GitLab's token mode: the token
// itself, which signs no body). An empty reason lets the body be read.
func (r *Receiver) preverify(f jobs.Forge, h http.Header) (string, int) {
	var sig string
	switch f {
	case jobs.ForgeGitHub:
		sig = h.Get(github.SHA256SignatureHeader)
		hexPart, ok := strings.CutPrefix(sig, "sha256=")
		if sig != "" && (!ok || !sha256Hex.MatchString(hexPart)) {
			return forge.ReasonBadSignature, http.StatusUnauthorized
		}
	case jobs.ForgeForgejo:
		sig = first(h, "X-Forgejo-Signature", "X-Gitea-Signature")
		if sig != "" && !sha256Hex.MatchString(sig) {
			return forge.ReasonBadSignature, http.StatusUnauthorized
		}
	case jobs.ForgeGitLab:
		if r.cfg.GitLabMode == GitLabToken {
			_, reason, status := r.verifyGitLab(h, nil)
			return reason, status
		}
		sig = h.Get("Webhook-Signature")
	}
	if sig == "" {
		return forge.ReasonNoSignature, http.StatusUnauthorized
	}
	return "", 0
}

// verifyForgejo checks X-Forgejo-Signature (or Gitea's X-Gitea-Signature):
// the hex HMAC-SHA256 of the raw body, with the Gitea SDK's validator.
func (r *Receiver) verifyForgejo(h http.Header, body []byte) (verified, string, int) {
	v := verified{event: first(h, "X-Forgejo-Event", "X-Gitea-Event"), delivery: first(h, "X-Forgejo-Delivery", "X-Gitea-Delivery")}
	sig := first(h, "X-Forgejo-Signature", "X-Gitea-Signature")
	if sig == "" {
		return v, forge.ReasonNoSignature, http.StatusUnauthorized
	}
	if ok, err := gitea.VerifyWebhookSignature(r.cfg.ForgejoSecret, sig, body); err != nil || !ok {
		return v, forge.ReasonBadSignature, http.StatusUnauthorized
	}
	if v.event == "" {
		return v, forge.ReasonMalformed, http.StatusBadRequest
	}
	return v, "", 0
}

// verifyGitLab checks the declared mode only: a delivery carrying the other
// mode's header is refused even when that header is right.
func (r *Receiver) verifyGitLab(h http.Header, body []byte) (verified, string, int) {
	v := verified{event: h.Get("X-Gitlab-Event"), delivery: first(h, "Webhook-Id", "Idempotency-Key", "X-Gitlab-Event-UUID")}
	switch r.cfg.GitLabMode {
	case GitLabToken:
		tok := h.Get("X-Gitlab-Token")
		if tok == "" {
			return v, forge.ReasonNoSignature, http.StatusUnauthorized
		}
		a, b := sha256.Sum256([]byte(tok)), sha256.Sum256([]byte(r.cfg.GitLabSecret))
		if !hmac.Equal(a[:], b[:]) {
			return v, forge.ReasonBadSignature, http.StatusUnauthorized
		}
	default:
		sigs, id, ts := h.Get("Webhook-Signature"), h.Get("Webhook-Id"), h.Get("Webhook-Timestamp")
		if sigs == "" || id == "" || ts == "" {
			return v, forge.ReasonNoSignature, http.StatusUnauthorized
		}
		mac := hmac.New(sha256.New, r.gitlabKey)
		mac.Write([]byte(id + "." + ts + "."))
		mac.Write(body)
		want := mac.Sum(nil)
		ok := false
		for _, s := range strings.Fields(sigs) {
			ver, b64, found := strings.Cut(s, ",")
			if !found || ver != "v1" {
				continue
			}
			got, err := base64.StdEncoding.DecodeString(b64)
			if err == nil && hmac.Equal(got, want) {
				ok = true
			}
		}
		if !ok {
			return v, forge.ReasonBadSignature, http.StatusUnauthorized
		}
		// The timestamp is inside the MAC: a stale one is a replay.
		sec, err := strconv.ParseInt(ts, 10, 64)
		if err != nil {
			return v, forge.ReasonMalformed, http.StatusBadRequest
		}
		if d := r.cfg.Now().Sub(time.Unix(sec, 0)); d > r.cfg.SignatureSkew || d < -r.cfg.SignatureSkew {
			return v, forge.ReasonStale, http.StatusUnauthorized
		}
	}
	if v.event == "" {
		return v, forge.ReasonMalformed, http.StatusBadRequest
	}
	if v.delivery == "" {
		return v, forge.ReasonMissingDelivery, http.StatusBadRequest
	}
	return v, "", 0
}

func first(h http.Header, names ...string) string {
	for _, n := range names {
		if v := h.Get(n); v != "" {
			return v
		}
	}
	return ""
}
