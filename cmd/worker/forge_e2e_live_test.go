package main

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-github/v84/github"
	"github.com/pidispatch/pidispatch/config"
	"github.com/pidispatch/pidispatch/cronsync"
	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/enqueue"
	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/forge"
	"github.com/pidispatch/pidispatch/forge/forgetest"
	"github.com/pidispatch/pidispatch/forge/inbox"
	"github.com/pidispatch/pidispatch/forge/receiver"
	"github.com/pidispatch/pidispatch/forge/token"
	fixtures "github.com/pidispatch/pidispatch/internal/testkit/forgefixtures"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/internal/testkit/logtest"
	"github.com/pidispatch/pidispatch/internal/testkit/secrettest"
	"github.com/pidispatch/pidispatch/jobs"
	"github.com/pidispatch/pidispatch/observe/transcript"
	"github.com/pidispatch/pidispatch/queue"
	wiring "github.com/pidispatch/pidispatch/stack"
)

// End to end for GitHub: a signed octokit issue_comment delivery reaches the
// receiver, which asks a GitHub API double (go-github's types) whether the
// commenter may write and enqueues a job; a live worker configured from the
// environment alone (GITHUB_API_URL and the App's credentials) mints a token
// from the double, clones the repository over smart HTTP (git http-backend,
// at the clone URL the double answers), runs the test image, which changes a
// file, then pushes pi/<job id> and opens a draft pull request. Exactly one
// record names the delivery and carries the pull request, pushed and base
// commits; a replay of the delivery, refused by the receiver or (past its
// memory) enqueued as the job that already ran, opens no second pull
// request; no token minted is in the container's environment or mounts, a
// log, a record, a transcript or Valkey.
func TestSignedGitHubDeliveryPublishesPullRequest(t *testing.T) {
	ensureImage(t)
	db := livetest.Valkey(t)
	name := uniqueName("forge-e2e", db)
	const repo = "Codertocat/Hello-World" // the octokit examples' repository
	const issue = 1                       // and issue
	const secret = "e2e-webhook-secret"

	git := forgetest.StartGitServer(t, nil)
	base := git.CreateRepo(t, repo, "master", map[string]string{"README.md": "hello\n"})
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	const appID, installationID = 42, 7
	gh := forgetest.StartGitHub(t, git, appID, &key.PublicKey, time.Hour)
	gh.AddRepo(repo, "master")
	// The example's repository, under the id it names.
	gh.SetRepoID(repo, fixtures.RepoID(t, fixtures.GitHub(t, "issue_comment", "created", 0)))
	gh.SetPermission(repo, "Codertocat", "write")
	keyPath := filepath.Join(t.TempDir(), "app.pem")
	if err := os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}), 0o600); err != nil {
		t.Fatal(err)
	}
	triggers := filepath.Join(t.TempDir(), "triggers.json")
	if err := os.WriteFile(triggers, []byte(`{"triggers": [
	  {"on": {"type": "comment", "id": "fix-comment", "repos": ["`+repo+`"], "phrase": "fixed"},
	   "run": {"kind": "github", "flow": "fix", "task": "JOB_WRITE_FILE=README.md\nJOB_SHOW_FILE=/proc/self/environ\nJOB_PRINT_EXIT_LINE=1"}}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	getenv := testEnv(t, db.URL, map[string]string{
		"PI_WORKER_NAME":              name,
		"PI_CONTAINER_USER":           "65534:65534",
		"PI_TRIGGERS_FILE":            triggers,
		"GITHUB_API_URL":              gh.URL,
		"GITHUB_APP_ID":               strconv.Itoa(appID),
		"GITHUB_APP_INSTALLATION_ID":  strconv.Itoa(installationID),
		"GITHUB_APP_PRIVATE_KEY_PATH": keyPath,
		"WEBHOOK_SECRET":              secret,
	})

	// The worker, wired as run does: the forge workspace and the trigger's
	// publish policy from the environment, with a spy on its containers.
	wlog := &logtest.Buffer{}
	policies, err := wiring.LoadForgePolicies(triggers, name, wlog.Logger())
	if err != nil {
		t.Fatal(err)
	}
	ws, err := wiring.ForgeWorkspacesFromEnv(getenv, name, wlog.Logger(), policies)
	if err != nil || ws == nil {
		t.Fatalf("forge workspaces: %v, %v", ws, err)
	}
	spy := &secrettest.Spy{}
	w := bootWorker(t, getenv, dispatch.Tuning{}, wiring.WithForgeWorkspaces(ws), wiring.WithForgePolicies(policies), spy.Option)

	// The receiver, wired as pi-dispatch receive does for a GitHub App.
	fc, err := config.LoadForge(getenv)
	if err != nil {
		t.Fatal(err)
	}
	appKey, err := fc.Credentials.GitHub.PrivateKey()
	if err != nil {
		t.Fatal(err)
	}
	app := &token.GitHubApp{AppID: fc.Credentials.GitHub.AppID, InstallationID: fc.Credentials.GitHub.InstallationID, Key: appKey,
		APIURL: fc.Credentials.GitHub.APIURL, Permissions: token.IntakePermissions()}
	jwt, err := app.JWT()
	if err != nil {
		t.Fatal(err)
	}
	selfID, err := forge.GitHubAppSelfID(context.Background(), fc.Credentials.GitHubAPIURL, jwt, nil)
	if err != nil || selfID != forgetest.AppBotID {
		t.Fatalf("the App's bot: %d, %v", selfID, err)
	}
	data, err := os.ReadFile(triggers)
	if err != nil {
		t.Fatal(err)
	}
	fts, err := cronsync.ParseForgeTriggers(data)
	if err != nil {
		t.Fatal(err)
	}
	rlog := &logtest.Buffer{}
	producer, err := enqueue.NewProducer(db.Client, enqueue.ProducerConfig{UnsignedQueues: []string{fleet.EveryQueue}, WorkerName: "receiver-" + name, Logger: rlog.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	intake, err := forge.NewIntake(forge.IntakeConfig{
		Enqueuer: enqueue.NewRouter(producer, enqueue.RouterConfig{}),
		Permissions: map[jobs.Forge]forge.Permissions{jobs.ForgeGitHub: &forge.CachedPermissions{
			Inner: forge.GitHubPermissions{BaseURL: fc.Credentials.GitHubAPIURL, Tokens: &token.Cache{Minter: app}}, TTL: time.Minute}},
		SelfIDs: map[jobs.Forge]int64{jobs.ForgeGitHub: selfID},
		Logger:  rlog.Logger(), Host: "receiver-" + name,
	})
	if err != nil {
		t.Fatal(err)
	}
	intake.SetTriggers(fts)
	rcv, err := receiver.New(receiver.Config{Intake: intake, Replay: receiver.ValkeyReplay{Client: db.Client}, GitHubSecret: fc.WebhookSecret, Logger: rlog.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(rcv.Handler())
	defer srv.Close()

	body := fixtures.GitHub(t, "issue_comment", "created", 0)
	seedGitHubComment(t, gh, repo, body)
	delivery := "e2e-" + randomHex(8)
	post := func() int {
		return fixtures.PostGitHub(t, srv.URL+"/github", "issue_comment", delivery, secret, body)
	}
	if got := post(); got != http.StatusAccepted {
		t.Fatalf("delivery answered %d, want 202", got)
	}

	bodyKey := inbox.Delivery{Forge: jobs.ForgeGitHub, Body: body}.Key()
	jobID := "gh-" + bodyKey // named after the signed body
	if waitJobState(t, testQueue(t, db, "pi-jobs"), jobID, queue.StateCompleted, 90*time.Second) == nil {
		t.Fatalf("job not completed; worker said:\n%s", w.logs.String())
	}
	rec := waitRecord(t, w.cfg.LogsDir, jobID, 10*time.Second)
	if rec.JobID != jobID || rec.Kind != jobs.KindForge || rec.Outcome != jobs.OutcomeCompleted {
		t.Fatalf("record %+v", rec)
	}
	pulls := gh.Pulls(repo)
	if len(pulls) != 1 {
		t.Fatalf("%d pull requests, want one", len(pulls))
	}
	pr := pulls[0]
	if !pr.GetDraft() || pr.GetHead().GetRef() != fmt.Sprintf("pi/issue-%d", issue) || pr.GetBase().GetRef() != "master" {
		t.Errorf("pull request draft=%v head=%q base=%q", pr.GetDraft(), pr.GetHead().GetRef(), pr.GetBase().GetRef())
	}
	if rec.PullRequestURL == "" || rec.PullRequestURL != pr.GetHTMLURL() {
		t.Errorf("record's pull request %q, the double's %q", rec.PullRequestURL, pr.GetHTMLURL())
	}
	if rec.BaseCommit != base {
		t.Errorf("base commit %q, want %q", rec.BaseCommit, base)
	}
	if pushed := git.Head(t, repo, fmt.Sprintf("pi/issue-%d", issue)); pushed == "" || rec.PushedCommit != pushed {
		t.Errorf("pushed commit %q, the branch's %q", rec.PushedCommit, pushed)
	}
	if head := git.Head(t, repo, "master"); head != base {
		t.Errorf("master moved to %s", head)
	}
	if got := forgetest.Git(t, git.Dir(repo), "show", rec.PushedCommit+":README.md"); got != "written by jobprog" {
		t.Errorf("README.md on the branch: %q", got)
	}
	if comments := gh.Comments(repo, issue); len(comments) != 1 || !strings.Contains(comments[0], rec.PullRequestURL) {
		t.Errorf("comments on #%d: %q", issue, comments)
	}

	// A replay of the delivery is refused and starts nothing.
	if got := post(); got != http.StatusConflict {
		t.Fatalf("replayed delivery answered %d, want 409", got)
	}
	// Past the receiver's memory of it (its replay key expired, say), the
	// delivery is the same job, which ran already: no second run.
	if err := (receiver.ValkeyReplay{Client: db.Client}).Release(context.Background(), jobs.ForgeGitHub, bodyKey); err != nil {
		t.Fatal(err)
	}
	if got := post(); got/100 != 2 {
		t.Fatalf("delivery replayed past the receiver's memory answered %d, want 2xx", got)
	}
	if ev := rlog.Events(t, "forge_enqueued"); len(ev) != 2 || ev[0]["added"] != true || ev[1]["added"] != false {
		t.Fatalf("forge_enqueued events %v, want the first added and the replay not", ev)
	}
	time.Sleep(3 * time.Second) // a second run, were there one, would have published by now
	if n := len(gh.Pulls(repo)); n != 1 {
		t.Errorf("%d pull requests after the replay, want one", n)
	}
	recs, err := jobs.ReadRecords(w.cfg.LogsDir, jobID)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 1 {
		t.Fatalf("%d records of %s, want one", len(recs), jobID)
	}

	// No token anywhere: the job printed its environment into the
	// transcript, and the spy saw its environment and mounts.
	entries, err := transcript.Read(w.cfg.LogsDir, jobID, 1)
	if err != nil {
		t.Fatal(err)
	}
	var tr strings.Builder
	transcript.Render(&tr, entries)
	if !strings.Contains(tr.String(), "PI_JOB_ID=") {
		t.Fatal("the job did not print its environment")
	}
	tokens := gh.Tokens()
	if len(tokens) < 2 {
		t.Fatalf("%d tokens minted, want the receiver's and the worker's", len(tokens))
	}
	texts := secrettest.Texts(t, spy, w.cfg.LogsDir, db.Client)
	texts = append(texts, tr.String(), w.logs.String(), wlog.String(), rlog.String())
	secrettest.Absent(t, texts, tokens)
}

// seedGitHubComment puts on the GitHub double the issue and the comment an
// issue_comment delivery names, under their own ids: the worker reads the
// job's event from the forge, never from the delivery.
func seedGitHubComment(t *testing.T, gh *forgetest.GitHub, repo string, body []byte) {
	t.Helper()
	var ev github.IssueCommentEvent
	if err := json.Unmarshal(body, &ev); err != nil {
		t.Fatal(err)
	}
	is, cm := ev.GetIssue(), ev.GetComment()
	gh.AddIssue(repo, is.GetNumber(), is.GetUser().GetLogin(), is.GetTitle(), is.GetBody())
	gh.AddDeliveredComment(repo, is.GetNumber(), cm.GetID(), cm.GetUser().GetLogin(), cm.GetBody())
}
