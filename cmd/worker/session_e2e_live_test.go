package main

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-github/v84/github"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/pidispatch/pidispatch/forge"
	"github.com/pidispatch/pidispatch/forge/forgetest"
	"github.com/pidispatch/pidispatch/internal/testkit/fakeprovider"
	fixtures "github.com/pidispatch/pidispatch/internal/testkit/forgefixtures"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/jobs"
	"github.com/pidispatch/pidispatch/runner"
)

// sessionSight is what the second job's container held while its agent
// waited for its first answer.
type sessionSight struct {
	sessionFiles    []string // the files in its /session folder
	workspaceHits   []string // paths in its /workspace naming a session
	sessionSource   string
	workspaceSource string
	err             string
}

// A thread's session continues across its forge jobs with the real pi: a
// label event's job on issue #1 writes README.md (published as a pull
// request with one commit) and answers; a comment on the same issue, whose
// trigger resumes, starts a second job whose FIRST model request holds the
// first job's prompt and its answer, restored from the host into /session.
// The session file is in no commit the forge received, and never in the
// workspace.
func TestResumeContinuesTheThreadsSessionWithTheRealAgent(t *testing.T) {
	t.Parallel()
	resumeWithTheRealAgent(t, false)
}

// With PI_SESSION_STORE=valkey and a fleet key, the resume job runs on
// another host (its own logs folder, which kept no session) than the first
// job: it continues the session the first host stored, signed, in Valkey.
func TestResumeOnAnotherHostWithTheRealAgent(t *testing.T) {
	t.Parallel()
	resumeWithTheRealAgent(t, true)
}

