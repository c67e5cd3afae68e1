package main

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/jobs"
	"github.com/pidispatch/pidispatch/queue"
	"github.com/pidispatch/pidispatch/registry"
)

const testSecret = "It's a Secret to Everybody"

// testKey is the fleet key the tests' front-end signs with.
var testKey, _ = fleet.NewKey([]byte("the webhook front-end's test fleet key"))

type frontend struct {
	srv *httptest.Server
	db  *livetest.ValkeyDB
}

func newFrontend(t *testing.T) *frontend {
	t.Helper()
	db := livetest.Valkey(t)
	h, err := newHandler([]byte(testSecret), db.Client, testKey, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/hooks/forge", h)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return &frontend{srv: srv, db: db}
}

func sign(secret, body string) string {
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(body))
	return "sha256=" + hex.EncodeToString(mac.Sum(nil))
}

// post sends body as delivery id with the signature sig and returns the
// status and the decoded JSON answer.
func (f *frontend) post(t *testing.T, id, sig, body string) (int, map[string]string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, f.srv.URL+"/hooks/forge", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if id != "" {
		req.Header.Set("X-Delivery", id)
	}
	if sig != "" {
		req.Header.Set("X-Signature-256", sig)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out map[string]string
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("answer %q is not a JSON object of strings: %v", raw, err)
	}
	return resp.StatusCode, out
}

// job reads the job with id from queueName, or nil.
func (f *frontend) job(t *testing.T, queueName, id string) *queue.Job {
	t.Helper()
	q, err := queue.New(f.db.Client, queueName, queue.Config{})
	if err != nil {
		t.Fatal(err)
	}
	j, err := q.Get(context.Background(), id)
	if err != nil && !strings.Contains(err.Error(), "not found") {
		t.Fatal(err)
	}
	return j
}

const goodBody = `{"repo":"acme/api","ref":"main","flow":"review","task":"Review the change"}`

func TestWebhook_GoodSignatureEnqueues(t *testing.T) {
	f := newFrontend(t)
	code, out := f.post(t, "d-1", sign(testSecret, goodBody), goodBody)
	if code != http.StatusAccepted || out["jobId"] != "gh-d-1" || out["queue"] != fleet.SharedQueue {
		t.Fatalf("%d %v", code, out)
	}
	j := f.job(t, fleet.SharedQueue, "gh-d-1")
	if j == nil {
		t.Fatal("job gh-d-1 is not on the shared queue")
	}
	if !testKey.VerifyJob(fleet.SharedQueue, j.ID, j.Data, j.Signature) {
		t.Fatal("the job does not carry the fleet key's signature: every worker would refuse it")
	}
	spec, err := jobs.ParseJob(j.Data)
	if err != nil {
		t.Fatal(err)
	}
	if spec.Kind != jobs.KindForge || spec.Repo != "acme/api" || spec.Ref != "main" || spec.Flow != "review" || spec.Task != "Review the change" {
		t.Fatalf("job data %+v", spec)
	}
	ttl, err := f.db.Client.TTL(context.Background(), deliveryKey("d-1")).Result()
	if err != nil || ttl <= 23*time.Hour || ttl > replayWindow {
		t.Fatalf("delivery remembered for %v (err %v), want about 24h", ttl, err)
	}
}

// A delivery that needs a secret profile goes to the queue of a live host
// that has it, not to the shared queue.
func TestWebhook_RoutesToACapableHost(t *testing.T) {
	f := newFrontend(t)
	ctx := context.Background()
	for name, caps := range map[string]string{"prod-1": "s:prod", "dev-1": "s:dev"} {
		reg, err := registry.New(f.db.Client, name, registry.Facts{
			Routes: registry.Value(true), Caps: registry.Value(caps),
		}, registry.Config{FleetKey: testKey})
		if err != nil {
			t.Fatal(err)
		}
		if err := reg.Start(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = reg.Close(context.Background()) })
	}
	body := `{"repo":"acme/api","flow":"deploy","task":"Ship it","secretsProfile":"prod"}`
	code, out := f.post(t, "d-prod", sign(testSecret, body), body)
	want := fleet.HostQueueName("prod-1")
	if code != http.StatusAccepted || out["queue"] != want {
		t.Fatalf("%d %v, want the queue %s", code, out, want)
	}
	if f.job(t, want, "gh-d-prod") == nil {
		t.Fatalf("job is not on %s", want)
	}
}

func TestWebhook_BadSignatureIs401(t *testing.T) {
	f := newFrontend(t)
	for name, sig := range map[string]string{
		"WrongSecret": sign("guess", goodBody),
		"OtherBody":   sign(testSecret, goodBody+" "),
		"NoPrefix":    strings.TrimPrefix(sign(testSecret, goodBody), "sha256="),
		"NotHex":      "sha256=zz",
		"Missing":     "",
		"Truncated":   sign(testSecret, goodBody)[:20],
	} {
		t.Run(name, func(t *testing.T) {
			code, out := f.post(t, "d-401", sig, goodBody)
			if code != http.StatusUnauthorized || out["error"] != "bad signature" {
				t.Fatalf("%d %v", code, out)
			}
		})
	}
	if f.job(t, fleet.SharedQueue, "gh-d-401") != nil {
		t.Fatal("an unsigned delivery was enqueued")
	}
	// A refused delivery is not remembered: the genuine one still gets in.
	if code, out := f.post(t, "d-401", sign(testSecret, goodBody), goodBody); code != http.StatusAccepted {
		t.Fatalf("genuine delivery after forged ones: %d %v", code, out)
	}
}

