package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pidispatch/pidispatch/forge/forgetest"
	"github.com/pidispatch/pidispatch/forge/inbox"
	fixtures "github.com/pidispatch/pidispatch/internal/testkit/forgefixtures"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/internal/testkit/logtest"
	"github.com/pidispatch/pidispatch/jobs"
	"github.com/pidispatch/pidispatch/queue"
)

// receiving is a `pi-dispatch receive` running in the test.
type receiving struct {
	base   string
	stderr *logtest.Buffer
	cancel context.CancelFunc
	done   chan int
}

// startReceive runs `pi-dispatch receive` with vars (a free port added) and
// waits until it serves.
func startReceive(t *testing.T, vars map[string]string) *receiving {
	t.Helper()
	port := freeTCPPort(t)
	vars["RECEIVER_BIND"], vars["RECEIVER_PORT"] = "127.0.0.1", strconv.Itoa(port)
	ctx, cancel := context.WithCancel(context.Background())
	r := &receiving{base: "http://127.0.0.1:" + strconv.Itoa(port), stderr: &logtest.Buffer{}, cancel: cancel, done: make(chan int, 1)}
	var stdout logtest.Buffer
	go func() {
		r.done <- run(ctx, []string{"receive"}, func(k string) string { return vars[k] }, &stdout, r.stderr)
	}()
	t.Cleanup(func() { r.stop(t) })
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(r.base + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return r
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("receiver did not come up:\n%s", r.stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (r *receiving) stop(t *testing.T) {
	t.Helper()
	if r.cancel == nil {
		return
	}
	r.cancel()
	r.cancel = nil
	select {
	case code := <-r.done:
		if code != exitOK {
			t.Errorf("exit %d:\n%s", code, r.stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Error("receive did not stop with its context")
	}
}

func (r *receiving) metric(t *testing.T, line string) bool {
	t.Helper()
	resp, err := http.Get(r.base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	text, _ := io.ReadAll(resp.Body)
	return strings.Contains(string(text), line)
}

func permissionAPI(t *testing.T) *httptest.Server {
	t.Helper()
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/user":
			fmt.Fprint(w, `{"id":999,"login":"pi-bot"}`)
		case "/repos/Codertocat/Hello-World/collaborators/Codertocat/permission":
			fmt.Fprint(w, `{"permission":"write","role_name":"write"}`)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(api.Close)
	return api
}

// Valkey goes down for longer than a forge waits for an answer: a signed
// delivery is still answered 202 within the bound, from the spool, and a
// second delivery of its id 200; nothing is decided while Valkey is down.
// Once Valkey is back (empty: the server keeps nothing), the spool moves
// into it and the delivery becomes one job.
func TestReceiveValkeyOutageLosesNothing(t *testing.T) {
	srv := livetest.StartServer(t)
	api := permissionAPI(t)
	dir := t.TempDir()
	triggers := filepath.Join(dir, "triggers.json")
	if err := os.WriteFile(triggers, []byte(`{"triggers": [{"on": {"type": "comment", "id": "c", "repos": ["Codertocat/Hello-World"], "phrase": "fixed"},
	  "run": {"kind": "github", "flow": "fix"}}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	r := startReceive(t, map[string]string{
		"PI_ENV_FILE": "/dev/null", "VALKEY_URL": srv.URL(), "PI_UNSIGNED_QUEUES": "*", "PI_TRIGGERS_FILE": triggers,
		"WEBHOOK_SECRET": "outage-secret", "GITHUB_PAT": "ghp_outage", "GITHUB_API_URL": api.URL,
		"RECEIVER_SPOOL_DIR": filepath.Join(dir, "spool"),
	})

	srv.Stop()
	body := fixtures.GitHub(t, "issue_comment", "created", 0)
	begin := time.Now()
	if got := fixtures.PostGitHub(t, r.base+"/github", "issue_comment", "outage-1", "outage-secret", body); got != http.StatusAccepted {
		t.Fatalf("with Valkey down: got %d\n%s", got, r.stderr.String())
	}
	if took := time.Since(begin); took > 2*time.Second {
		t.Fatalf("answered after %s, over the 2 s bound", took)
	}
	if got := fixtures.PostGitHub(t, r.base+"/github", "issue_comment", "outage-1", "outage-secret", body); got != http.StatusOK {
		t.Fatalf("the forge's second delivery of the id: got %d", got)
	}
	if !r.metric(t, "pidispatch_receiver_spool_files 1") {
		t.Fatalf("the spool does not hold the one delivery:\n%s", r.stderr.String())
	}
	time.Sleep(time.Second) // down longer than the answer took; nothing may be decided meanwhile
	if lines := logLines(t, r.stderr.String(), "forge_enqueued"); len(lines) != 0 {
		t.Fatalf("enqueued with Valkey down: %v", lines)
	}

	srv.Start()
	q, err := queue.New(srv.Client(), "pi-jobs", queue.Config{})
	if err != nil {
		t.Fatal(err)
	}
	key := inbox.Delivery{Forge: jobs.ForgeGitHub, Body: body}.Key() // the job is named after the signed body
	waitForJob(t, q, "gh-"+key, r.stderr)
	waitForLog(t, r.stderr, "receiver_spool_drained", 1)
	ids, err := q.PendingIDs(context.Background(), 100)
	if err != nil || len(ids) != 1 || ids[0] != "gh-"+key {
		t.Fatalf("pending %v, %v: want exactly gh-%s", ids, err, key)
	}
	if enq := logLines(t, r.stderr.String(), "forge_enqueued"); len(enq) != 1 {
		t.Fatalf("enqueued %d times: %v", len(enq), enq)
	}
	deadline := time.Now().Add(20 * time.Second)
	for !r.metric(t, "pidispatch_receiver_spool_files 0") || srv.Client().Exists(context.Background(), "inbox:{github}:d:"+key).Val() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the spool or the inbox still holds the delivery:\n%s", r.stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	entries, err := os.ReadDir(filepath.Join(dir, "spool"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() != ".lock" {
			t.Errorf("left in the spool: %s", e.Name())
		}
	}
}

// A real Gitea delivers a signed comment webhook while the receiver's
// Valkey is down for longer than Gitea's delivery timeout (5 s): Gitea is
// answered, does not deliver again, and the comment still becomes one job
// once Valkey is back.
func TestReceiveGiteaWebhookDuringAValkeyOutage(t *testing.T) {
	srv := livetest.StartServer(t)
	g := forgetest.StartGitea(t)
	bot := g.CreateUser(t, "pi-bot", true)
	g.API(t, "", http.MethodPost, "/orgs", map[string]any{"username": "acme", "visibility": "public"})
	g.API(t, "", http.MethodPost, "/orgs/acme/repos", map[string]any{"name": "widgets", "auto_init": true})
	var issue struct {
		Number int `json:"number"`
	}
	if err := json.Unmarshal(g.API(t, "", http.MethodPost, "/repos/acme/widgets/issues",
		map[string]any{"title": "The widget wobbles"}), &issue); err != nil || issue.Number == 0 {
		t.Fatalf("issue: %v", err)
	}
	const secret = "gitea-outage-secret"
	dir := t.TempDir()
	triggers := filepath.Join(dir, "triggers.json")
	if err := os.WriteFile(triggers, []byte(`{"triggers": [{"on": {"type": "comment", "id": "fix", "repos": ["acme/widgets"], "phrase": "/pi fix"},
	  "run": {"kind": "forgejo", "flow": "fix"}}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	r := startReceive(t, map[string]string{
		"PI_ENV_FILE": "/dev/null", "VALKEY_URL": srv.URL(), "PI_UNSIGNED_QUEUES": "*", "PI_TRIGGERS_FILE": triggers,
		"FORGEJO_URL": g.URL, "FORGEJO_TOKEN": bot.Token, "FORGEJO_WEBHOOK_SECRET": secret,
		"RECEIVER_SPOOL_DIR": filepath.Join(dir, "spool"),
	})
	g.API(t, "", http.MethodPost, "/repos/acme/widgets/hooks", map[string]any{
		"type": "gitea", "active": true, "events": []string{"issue_comment"},
		"config": map[string]string{"url": r.base + "/forgejo", "content_type": "json", "secret": secret},
	})

	srv.Stop()
	g.API(t, "", http.MethodPost, fmt.Sprintf("/repos/acme/widgets/issues/%d/comments", issue.Number), map[string]any{"body": "/pi fix the wobble"})
	received := waitForLog(t, r.stderr, "forge_received", 1)
	if received[0]["outcome"] != "spooled" {
		t.Fatalf("received %v, want spooled", received)
	}
	delivery, _ := received[0]["delivery"].(string)
	time.Sleep(6 * time.Second) // past Gitea's 5 s delivery timeout
	if got := logLines(t, r.stderr.String(), "forge_received"); len(got) != 1 {
		t.Fatalf("Gitea delivered %d times: %v", len(got), got)
	}

	srv.Start()
	q, err := queue.New(srv.Client(), "pi-jobs", queue.Config{})
	if err != nil {
		t.Fatal(err)
	}
	waitForJob(t, q, "fj-"+delivery, r.stderr)
	ids, err := q.PendingIDs(context.Background(), 100)
	if err != nil || len(ids) != 1 {
		t.Fatalf("pending %v, %v: want one job", ids, err)
	}
	if enq := logLines(t, r.stderr.String(), "forge_enqueued"); len(enq) != 1 {
		t.Fatalf("enqueued %d times: %v", len(enq), enq)
	}
}
