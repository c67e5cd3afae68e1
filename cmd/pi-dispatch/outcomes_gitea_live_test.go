package main

import (
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"code.gitea.io/sdk/gitea"

	"github.com/pidispatch/pidispatch/forge/forgetest"
	"github.com/pidispatch/pidispatch/jobs"
)

// On a real Gitea, which delivers every webhook itself: two issues asked to
// be fixed by a comment (fix-comment), one by a label (fix-label), each a
// job that opens its pull request as the host's bot. The repository's owner
// then merges the first, closes the second and commits to the third's
// branch, through Gitea's API; Gitea's pull_request deliveries reach the
// receiver. Each run's record says what became of its pull request, and
// `runs --by trigger` gives the cost per merged pull request.
func TestPullRequestOutcomesOnGitea(t *testing.T) {
	r := newOutcomeRig(t)
	g := forgetest.StartGitea(t)
	admin, err := gitea.NewClient(g.URL, gitea.SetToken(g.AdminToken))
	if err != nil {
		t.Fatal(err)
	}
	owner, name := g.AdminUser, "notes-"+hexToken(3)
	repo := owner + "/" + name
	if _, _, err := admin.CreateRepo(gitea.CreateRepoOption{Name: name, AutoInit: true, DefaultBranch: "main", Readme: "Default"}); err != nil {
		t.Fatal(err)
	}
	label, _, err := admin.CreateLabel(owner, name, gitea.CreateLabelOption{Name: "pi:fix", Color: "#ee0701"})
	if err != nil {
		t.Fatal(err)
	}
	// The host's bot, with the scopes docs/forges.md names; a repository
	// admin, so it may read the owner's permission.
	scoped := g.CreateScopedUser(t, "pi-bot")
	botToken := scoped.Token(t, "host", "write:repository", "write:issue", "read:user")
	adminMode := gitea.AccessModeAdmin
	if _, err := admin.AddCollaborator(owner, name, scoped.Login, gitea.AddCollaboratorOption{Permission: &adminMode}); err != nil {
		t.Fatal(err)
	}

	triggers := filepath.Join(t.TempDir(), "triggers.json")
	if err := os.WriteFile(triggers, []byte(`{"triggers": [
	  {"on": {"type": "comment", "id": "fix-comment", "repos": ["`+repo+`"], "phrase": "/pi fix"},
	   "run": {"kind": "forgejo", "flow": "fix", "secretsProfile": "agent"}, "publish": {"draft": false}},
	  {"on": {"type": "label", "id": "fix-label", "repos": ["`+repo+`"], "any": ["pi:fix"]},
	   "run": {"kind": "forgejo", "flow": "fix", "secretsProfile": "agent"}, "publish": {"draft": false}}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	const secret = "outcome-gitea-secret"
	creds := map[string]string{"FORGEJO_URL": g.URL, "FORGEJO_TOKEN": botToken, "FORGEJO_WEBHOOK_SECRET": secret}
	wlog := r.bootWorker(t, "outcome-fj", triggers, creds)
	base, rlog := r.receive(t, triggers, creds)
	if _, _, err := admin.CreateRepoHook(owner, name, gitea.CreateHookOption{Type: gitea.HookTypeGitea, Active: true,
		Events: []string{"issues", "issue_comment", "pull_request"},
		Config: map[string]string{"url": base + "/forgejo", "content_type": "json", "secret": secret}}); err != nil {
		t.Fatal(err)
	}

	want := map[int64]string{}
	for i := 1; i <= 3; i++ {
		is, _, err := admin.CreateIssue(owner, name, gitea.CreateIssueOption{Title: fmt.Sprintf("Fix number %d", i), Body: "It breaks."})
		if err != nil {
			t.Fatal(err)
		}
		if i < 3 {
			want[is.Index] = "fix-comment"
			if _, _, err := admin.CreateIssueComment(owner, name, is.Index, gitea.CreateIssueCommentOption{Body: "/pi fix please"}); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want[is.Index] = "fix-label"
		if _, _, err := admin.AddIssueLabels(owner, name, is.Index, gitea.IssueLabelsOption{Labels: []int64{label.ID}}); err != nil {
			t.Fatal(err)
		}
	}

	recs := r.waitRecords(t, 3, rlog, wlog)
	checkSpend(t, recs)
	prs, _, err := admin.ListRepoPullRequests(owner, name, gitea.ListPullRequestsOptions{State: gitea.StateAll})
	if err != nil {
		t.Fatal(err)
	}
	byIssue := map[int64]*gitea.PullRequest{}
	for _, pr := range prs {
		for n := range want {
			if pr.Head.Ref == "pi/issue-"+strconv.FormatInt(n, 10) {
				byIssue[n] = pr
			}
		}
	}
	pull := func(n int64) *gitea.PullRequest {
		pr := byIssue[n]
		if pr == nil {
			t.Fatalf("no pull request from pi/issue-%d among %d", n, len(prs))
		}
		rec, ok := recs[pr.HTMLURL]
		if !ok || pr.Poster == nil || pr.Poster.UserName != scoped.Login {
			t.Fatalf("pull request %s: no record (%v), or not the bot's", pr.HTMLURL, ok)
		}
		checkTrigger(t, rec, want[n])
		return pr
	}
	merged, closed, pushed := pull(1), pull(2), pull(3)

	// The owner, on Gitea: merges, closes, commits to the branch.
	if ok, _, err := admin.MergePullRequest(owner, name, merged.Index, gitea.MergePullRequestOption{Style: gitea.MergeStyleMerge}); err != nil || !ok {
		t.Fatalf("merge %s: %v %v", merged.HTMLURL, ok, err)
	}
	closedState := gitea.StateClosed
	if _, _, err := admin.EditPullRequest(owner, name, closed.Index, gitea.EditPullRequestOption{State: &closedState}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := admin.CreateFile(owner, name, "CHANGELOG.md", gitea.CreateFileOptions{
		FileOptions: gitea.FileOptions{BranchName: pushed.Head.Ref, Message: "Say what changed"},
		Content:     base64.StdEncoding.EncodeToString([]byte("The notes, for the release.\n")),
	}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "three pull requests followed", 60*time.Second, rlog, func() bool {
		return len(logLines(t, rlog.String(), "forge_pull_request_followed")) >= 3
	})

	r.checkWorth(t, recs, map[string]wantOutcome{
		merged.HTMLURL: {state: jobs.PullRequestMerged},
		closed.HTMLURL: {state: jobs.PullRequestClosed},
		pushed.HTMLURL: {state: jobs.PullRequestOpen, humanCommits: 1},
	})
}