func TestWebhook_ReplayIs409(t *testing.T) {
	f := newFrontend(t)
	sig := sign(testSecret, goodBody)
	if code, out := f.post(t, "d-2", sig, goodBody); code != http.StatusAccepted {
		t.Fatalf("first: %d %v", code, out)
	}
	code, out := f.post(t, "d-2", sig, goodBody)
	if code != http.StatusConflict || out["delivery"] != "d-2" {
		t.Fatalf("replay: %d %v", code, out)
	}
	// Past the replay window the job id still deduplicates.
	if err := f.db.Client.Del(context.Background(), deliveryKey("d-2")).Err(); err != nil {
		t.Fatal(err)
	}
	code, out = f.post(t, "d-2", sig, goodBody)
	if code != http.StatusConflict || out["error"] != "duplicate" || out["jobId"] != "gh-d-2" {
		t.Fatalf("after the window: %d %v", code, out)
	}
}

func TestWebhook_BadRequestsAre400(t *testing.T) {
	f := newFrontend(t)
	bodies := map[string]string{
		"NotJSON":      `repo=acme/api`,
		"UnknownField": `{"repo":"acme/api","flow":"review","task":"x","cost":1}`,
		"TwoObjects":   goodBody + goodBody,
		"NoRepo":       `{"flow":"review","task":"x"}`,
		"BadRepo":      `{"repo":"../etc","flow":"review","task":"x"}`,
		"NoTask":       `{"repo":"acme/api","flow":"review"}`,
		"NULInTask":    `{"repo":"acme/api","flow":"review","task":"a\u0000b"}`,
		"Empty":        ``,
	}
	for name, body := range bodies {
		t.Run(name, func(t *testing.T) {
			code, out := f.post(t, "d-"+name, sign(testSecret, body), body)
			if code != http.StatusBadRequest || out["error"] == "" {
				t.Fatalf("%d %v", code, out)
			}
			if n, _ := f.db.Client.Exists(context.Background(), deliveryKey("d-"+name)).Result(); n != 0 {
				t.Fatal("a refused body used up its delivery id")
			}
		})
	}
	for name, id := range map[string]string{"MissingDelivery": "", "BadDelivery": "a b", "ColonDelivery": "a:b"} {
		t.Run(name, func(t *testing.T) {
			code, out := f.post(t, id, sign(testSecret, goodBody), goodBody)
			if code != http.StatusBadRequest || !strings.Contains(out["error"], "X-Delivery") {
				t.Fatalf("%d %v", code, out)
			}
		})
	}
	keys, err := f.db.Client.Keys(context.Background(), "*").Result()
	if err != nil || len(keys) != 0 {
		t.Fatalf("bad requests left keys %v (err %v)", keys, err)
	}
}

func TestWebhook_MethodAndSize(t *testing.T) {
	f := newFrontend(t)
	resp, err := http.Get(f.srv.URL + "/hooks/forge")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("GET: %d", resp.StatusCode)
	}
	huge := `{"repo":"acme/api","flow":"review","task":"` + strings.Repeat("x", maxBody) + `"}`
	code, _ := f.post(t, "d-huge", sign(testSecret, huge), huge)
	if code != http.StatusRequestEntityTooLarge {
		t.Fatalf("huge body: %d", code)
	}
}

func TestRun_NeedsASecret(t *testing.T) {
	err := run(context.Background(), func(string) string { return "" }, io.Discard, "127.0.0.1:0")
	if err == nil || !strings.Contains(err.Error(), "WEBHOOK_SECRET") {
		t.Fatalf("err = %v", err)
	}
}

// Without the fleet key the front-end does not start: every job it added
// would be refused job-unsigned.
func TestRun_NeedsAFleetKey(t *testing.T) {
	vars := map[string]string{"WEBHOOK_SECRET": testSecret}
	err := run(context.Background(), func(k string) string { return vars[k] }, io.Discard, "127.0.0.1:0")
	if err == nil || !strings.Contains(err.Error(), "PI_FLEET_KEY_FILE") {
		t.Fatalf("err = %v", err)
	}
}

// run serves the endpoint on its address until its context ends, then
// shuts down and returns nil.
func TestRun_ServesAndStops(t *testing.T) {
	db := livetest.Valkey(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var logs bytes.Buffer
	done := make(chan error, 1)
	keyFile := filepath.Join(t.TempDir(), "fleet.key")
	if err := os.WriteFile(keyFile, []byte("the webhook front-end's test fleet key"), 0o600); err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{"WEBHOOK_SECRET": testSecret, "VALKEY_URL": db.URL, "PI_FLEET_KEY_FILE": keyFile}
	go func() { done <- run(ctx, func(k string) string { return vars[k] }, &logs, addr) }()

	var resp *http.Response
	for deadline := time.Now().Add(10 * time.Second); ; {
		req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/hooks/forge", strings.NewReader(goodBody))
		req.Header.Set("X-Delivery", "d-run")
		req.Header.Set("X-Signature-256", sign(testSecret, goodBody))
		if resp, err = http.DefaultClient.Do(req); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server never answered: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("status %d", resp.StatusCode)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("run did not stop")
	}
	for _, want := range []string{"webhook_listening", "webhook_enqueued"} {
		if !strings.Contains(logs.String(), want) {
			t.Fatalf("no %s in the logs: %s", want, logs.String())
		}
	}
	if _, err := http.Post("http://"+addr+"/hooks/forge", "application/json", strings.NewReader("{}")); err == nil {
		t.Fatal("the server still answers after run returned")
	}
}