func resumeWithTheRealAgent(t *testing.T, twoHosts bool) {
	db := livetest.Valkey(t)
	const repo = "Codertocat/Hello-World" // the octokit examples' repository
	git := forgetest.StartGitServer(t, nil)
	git.CreateRepo(t, repo, "master", map[string]string{"README.md": "Hello World\n"})
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	const appID, installationID = 42, 7
	gh := forgetest.StartGitHub(t, git, appID, &key.PublicKey, time.Hour)
	gh.AddRepo(repo, "master")
	gh.SetRepoID(repo, fixtures.RepoID(t, fixtures.GitHub(t, "issue_comment", "created", 0)))
	gh.SetPermission(repo, "Codertocat", "write")
	keyPath := filepath.Join(t.TempDir(), "app.pem")
	if err := os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}), 0o600); err != nil {
		t.Fatal(err)
	}

	// No secrets profile: a job that resumes may not have one (the session
	// would carry its secrets). The host's key reaches the fake provider
	// through the gateway; the model comes from the run object.
	firstMark, secondMark := "first-"+randomHex(6), "second-"+randomHex(6)
	answer1 := "Wrote README.md for " + firstMark + "; answer " + randomHex(6) + "."
	answer2 := "Second answer " + randomHex(6) + "."
	run := func(flow, instructions string, resume bool) map[string]any {
		r := map[string]any{"kind": "github", "flow": flow, "instructions": instructions, "provider": "anthropic", "model": "claude-haiku-4-5"}
		if resume {
			r["resume"] = true
		}
		return r
	}
	data, err := json.Marshal(map[string]any{"triggers": []map[string]any{
		{"on": map[string]any{"type": "label", "id": "s-label", "repos": []string{repo}, "any": []string{"bug"}},
			"run": run("fix", "Task "+firstMark+": write README.md.", false)},
		{"on": map[string]any{"type": "comment", "id": "s-comment", "repos": []string{repo}, "phrase": "fixed"},
			"run": run("answer", "Task "+secondMark+": say what you did.", true)},
	}})
	if err != nil {
		t.Fatal(err)
	}
	triggers := filepath.Join(t.TempDir(), "triggers.json")
	if err := os.WriteFile(triggers, data, 0o600); err != nil {
		t.Fatal(err)
	}

	// The model: the first job's first request calls write; its second
	// (the tool's result) answers answer1. Any request whose last user
	// message asks secondMark answers answer2. While the second job's agent
	// waits for its first answer, its container is looked into.
	var mu sync.Mutex
	var secondJob string
	var sight *sessionSight
	dc := livetest.Docker(t)
	respond := func(body []byte) fakeprovider.Step {
		var req anthropicRequest
		_ = json.Unmarshal(body, &req)
		last := ""
		if n := len(req.Messages); n > 0 {
			last = string(req.Messages[n-1].Content)
		}
		switch {
		case strings.Contains(last, secondMark):
			mu.Lock()
			if sight == nil && secondJob != "" {
				s := lookAtSession(dc, secondJob)
				sight = &s
			}
			mu.Unlock()
			return fakeprovider.Answer(answer2, fakeprovider.Usage{Input: 900, Output: 12})
		case strings.Contains(last, "tool_result"):
			return fakeprovider.Answer(answer1, fakeprovider.Usage{Input: 1000, Output: 20})
		}
		return fakeprovider.WriteFile("/workspace/README.md", "Hello World\nFixed by "+firstMark+".\n", fakeprovider.Usage{Input: 900, Output: 30})
	}
	env := map[string]string{
		"GITHUB_API_URL": gh.URL, "GITHUB_APP_ID": strconv.Itoa(appID), "GITHUB_APP_INSTALLATION_ID": strconv.Itoa(installationID),
		"GITHUB_APP_PRIVATE_KEY_PATH": keyPath, "ANTHROPIC_API_KEY": "sk-ant-host-" + randomHex(8),
	}
	if twoHosts {
		fleetKey := filepath.Join(t.TempDir(), "fleet.key")
		if err := os.WriteFile(fleetKey, []byte(randomHex(32)), 0o600); err != nil {
			t.Fatal(err)
		}
		env["PI_SESSION_STORE"], env["PI_FLEET_KEY_FILE"] = "valkey", fleetKey
	}
	r := bootPromptRig(t, db, "session-e2e", triggers, env, respond)

	commentBody := fixtures.GitHub(t, "issue_comment", "created", 0)
	seedGitHubComment(t, gh, repo, commentBody)
	labeledBody := fixtures.GitHub(t, "issues", "labeled", 0)
	var labeled github.IssuesEvent
	if err := json.Unmarshal(labeledBody, &labeled); err != nil {
		t.Fatal(err)
	}
	issue := labeled.GetIssue().GetNumber()
	gh.AddLabelEvent(repo, issue, labeled.GetSender().GetLogin(), labeled.GetLabel().GetName())

	// The first job: a pull request with the agent's change.
	rec1, reqs1 := runSessionJob(t, r, ghPayload(t, "issues", labeledBody), "s-label", nil)
	if len(reqs1) != 2 {
		t.Fatalf("the first job made %d model requests, want 2 (write, then answer)", len(reqs1))
	}
	prompt1 := firstUserText(t, reqs1[0].Body)
	if !strings.Contains(prompt1, firstMark) {
		t.Fatalf("the first job's prompt does not hold its instructions %q: %.400s", firstMark, prompt1)
	}
	branch := "pi/issue-" + strconv.Itoa(issue)
	if pulls := gh.Pulls(repo); len(pulls) != 1 || rec1.PushedCommit == "" || git.Head(t, repo, branch) != rec1.PushedCommit {
		t.Fatalf("after the first job: %d pull requests, pushed %q, branch at %q; worker log:\n%s", len(gh.Pulls(repo)), rec1.PushedCommit,
			git.Head(t, repo, branch), r.w.logs.String())
	}
	kept := keptSessionFiles(t, r.w.cfg.LogsDir)
	if len(kept) == 0 {
		t.Fatalf("no session kept on the host after the first job; worker log:\n%s", r.w.logs.String())
	}

	// The second job resumes the thread's session: on this host, or on a
	// second one booted once the first is stopped, so it cannot take the job.
	if twoHosts {
		r.w.stop(t)
		r = bootPromptRig(t, db, "session-e2e-b", triggers, env, respond)
		if kept := keptSessionFiles(t, r.w.cfg.LogsDir); len(kept) != 0 {
			t.Fatalf("the second host kept a session before its first job: %q", kept)
		}
	}
	_, reqs2 := runSessionJob(t, r, ghPayload(t, "issue_comment", commentBody), "s-comment", func(jobID string) {
		mu.Lock()
		secondJob = jobID
		mu.Unlock()
	})
	first := requestTexts(t, reqs2[0].Body)
	for what, want := range map[string]string{"the first job's prompt": strings.TrimSpace(prompt1), "the first job's answer": answer1, "the new task": secondMark} {
		if !strings.Contains(first, want) {
			t.Errorf("the resume job's first model request does not hold %s (%q): %.1500s", what, shorten(want, 80), first)
		}
	}
	if strings.Index(first, answer1) > strings.Index(first, secondMark) {
		t.Errorf("the first job's answer comes after the new prompt in the resume job's first request")
	}
	var asked anthropicRequest
	if err := json.Unmarshal(reqs2[0].Body, &asked); err != nil || len(asked.Messages) < 5 {
		t.Errorf("the resume job's first request has %d messages (%v), want the first job's four and its own", len(asked.Messages), err)
	}

	if ev := r.w.logs.Events(t, "session_restored"); twoHosts && (len(ev) != 1 || ev[0]["from"] != "store") {
		t.Errorf("the second host's session_restored events %v, want one from the store", ev)
	}
	mu.Lock()
	s := sight
	mu.Unlock()
	if s == nil || s.err != "" {
		t.Fatalf("the resume job's container was not looked into: %+v", s)
	}
	if !hasJSONL(s.sessionFiles) {
		t.Errorf("the resume job's /session held %q, want the kept session file", s.sessionFiles)
	}
	if len(s.workspaceHits) > 0 || strings.HasPrefix(s.sessionSource, s.workspaceSource+"/") {
		t.Errorf("the workspace held a session: %q (session at %s, workspace at %s)", s.workspaceHits, s.sessionSource, s.workspaceSource)
	}

	// No commit the forge received holds a session file.
	paths := forgetest.Git(t, git.Dir(repo), "log", "--all", "--name-only", "--format=")
	for _, p := range strings.Fields(paths) {
		if strings.Contains(strings.ToLower(p), "session") || strings.HasSuffix(p, ".jsonl") {
			t.Errorf("a commit holds %q", p)
		}
	}
	if !strings.Contains(paths, "README.md") {
		t.Fatalf("no commit holds README.md, so none was checked: %q", paths)
	}
}

