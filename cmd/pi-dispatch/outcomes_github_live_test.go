package main

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-github/v84/github"

	"github.com/pidispatch/pidispatch/forge/forgetest"
	fixtures "github.com/pidispatch/pidispatch/internal/testkit/forgefixtures"
	"github.com/pidispatch/pidispatch/jobs"
)

// On the GitHub double: three issues, two asked to be fixed by a comment
// (the trigger fix-comment) and one by a label (fix-label), each a job that
// opens its pull request as the App's bot. A person merges the first (its
// branch fast-forwards master), closes the second and pushes a commit to
// the third; GitHub's pull_request deliveries of each (closed merged,
// closed, synchronize), real-shaped and signed, reach the receiver. Each
// run's record then says what became of its pull request, and `runs --by
// trigger` gives fix-comment's cost per merged pull request: both its runs'
// spend over its one merge.
func TestPullRequestOutcomesOnGitHub(t *testing.T) {
	r := newOutcomeRig(t)
	const repo = "Codertocat/Hello-World" // the octokit examples' repository
	const secret = "outcome-webhook-secret"
	git := forgetest.StartGitServer(t, nil)
	git.CreateRepo(t, repo, "master", map[string]string{"README.md": "Hello World\n"})
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	const appID, installationID = 42, 7
	gh := forgetest.StartGitHub(t, git, appID, &key.PublicKey, time.Hour)
	gh.AddRepo(repo, "master")
	commentBody := fixtures.GitHub(t, "issue_comment", "created", 0)
	repoID := fixtures.RepoID(t, commentBody)
	gh.SetRepoID(repo, repoID)
	gh.SetPermission(repo, "Codertocat", "write")
	keyPath := filepath.Join(t.TempDir(), "app.pem")
	if err := os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}), 0o600); err != nil {
		t.Fatal(err)
	}
	triggers := filepath.Join(t.TempDir(), "triggers.json")
	if err := os.WriteFile(triggers, []byte(`{"triggers": [
	  {"on": {"type": "comment", "id": "fix-comment", "repos": ["`+repo+`"], "phrase": "totally right"},
	   "run": {"kind": "github", "flow": "fix", "secretsProfile": "agent"}},
	  {"on": {"type": "label", "id": "fix-label", "repos": ["`+repo+`"], "any": ["bug"]},
	   "run": {"kind": "github", "flow": "fix", "secretsProfile": "agent"}}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	creds := map[string]string{
		"GITHUB_API_URL": gh.URL, "GITHUB_APP_ID": strconv.Itoa(appID), "GITHUB_APP_INSTALLATION_ID": strconv.Itoa(installationID),
		"GITHUB_APP_PRIVATE_KEY_PATH": keyPath, "WEBHOOK_SECRET": secret,
	}
	wlog := r.bootWorker(t, "outcome-gh", triggers, creds)
	base, rlog := r.receive(t, triggers, creds)
	post := func(event string, body []byte) {
		t.Helper()
		if got := fixtures.PostGitHub(t, base+"/github", event, "outcome-"+hexToken(8), secret, body); got/100 != 2 {
			t.Fatalf("%s delivery answered %d; receiver:\n%s", event, got, rlog)
		}
	}

	// Issues 1 and 2 asked by comment, 3 by label, as the octokit examples
	// send them (edited to name each issue and comment).
	var commented github.IssueCommentEvent
	if err := json.Unmarshal(commentBody, &commented); err != nil {
		t.Fatal(err)
	}
	for n := 1; n <= 2; n++ {
		id := int64(900 + n)
		gh.AddIssue(repo, n, "Codertocat", "Fix number "+strconv.Itoa(n), "It breaks.")
		gh.AddDeliveredComment(repo, n, id, "Codertocat", commented.GetComment().GetBody())
		post("issue_comment", fixtures.Edit(t, commentBody, func(m map[string]any) {
			m["issue"].(map[string]any)["number"] = n
			m["comment"].(map[string]any)["id"] = id
		}))
	}
	gh.AddIssue(repo, 3, "Codertocat", "Fix number 3", "It breaks too.")
	gh.AddLabelEvent(repo, 3, "Codertocat", "bug")
	post("issues", fixtures.Edit(t, fixtures.GitHub(t, "issues", "labeled", 0), func(m map[string]any) {
		m["issue"].(map[string]any)["number"] = 3
	}))

	recs := r.waitRecords(t, 3, rlog, wlog)
	checkSpend(t, recs)
	pulls := map[string]*github.PullRequest{} // by the issue's branch
	for _, pr := range gh.Pulls(repo) {
		pulls[pr.GetHead().GetRef()] = pr
	}
	pull := func(issue int) *github.PullRequest {
		pr := pulls["pi/issue-"+strconv.Itoa(issue)]
		if pr == nil {
			t.Fatalf("no pull request from pi/issue-%d: %v", issue, pulls)
		}
		rec, ok := recs[pr.GetHTMLURL()]
		if !ok || pr.GetUser().GetID() != forgetest.AppBotID {
			t.Fatalf("pull request %s: no record (%v), or not the App's (%d)", pr.GetHTMLURL(), ok, pr.GetUser().GetID())
		}
		checkTrigger(t, rec, map[int]string{1: "fix-comment", 2: "fix-comment", 3: "fix-label"}[issue])
		return pr
	}
	merged, closed, pushed := pull(1), pull(2), pull(3)

	// What a person does on GitHub, and the delivery GitHub sends for it:
	// the octokit example of the action, naming this pull request.
	deliver := func(pr *github.PullRequest, action string, isMerged bool) {
		t.Helper()
		state := "open"
		if action == "closed" {
			state = "closed"
		}
		post("pull_request", fixtures.Edit(t, fixtures.GitHub(t, "pull_request", action, 0), func(m map[string]any) {
			m["number"] = pr.GetNumber()
			m["repository"].(map[string]any)["clone_url"] = gh.CloneURL(repo)
			p := m["pull_request"].(map[string]any)
			p["number"], p["html_url"], p["state"], p["merged"] = pr.GetNumber(), pr.GetHTMLURL(), state, isMerged
			p["updated_at"] = time.Now().UTC().Format(time.RFC3339)
			user := p["user"].(map[string]any)
			user["id"], user["login"], user["type"] = forgetest.AppBotID, forgetest.AppSlug+"[bot]", "Bot"
			head := p["head"].(map[string]any)
			head["ref"], head["sha"] = pr.GetHead().GetRef(), git.Head(t, repo, pr.GetHead().GetRef())
			head["repo"].(map[string]any)["id"] = repoID
			p["base"].(map[string]any)["repo"].(map[string]any)["id"] = repoID
		}))
	}
	// Merged: master fast-forwards to the pull request's branch.
	forgetest.Git(t, git.Dir(repo), "update-ref", "refs/heads/master", git.Head(t, repo, merged.GetHead().GetRef()))
	deliver(merged, "closed", true)
	deliver(closed, "closed", false)
	// A person's commit on the third pull request's branch.
	git.Commit(t, repo, pushed.GetHead().GetRef(), pushed.GetHead().GetRef(), map[string]string{"NOTES.md": "Notes on the fix, for the release.\n"})
	deliver(pushed, "synchronize", false)
	waitUntil(t, "three pull requests followed", 30*time.Second, rlog, func() bool {
		return len(logLines(t, rlog.String(), "forge_pull_request_followed")) == 3
	})
	if got := git.Head(t, repo, "master"); got != git.Head(t, repo, merged.GetHead().GetRef()) {
		t.Fatalf("master at %s, not the merged branch", got)
	}

	r.checkWorth(t, recs, map[string]wantOutcome{
		merged.GetHTMLURL(): {state: jobs.PullRequestMerged},
		closed.GetHTMLURL(): {state: jobs.PullRequestClosed},
		pushed.GetHTMLURL(): {state: jobs.PullRequestOpen, humanCommits: 1},
	})
}
