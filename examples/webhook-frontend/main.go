// Command webhook-frontend is a custom enqueue front-end: an HTTP endpoint
// that receives signed forge deliveries and enqueues each as a pidispatch
// forge job, routed to a host that can serve what it needs.
//
//	WEBHOOK_SECRET=s3cret PI_FLEET_KEY_FILE=/srv/pi/fleet.key VALKEY_URL=redis://127.0.0.1:6379/0 go run ./examples/webhook-frontend -addr :8080
//
//	body='{"repo":"acme/api","ref":"main","flow":"review","task":"Review the change"}'
//	sig=$(printf %s "$body" | openssl dgst -sha256 -hmac s3cret -hex | sed 's/.* //')
//	curl -i localhost:8080/hooks/forge -H "X-Delivery: d-1" -H "X-Signature-256: sha256=$sig" -d "$body"
//
// POST /hooks/forge answers 202 with the job id and the queue it went to,
// 401 when the X-Signature-256 HMAC does not match, 400 for a bad delivery id
// or body, 409 for a delivery seen before, 503 when Valkey cannot take it.
// Every job it adds is signed with the fleet key (PI_FLEET_KEY_FILE, the
// file pi-dispatch init writes): workers refuse a job the key did not sign.
// It uses only the public packages (enqueue, fleet, jobs, valkey).
package main

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"regexp"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pidispatch/pidispatch/enqueue"
	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/jobs"
	"github.com/pidispatch/pidispatch/valkey"
)

const (
	// maxBody bounds a delivery: a forge event, not an upload.
	maxBody = 1 << 20
	// replayWindow is how long a delivery id is remembered.
	replayWindow = 24 * time.Hour
	// valkeyTimeout bounds each request's Valkey work.
	valkeyTimeout = 3 * time.Second
)

// deliveryRE is the shape of an acceptable delivery id (a GitHub delivery is
// a GUID); the job id is "gh-" + it.
var deliveryRE = regexp.MustCompile(`^[A-Za-z0-9._-]{1,128}$`)

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "address to listen on")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Getenv, os.Stderr, *addr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "webhook-frontend:", err)
		os.Exit(1)
	}
}

// run serves the endpoint on addr until ctx ends.
func run(ctx context.Context, getenv func(string) string, stderr io.Writer, addr string) error {
	secret := getenv("WEBHOOK_SECRET")
	if secret == "" {
		return errors.New("WEBHOOK_SECRET is not set: it is the shared secret deliveries are signed with")
	}
	keyFile := getenv("PI_FLEET_KEY_FILE")
	if keyFile == "" {
		return errors.New("PI_FLEET_KEY_FILE is not set: it names the fleet key jobs are signed with (pi-dispatch init writes one); workers refuse unsigned jobs")
	}
	key, err := fleet.LoadKey(keyFile)
	if err != nil {
		return fmt.Errorf("PI_FLEET_KEY_FILE=%s: %w", keyFile, err)
	}
	rawURL := getenv("VALKEY_URL")
	if rawURL == "" {
		rawURL = "redis://127.0.0.1:6379" // the worker's default
	}
	rc, err := valkey.NewClient(rawURL, valkey.Options{Password: getenv("VALKEY_PASSWORD")})
	if err != nil {
		return fmt.Errorf("VALKEY_URL: %w", err)
	}
	defer rc.Close()
	logger := slog.New(slog.NewJSONHandler(stderr, nil)).With("service", "webhook-frontend")
	h, err := newHandler([]byte(secret), rc, key, logger)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("/hooks/forge", h)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	logger.Info("webhook_listening", "addr", ln.Addr().String())
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = srv.Shutdown(sctx)
	<-errc
	return err
}

// handler verifies, de-duplicates and enqueues forge deliveries.
type handler struct {
	secret []byte
	valkey redis.UniversalClient
	router *enqueue.Router
	log    *slog.Logger
}