// runSessionJob enqueues ev's job as the receiver does and waits for its
// completed record; it returns the record and the job's model requests.
func runSessionJob(t *testing.T, r *promptRig, ev forge.Event, wantTrigger string, started func(jobID string)) (jobs.Record, []fakeprovider.Request) {
	t.Helper()
	trig, _, reason := forge.Match(r.triggers, ev)
	if reason != "" || trig.Name != wantTrigger {
		t.Fatalf("the event fired trigger %q (reason %q), want %q", trig.Name, reason, wantTrigger)
	}
	d := forge.Delivery(trig, ev, 1)
	if started != nil {
		started(d.JobID)
	}
	before := len(r.fp.Requests())
	if e, err := r.router.EnqueueForge(context.Background(), d); err != nil || !e.Added {
		t.Fatalf("enqueue %s: added %v, %v", d.JobID, e.Added, err)
	}
	rec := waitRecord(t, r.w.cfg.LogsDir, d.JobID, 3*time.Minute)
	reqs := r.fp.Requests()[before:]
	if rec.Outcome != jobs.OutcomeCompleted || len(reqs) == 0 {
		t.Fatalf("job %s: record %+v (telemetry %s), %d model requests; worker log:\n%s", d.JobID, rec, rec.Telemetry, len(reqs), r.w.logs.String())
	}
	return rec, reqs
}

// lookAtSession reads the running container of jobID: the files of its
// /session mount, and any path of its /workspace mount naming a session.
// It runs in the provider's goroutine, so it reports through the sight.
func lookAtSession(dc *client.Client, jobID string) sessionSight {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	list, err := dc.ContainerList(ctx, client.ContainerListOptions{Filters: make(client.Filters).Add("label", runner.LabelJob+"="+jobID)})
	if err != nil {
		return sessionSight{err: err.Error()}
	}
	for _, c := range list.Items {
		if c.State != container.StateRunning {
			continue
		}
		res, err := dc.ContainerInspect(ctx, c.ID, client.ContainerInspectOptions{})
		if err != nil {
			return sessionSight{err: err.Error()}
		}
		var s sessionSight
		for _, m := range res.Container.Mounts {
			switch m.Destination {
			case runner.SessionTarget:
				s.sessionSource = m.Source
				entries, err := os.ReadDir(m.Source)
				if err != nil {
					return sessionSight{err: err.Error()}
				}
				for _, e := range entries {
					s.sessionFiles = append(s.sessionFiles, e.Name())
				}
			case "/workspace":
				s.workspaceSource = m.Source
				_ = filepath.WalkDir(m.Source, func(p string, d fs.DirEntry, err error) error {
					if err == nil && (strings.Contains(strings.ToLower(d.Name()), "session") || strings.HasSuffix(d.Name(), ".jsonl")) {
						s.workspaceHits = append(s.workspaceHits, p)
					}
					return nil
				})
			}
		}
		if s.sessionSource == "" || s.workspaceSource == "" {
			return sessionSight{err: "the running container has no /session or /workspace mount"}
		}
		return s
	}
	return sessionSight{err: "no running container of " + jobID}
}

// keptSessionFiles lists the session files kept under the logs folder.
func keptSessionFiles(t *testing.T, logsDir string) []string {
	t.Helper()
	var out []string
	_ = filepath.WalkDir(filepath.Join(logsDir, "sessions"), func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			out = append(out, p)
		}
		return nil
	})
	return out
}

func hasJSONL(names []string) bool {
	for _, n := range names {
		if strings.HasSuffix(n, ".jsonl") {
			return true
		}
	}
	return false
}

// requestTexts is every text of a messages request's messages, in order,
// one per line: a string content, and each block's text or content.
func requestTexts(t *testing.T, body []byte) string {
	t.Helper()
	var req anthropicRequest
	if err := json.Unmarshal(body, &req); err != nil {
		t.Fatalf("the model request is not a messages request: %v", err)
	}
	var b strings.Builder
	for _, m := range req.Messages {
		var s string
		if json.Unmarshal(m.Content, &s) == nil {
			b.WriteString(s + "\n")
			continue
		}
		var parts []struct {
			Type, Text string
		}
		_ = json.Unmarshal(m.Content, &parts)
		for _, p := range parts {
			b.WriteString(p.Text + "\n")
		}
	}
	return b.String()
}
