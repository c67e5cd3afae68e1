package main

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pidispatch/pidispatch/forge/inbox"
	"github.com/pidispatch/pidispatch/internal/testkit/logtest"
	"github.com/pidispatch/pidispatch/jobs"

	"github.com/pidispatch/pidispatch/forge/forgetest"
	fixtures "github.com/pidispatch/pidispatch/internal/testkit/forgefixtures"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/queue"
)

// GITHUB_AUTH_SOURCE=app end to end against the GitHub double (which checks
// the App's JWT): the receiver finds the App's bot user at boot, looks a
// commenter's permission up with an installation token restricted to the one
// repository and to reading it, enqueues the comment, and ignores the same
// comment written by its own bot.
func TestReceiveAppMode(t *testing.T) {
	db := livetest.Valkey(t)
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	keyPath := filepath.Join(dir, "app.pem")
	if err := os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}), 0o600); err != nil {
		t.Fatal(err)
	}
	git := forgetest.StartGitServer(t, nil)
	gh := forgetest.StartGitHub(t, git, 4242, &key.PublicKey, time.Hour)
	gh.AddRepo("Codertocat/Hello-World", "main")
	gh.SetPermission("Codertocat/Hello-World", "Codertocat", "write")

	triggers := filepath.Join(dir, "triggers.json")
	if err := os.WriteFile(triggers, []byte(`{"triggers": [{"on": {"type": "comment", "id": "c", "repos": ["Codertocat/Hello-World"], "phrase": "totally right"},
	  "run": {"kind": "github", "flow": "fix"}}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	port := freeTCPPort(t)
	vars := map[string]string{
		"PI_ENV_FILE": "/dev/null", "VALKEY_URL": db.URL, "PI_UNSIGNED_QUEUES": "*", "PI_TRIGGERS_FILE": triggers,
		"WEBHOOK_SECRET": "app-secret", "GITHUB_APP_ID": "4242", "GITHUB_APP_INSTALLATION_ID": "7",
		"GITHUB_APP_PRIVATE_KEY_PATH": keyPath, "GITHUB_API_URL": gh.URL,
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
	deadline := time.Now().Add(15 * time.Second)
	for {
		resp, err := http.Get(base + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		select {
		case code := <-done:
			t.Fatalf("receive exited %d:\n%s", code, stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("receiver did not come up:\n%s", stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !strings.Contains(stderr.String(), `"msg":"self_identity"`) || !strings.Contains(stderr.String(), `"id":`+strconv.Itoa(forgetest.AppBotID)) {
		t.Fatalf("no self_identity line with the App's bot id:\n%s", stderr.String())
	}

	post := func(delivery string, body []byte) int {
		t.Helper()
		return fixtures.PostGitHub(t, base+"/github", "issue_comment", delivery, "app-secret", body)
	}
	body := fixtures.GitHub(t, "issue_comment", "created", 0)
	if got := post("app-d1", body); got != http.StatusAccepted {
		t.Fatalf("a writer's comment: got %d\n%s", got, stderr.String())
	}
	q, err := queue.New(db.Client, "pi-jobs", queue.Config{})
	if err != nil {
		t.Fatal(err)
	}
	waitForJob(t, q, "gh-"+inbox.Delivery{Forge: jobs.ForgeGitHub, Body: body}.Key(), &stderr)
	mints := gh.Mints()
	if len(mints) == 0 {
		t.Fatal("no installation token was minted")
	}
	// Reading tokens, and one token for the queued status comment: issues
	// and pull requests, never the repository's contents, revoked at once.
	var statusMints int
	for _, m := range mints {
		if len(m.Repositories) != 1 || m.Repositories[0] != "Hello-World" {
			t.Errorf("token not restricted to the one repository: %v", m.Repositories)
		}
		p := m.Permissions
		switch {
		case p != nil && p.GetIssues() == "write":
			statusMints++
			if p.GetMetadata() != "read" || p.GetContents() != "" || p.GetPullRequests() != "write" || p.GetAdministration() != "" || p.GetWorkflows() != "" {
				t.Errorf("the status comment's token asks more than issues and pull requests: %+v", p)
			}
		case p == nil || p.GetMetadata() != "read" || p.GetContents() != "" || p.GetIssues() != "read":
			t.Errorf("token asks more than reading: %+v", p)
		}
	}
	if statusMints != 1 {
		t.Errorf("%d tokens minted for the queued status comment, want 1", statusMints)
	}
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(15 * time.Second); !ok(); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s:\n%s", what, stderr.String())
			}
		}
	}
	waitFor("the status comment's token revoked", func() bool { return len(gh.Revoked()) == statusMints })
	if c := gh.Comments("Codertocat/Hello-World", 1); len(c) != 1 || !strings.Contains(c[0], "queued, waiting for a worker") {
		t.Fatalf("status comments %q, want one saying queued", c)
	}

	// The same comment by the App's own bot starts nothing.
	var ev map[string]any
	if err := json.Unmarshal(body, &ev); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"sender"} {
		u := ev[k].(map[string]any)
		u["id"], u["login"], u["type"] = forgetest.AppBotID, forgetest.AppSlug+"[bot]", "Bot"
	}
	c := ev["comment"].(map[string]any)
	c["user"] = ev["sender"]
	botBody, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	if got := post("app-d2", botBody); got != http.StatusAccepted {
		t.Fatalf("the bot's own comment, verified: got %d\n%s", got, stderr.String())
	}
	refused := waitForLog(t, &stderr, "forge_refused", 1)
	botKey := inbox.Delivery{Forge: jobs.ForgeGitHub, Body: botBody}.Key()
	if refused[0]["reason"] != "self" || refused[0]["delivery"] != botKey {
		t.Fatalf("the bot's comment was not refused as the receiver's own: %v\n%s", refused, stderr.String())
	}
	if _, err := q.Get(context.Background(), "gh-"+botKey); err == nil {
		t.Fatal("the bot's own comment became a job")
	}
	if c := gh.Comments("Codertocat/Hello-World", 1); len(c) != 1 {
		t.Fatalf("the refused comment got a reply: %q", c)
	}
	out := stderr.String() + stdout.String()
	for _, tok := range gh.Tokens() {
		if strings.Contains(out, tok) {
			t.Fatal("an installation token was logged")
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