// newHandler returns the POST /hooks/forge handler. The router reads the
// host registry (cached 5 s) to send a job that needs a secret or wait
// profile to a host that has it (a host whose registry row the key signed);
// anything else goes to the shared queue. Each job is signed with key.
func newHandler(secret []byte, rc redis.UniversalClient, key fleet.Key, logger *slog.Logger) (*handler, error) {
	if len(secret) == 0 {
		return nil, errors.New("empty webhook secret")
	}
	p, err := enqueue.NewProducer(rc, enqueue.ProducerConfig{Logger: logger, FleetKey: key})
	if err != nil {
		return nil, err
	}
	return &handler{secret: secret, valkey: rc, router: enqueue.NewRouter(p, enqueue.RouterConfig{}), log: logger}, nil
}

// delivery is the body this front-end accepts.
type delivery struct {
	Repo           string `json:"repo"`
	Ref            string `json:"ref"`
	Flow           string `json:"flow"`
	Task           string `json:"task"`
	SecretsProfile string `json:"secretsProfile"`
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		reply(w, http.StatusMethodNotAllowed, map[string]string{"error": "POST only"})
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		reply(w, http.StatusRequestEntityTooLarge, map[string]string{"error": "body too large or unreadable"})
		return
	}
	// Nothing of an unauthenticated request is parsed or stored.
	if !h.signed(body, r.Header.Get("X-Signature-256")) {
		h.log.Warn("webhook_bad_signature", "remote", r.RemoteAddr)
		reply(w, http.StatusUnauthorized, map[string]string{"error": "bad signature"})
		return
	}
	id := r.Header.Get("X-Delivery")
	if !deliveryRE.MatchString(id) {
		reply(w, http.StatusBadRequest, map[string]string{"error": "X-Delivery must be 1-128 characters of [A-Za-z0-9._-]"})
		return
	}
	var d delivery
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&d); err != nil || dec.More() {
		reply(w, http.StatusBadRequest, map[string]string{"error": "body must be one JSON object with repo, ref, flow, task, secretsProfile"})
		return
	}
	job := jobs.Job{Kind: jobs.KindForge, Repo: d.Repo, Ref: d.Ref, Flow: d.Flow, Task: d.Task, SecretsProfile: d.SecretsProfile}
	if err := job.Validate(); err != nil {
		reply(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		return
	}

	ctx, cancel := context.WithTimeout(r.Context(), valkeyTimeout)
	defer cancel()
	// Remember the delivery first: two copies racing in get one 202 between them.
	fresh, err := h.valkey.SetNX(ctx, deliveryKey(id), time.Now().UTC().Format(time.RFC3339), replayWindow).Result()
	if err != nil {
		h.log.Error("webhook_valkey_failed", "delivery", id, "err", err)
		reply(w, http.StatusServiceUnavailable, map[string]string{"error": "queue unavailable; redeliver later"})
		return
	}
	if !fresh {
		reply(w, http.StatusConflict, map[string]string{"error": "delivery already received", "delivery": id})
		return
	}
	got, err := h.router.EnqueueForge(ctx, enqueue.ForgeDelivery{JobID: "gh-" + id, Job: job})
	if err != nil {
		// Forget the delivery so the forge's redelivery is accepted.
		_ = h.valkey.Del(context.WithoutCancel(ctx), deliveryKey(id)).Err()
		h.log.Error("webhook_enqueue_failed", "delivery", id, "err", err)
		reply(w, http.StatusServiceUnavailable, map[string]string{"error": "queue unavailable; redeliver later"})
		return
	}
	if !got.Added {
		// The replay window passed, but the job id still names the job.
		reply(w, http.StatusConflict, map[string]string{"error": "duplicate", "jobId": got.JobID, "queue": got.Queue})
		return
	}
	h.log.Info("webhook_enqueued", "delivery", id, "jobId", got.JobID, "queue", got.Queue)
	reply(w, http.StatusAccepted, map[string]string{"jobId": got.JobID, "queue": got.Queue})
}

// signed reports whether header is "sha256=" + the hex HMAC-SHA256 of body
// under the secret, compared in constant time.
func (h *handler) signed(body []byte, header string) bool {
	given, ok := strings.CutPrefix(header, "sha256=")
	if !ok {
		return false
	}
	sig, err := hex.DecodeString(given)
	if err != nil {
		return false
	}
	mac := hmac.New(sha256.New, h.secret)
	mac.Write(body)
	return hmac.Equal(sig, mac.Sum(nil))
}

func reply(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}
