package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pidispatch/pidispatch/internal/testkit/logtest"

	"github.com/pidispatch/pidispatch/forge/forgetest"
	"github.com/pidispatch/pidispatch/forge/token"
	"github.com/pidispatch/pidispatch/forge/workspace"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/jobs"
	"github.com/pidispatch/pidispatch/queue"
)

// logLines are the JSON log lines in s whose msg is msg.
func logLines(t *testing.T, s, msg string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(s, "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) == nil && m["msg"] == msg {
			out = append(out, m)
		}
	}
	return out
}

// A real Gitea delivers signed comment webhooks to pi-dispatch receive: the
// receiver verifies them, asks that Gitea for each commenter's permission,
// refuses the comment of a user without write access (a log line, nothing
// enqueued) and queues one job, named by Gitea's delivery id, for the
// comment of the repository's owner.
func TestReceiveGiteaWebhookLive(t *testing.T) {
	db := livetest.Valkey(t)
	g := forgetest.StartGitea(t)
	// The receiver's own account: a site admin, so it may read anyone's
	// permission; its own comments never start a job.
	bot := g.CreateUser(t, "pi-bot", true)
	outsider := g.CreateUser(t, "outsider", false)
	g.API(t, "", http.MethodPost, "/orgs", map[string]any{"username": "acme", "visibility": "public"})
	g.API(t, "", http.MethodPost, "/orgs/acme/repos", map[string]any{"name": "widgets", "auto_init": true})
	var issue struct {
		Number int `json:"number"`
	}
	if err := json.Unmarshal(g.API(t, "", http.MethodPost, "/repos/acme/widgets/issues",
		map[string]any{"title": "The widget wobbles"}), &issue); err != nil || issue.Number == 0 {
		t.Fatalf("issue: %v", err)
	}

	const secret = "gitea-live-secret"
	dir := t.TempDir()
	triggers := filepath.Join(dir, "triggers.json")
	if err := os.WriteFile(triggers, []byte(`{"triggers": [{"on": {"type": "comment", "id": "fix", "repos": ["acme/widgets"], "phrase": "/pi fix"},
	  "run": {"kind": "forgejo", "flow": "fix"}}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	port := freeTCPPort(t)
	vars := map[string]string{
		"PI_ENV_FILE": "/dev/null", "VALKEY_URL": db.URL, "PI_UNSIGNED_QUEUES": "*", "PI_TRIGGERS_FILE": triggers,
		"FORGEJO_URL": g.URL, "FORGEJO_TOKEN": bot.Token, "FORGEJO_WEBHOOK_SECRET": secret,
		"RECEIVER_BIND": "127.0.0.1", "RECEIVER_PORT": strconv.Itoa(port), "RECEIVER_SPOOL_DIR": filepath.Join(dir, "spool"),
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr logtest.Buffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"receive"}, func(k string) string { return vars[k] }, &stdout, &stderr)
	}()
	stopped := false
	defer func() {
		if !stopped {
			cancel()
			<-done
		}
	}()
	base := "http://127.0.0.1:" + strconv.Itoa(port)
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for !ok() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: timed out:\n%s", what, stderr.String())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	waitFor("receiver up", func() bool {
		resp, err := http.Get(base + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	self := logLines(t, stderr.String(), "self_identity")
	if len(self) != 1 || self[0]["forge"] != "forgejo" || self[0]["id"] != float64(bot.ID) {
		t.Fatalf("self_identity %v, want the bot's id %d", self, bot.ID)
	}

	g.API(t, "", http.MethodPost, "/repos/acme/widgets/hooks", map[string]any{
		"type": "gitea", "active": true, "events": []string{"issue_comment"},
		"config": map[string]string{"url": base + "/forgejo", "content_type": "json", "secret": secret},
	})
	q, err := queue.New(db.Client, "pi-jobs", queue.Config{})
	if err != nil {
		t.Fatal(err)
	}
	pending := func() []string {
		t.Helper()
		ids, err := q.PendingIDs(context.Background(), 100)
		if err != nil {
			t.Fatal(err)
		}
		return ids
	}
	comment := func(token, body string) {
		t.Helper()
		g.API(t, token, http.MethodPost, fmt.Sprintf("/repos/acme/widgets/issues/%d/comments", issue.Number), map[string]any{"body": body})
	}

	// A user who can comment but not write: refused, with why.
	comment(outsider.Token, "/pi fix it for me")
	waitFor("the outsider's comment refused", func() bool { return len(logLines(t, stderr.String(), "forge_refused")) > 0 })
	refused := logLines(t, stderr.String(), "forge_refused")
	if len(refused) != 1 || refused[0]["reason"] != "author-not-allowed" || refused[0]["sender"] != float64(outsider.ID) ||
		refused[0]["repo"] != "acme/widgets" || refused[0]["delivery"] == "" {
		t.Fatalf("refusal %v", refused)
	}
	if ids := pending(); len(ids) != 0 {
		t.Fatalf("the refused comment queued %v", ids)
	}
	if got := botComments(t, g, issue.Number, bot.Login); len(got) != 0 {
		t.Fatalf("the outsider's refused comment got a reply: %q", got)
	}

	// The repository's owner: one job, named by Gitea's delivery id.
	comment("", "/pi fix the wobble")
	waitFor("the owner's comment enqueued", func() bool { return len(logLines(t, stderr.String(), "forge_enqueued")) > 0 })
	enq := logLines(t, stderr.String(), "forge_enqueued")
	delivery, _ := enq[0]["delivery"].(string)
	if len(enq) != 1 || delivery == "" || enq[0]["jobId"] != "fj-"+delivery {
		t.Fatalf("enqueued %v", enq)
	}
	if delivery == refused[0]["delivery"] {
		t.Fatalf("two comments, one delivery id %s", delivery)
	}
	ids := pending()
	if len(ids) != 1 || ids[0] != "fj-"+delivery {
		t.Fatalf("pending %v, want exactly fj-%s", ids, delivery)
	}
	j, err := q.Get(context.Background(), ids[0])
	if err != nil {
		t.Fatal(err)
	}
	job, err := jobs.ParseJob(j.Data)
	if err != nil {
		t.Fatal(err)
	}
	if job.Repo != "acme/widgets" || job.DeliveryID != delivery || job.Trigger != "fix" || job.Number != issue.Number ||
		job.Forge != jobs.ForgeForgejo {
		t.Fatalf("job %+v", job)
	}
	// Accepted, before any worker: exactly one status comment, by the
	// receiver's own account, saying queued, marked with the job's id.
	waitFor("the queued status comment", func() bool { return len(botComments(t, g, issue.Number, bot.Login)) > 0 })
	queued := botComments(t, g, issue.Number, bot.Login)
	if len(queued) != 1 || !strings.Contains(queued[0], "queued, waiting for a worker") ||
		!strings.Contains(queued[0], "<!-- pidispatch:status job=fj-"+delivery+" -->") {
		t.Fatalf("status comments %q, want one saying queued for fj-%s", queued, delivery)
	}
	// The worker's status path, with the same account, edits that comment.
	m, err := workspace.New(workspace.Config{Forges: map[jobs.Forge]workspace.Forge{jobs.ForgeForgejo: {
		Minter: token.Static{Token: token.New(bot.Token, time.Time{})}, API: &workspace.Gitea{URL: g.URL},
	}}, StateDir: t.TempDir(), Host: "gitea-worker-1"})
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range []workspace.Status{{State: workspace.StatusRunning}, {State: workspace.StatusCompleted, Turns: 3}} {
		url, err := m.Status(context.Background(), workspace.Job{ID: ids[0], Job: job}, st)
		if err != nil || !strings.Contains(url, fmt.Sprintf("/acme/widgets/issues/%d#issuecomment-", issue.Number)) {
			t.Fatalf("worker status %s: %q %v", st.State, url, err)
		}
	}
	if got := botComments(t, g, issue.Number, bot.Login); len(got) != 1 || !strings.Contains(got[0], "done.") {
		t.Fatalf("after the worker: %q, want the one comment saying done", got)
	}
	for _, s := range []string{secret, bot.Token, outsider.Token, g.AdminToken} {
		if strings.Contains(stderr.String()+stdout.String(), s) || strings.Contains(string(j.Data), s) {
			t.Fatalf("a secret leaked: %q", s)
		}
	}
	cancel()
	stopped = true
	select {
	case code := <-done:
		if code != exitOK {
			t.Fatalf("exit %d:\n%s", code, stderr.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("receive did not stop with its context")
	}
}

// botComments are the bodies of issue n's comments on acme/widgets written
// by login.
func botComments(t *testing.T, g *forgetest.Gitea, n int, login string) []string {
	t.Helper()
	var list []struct {
		Body string `json:"body"`
		User struct {
			Login string `json:"login"`
		} `json:"user"`
	}
	if err := json.Unmarshal(g.API(t, "", http.MethodGet, fmt.Sprintf("/repos/acme/widgets/issues/%d/comments", n), nil), &list); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, c := range list {
		if c.User.Login == login {
			out = append(out, c.Body)
		}
	}
	return out
}
