package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pidispatch/pidispatch/forge/inbox"
	"github.com/pidispatch/pidispatch/internal/testkit/logtest"

	fixtures "github.com/pidispatch/pidispatch/internal/testkit/forgefixtures"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/jobs"
	"github.com/pidispatch/pidispatch/queue"
)

func freeTCPPort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// pi-dispatch receive as a whole: boot (own user id, triggers file), a
// signed delivery queued in Valkey, a live reload of the triggers file, and
// a clean stop when its context ends.
func TestReceiveServesUntilStopped(t *testing.T) {
	db := livetest.Valkey(t)
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer ghp_live" {
			http.Error(w, `{"message":"Bad credentials"}`, http.StatusUnauthorized)
			return
		}
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
	defer api.Close()

	dir := t.TempDir()
	triggers := filepath.Join(dir, "triggers.json")
	write := func(phrase string) {
		t.Helper()
		tmp := triggers + ".tmp"
		body := `{"triggers": [{"on": {"type": "comment", "id": "c", "repos": ["Codertocat/Hello-World"], "phrase": "` + phrase + `"},
		  "run": {"kind": "github", "flow": "fix"}}]}`
		if err := os.WriteFile(tmp, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, triggers); err != nil {
			t.Fatal(err)
		}
	}
	write("no such phrase")
	port := freeTCPPort(t)
	vars := map[string]string{
		"PI_ENV_FILE": "/dev/null", "VALKEY_URL": db.URL, "PI_UNSIGNED_QUEUES": "*", "PI_TRIGGERS_FILE": triggers,
		"WEBHOOK_SECRET": "live-secret", "GITHUB_PAT": "ghp_live", "GITHUB_API_URL": api.URL,
		"RECEIVER_BIND": "127.0.0.1", "RECEIVER_PORT": strconv.Itoa(port), "RECEIVER_SPOOL_DIR": filepath.Join(dir, "spool"),
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr logtest.Buffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"receive"}, func(k string) string { return vars[k] }, &stdout, &stderr)
	}()
	base := "http://127.0.0.1:" + strconv.Itoa(port)
	waitUp := func() bool {
		resp, err := http.Get(base + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}
	deadline := time.Now().Add(15 * time.Second)
	for !waitUp() {
		if time.Now().After(deadline) {
			t.Fatalf("receiver did not come up:\n%s", stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !strings.Contains(stderr.String(), `"msg":"self_identity"`) || !strings.Contains(stderr.String(), `"id":999`) {
		t.Fatalf("no self_identity line:\n%s", stderr.String())
	}

	body := fixtures.GitHub(t, "issue_comment", "created", 0)
	post := func(delivery string, body []byte) int {
		return fixtures.PostGitHub(t, base+"/github", "issue_comment", delivery, "live-secret", body)
	}
	// Stored, then answered; no trigger matches it yet, so it is dropped.
	if got := post("live-d1", body); got != http.StatusAccepted {
		t.Fatalf("a verified delivery: got %d\n%s", got, stderr.String())
	}
	waitForLog(t, &stderr, "forge_dropped", 1)
	// The file changes: the receiver reloads it.
	write("totally right")
	deadline = time.Now().Add(15 * time.Second)
	for !strings.Contains(stderr.String(), `"msg":"triggers_reloaded"`) {
		if time.Now().After(deadline) {
			t.Fatalf("no reload:\n%s", stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	// A new comment (the same body again would be the same delivery).
	body = fixtures.Edit(t, body, func(m map[string]any) { m["comment"].(map[string]any)["id"] = 2 })
	if got := post("live-d2", body); got != http.StatusAccepted {
		t.Fatalf("after the reload: got %d\n%s", got, stderr.String())
	}
	q, err := queue.New(db.Client, "pi-jobs", queue.Config{})
	if err != nil {
		t.Fatal(err)
	}
	key := inbox.Delivery{Forge: jobs.ForgeGitHub, Body: body}.Key()
	j := waitForJob(t, q, "gh-"+key, &stderr)
	got, err := jobs.ParseJob(j.Data)
	if err != nil {
		t.Fatal(err)
	}
	if got.Repo != "Codertocat/Hello-World" || got.DeliveryID != key || got.Trigger != "c" || got.Number != 1 {
		t.Fatalf("job %+v", got)
	}
	for _, secret := range []string{"live-secret", "ghp_live"} {
		if strings.Contains(stderr.String()+stdout.String(), secret) || strings.Contains(string(j.Data), secret) {
			t.Fatalf("%s leaked", secret)
		}
	}
	cancel()
	select {
	case code := <-done:
		if code != exitOK {
			t.Fatalf("exit %d:\n%s", code, stderr.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("receive did not stop with its context")
	}
}

// waitForJob waits until the job id is in q: the inbox enqueues it after
// the delivery was answered.
func waitForJob(t *testing.T, q *queue.Queue, id string, logs *logtest.Buffer) *queue.Job {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		j, err := q.Get(context.Background(), id)
		if err == nil {
			return j
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s not in Valkey: %v\n%s", id, err, logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitForLog waits until logs hold at least n lines whose msg is msg.
func waitForLog(t *testing.T, logs *logtest.Buffer, msg string, n int) []map[string]any {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		if lines := logLines(t, logs.String(), msg); len(lines) >= n {
			return lines
		}
		if time.Now().After(deadline) {
			t.Fatalf("fewer than %d %s lines:\n%s", n, msg, logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}
