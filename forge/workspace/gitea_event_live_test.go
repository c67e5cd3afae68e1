package workspace_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"code.gitea.io/sdk/gitea"
	"github.com/stretchr/testify/require"

	"github.com/pidispatch/pidispatch/forge/forgetest"
	"github.com/pidispatch/pidispatch/forge/token"
	"github.com/pidispatch/pidispatch/forge/workspace"
	"github.com/pidispatch/pidispatch/jobs"
)

// giteaEvent is a real Gitea with a repository of the admin's, alice (a
// collaborator who may write) and bob (one who may read).
type giteaEvent struct {
	g           *forgetest.Gitea
	admin       *gitea.Client
	alice, bob  *gitea.Client
	owner, repo string
	labels      map[string]int64
	manager     func(t *testing.T, maxComments int) *workspace.Manager
	jobs        int
}

func startGiteaEvent(t *testing.T) *giteaEvent {
	t.Helper()
	g := forgetest.StartGitea(t)
	e := &giteaEvent{g: g, owner: g.AdminUser, labels: map[string]int64{}}
	var err error
	e.admin, err = gitea.NewClient(g.URL, gitea.SetToken(g.AdminToken))
	require.NoError(t, err)
	_, _, err = e.admin.CreateRepo(gitea.CreateRepoOption{Name: "web", AutoInit: true, DefaultBranch: "main", Readme: "Default"})
	require.NoError(t, err)
	e.repo = e.owner + "/web"
	for name, mode := range map[string]gitea.AccessMode{"alice": gitea.AccessModeWrite, "bob": gitea.AccessModeRead} {
		u := g.CreateUser(t, name, false)
		_, err := e.admin.AddCollaborator(e.owner, "web", name, gitea.AddCollaboratorOption{Permission: &mode})
		require.NoError(t, err)
		c, err := gitea.NewClient(g.URL, gitea.SetToken(u.Token))
		require.NoError(t, err)
		if name == "alice" {
			e.alice = c
		} else {
			e.bob = c
		}
	}
	for _, name := range []string{"bug", "pi:fix"} {
		l, _, err := e.admin.CreateLabel(e.owner, "web", gitea.CreateLabelOption{Name: name, Color: "#ee0701"})
		require.NoError(t, err)
		e.labels[name] = l.ID
	}
	e.manager = func(t *testing.T, maxComments int) *workspace.Manager {
		m, err := workspace.New(workspace.Config{
			Forges: map[jobs.Forge]workspace.Forge{jobs.ForgeForgejo: {
				Minter: token.Static{Token: token.New(g.AdminToken, time.Time{})},
				API:    &workspace.Gitea{URL: g.URL},
			}},
			StateDir: t.TempDir(), Host: "h1", Backoff: 10 * time.Millisecond, Trigger: hostTrigger, MaxComments: maxComments,
		})
		require.NoError(t, err)
		return m
	}
	return e
}

// job is a forge job about number, with a fresh id.
func (e *giteaEvent) job(number int) workspace.Job {
	e.jobs++
	return workspace.Job{ID: fmt.Sprintf("job-%d", e.jobs), Job: jobs.Job{Kind: jobs.KindForge, Repo: e.repo, Flow: "fix", Task: "t",
		ForgeEvent: jobs.ForgeEvent{Forge: jobs.ForgeForgejo, Number: number, Trigger: "fix-label"}}}
}

func (e *giteaEvent) prepare(t *testing.T, m *workspace.Manager, job workspace.Job) (*workspace.Checkout, string) {
	t.Helper()
	dir := t.TempDir()
	c, err := m.Prepare(context.Background(), job, dir)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	require.NotNil(t, c.Event(), "a job never runs without its event")
	return c, dir
}

func (e *giteaEvent) issue(t *testing.T, by *gitea.Client, title, body string, labels ...string) *gitea.Issue {
	t.Helper()
	var ids []int64
	for _, l := range labels {
		ids = append(ids, e.labels[l])
	}
	is, _, err := by.CreateIssue(e.owner, "web", gitea.CreateIssueOption{Title: title, Body: body, Labels: ids})
	require.NoError(t, err)
	return is
}

func (e *giteaEvent) comment(t *testing.T, by *gitea.Client, n int64, body string) *gitea.Comment {
	t.Helper()
	c, _, err := by.CreateIssueComment(e.owner, "web", n, gitea.CreateIssueCommentOption{Body: body})
	require.NoError(t, err)
	return c
}

func eventComment(c *gitea.Comment, login, perm, body string) jobs.EventComment {
	return jobs.EventComment{ID: c.ID, Author: jobs.EventPerson{Login: login, Permission: perm}, Body: body,
		CreatedAt: c.Created.UTC().Format(time.RFC3339)}
}

// Against a real Gitea, as Prepare reads them with the forge's token: an
// issue and its thread, a pull request's review, who added a label, clipped
// hostile text, the thread cut to its last comments, a missing issue, and
// the pull request's title and body at publish.
func TestGiteaEvent(t *testing.T) {
	t.Parallel()
	e := startGiteaEvent(t)
	m := e.manager(t, 0)

	t.Run("IssueCommentsAndTriggeringComment", func(t *testing.T) {
		is := e.issue(t, e.alice, "Fix the parser", "It breaks on tabs.", "bug")
		first := e.comment(t, e.bob, is.Index, "I see it too.")
		second := e.comment(t, e.admin, is.Index, "Only with tabs?")
		third := e.comment(t, e.bob, is.Index, "Yes, only tabs.")
		trigger := e.comment(t, e.alice, is.Index, "/pi fix please handle tabs too")
		job := e.job(int(is.Index))
		job.Job.Trigger, job.Job.CommentID = "fix-comment", trigger.ID

		c, _ := e.prepare(t, m, job)
		repo, _, err := e.admin.GetRepo(e.owner, "web")
		require.NoError(t, err)
		require.Equal(t, &jobs.Event{
			Version: jobs.EventVersion, Forge: jobs.ForgeForgejo,
			Repository: jobs.EventRepository{FullName: e.repo, URL: repo.HTMLURL, DefaultBranch: "main"},
			Trigger:    fixTrigger.Event,
			Issue: &jobs.EventIssue{Number: int(is.Index), Title: "Fix the parser", Body: "It breaks on tabs.", State: "open",
				URL: is.HTMLURL, Author: jobs.EventPerson{Login: "alice", Permission: "write"}, Labels: []string{"bug"}},
			Comment: func() *jobs.EventComment {
				c := eventComment(trigger, "alice", "write", "please handle tabs too")
				return &c
			}(),
			Comments: []jobs.EventComment{
				eventComment(first, "bob", "read", "I see it too."),
				eventComment(second, e.owner, "admin", "Only with tabs?"),
				eventComment(third, "bob", "read", "Yes, only tabs."),
			},
		}, c.Event())
	})

	t.Run("PullRequestReview", func(t *testing.T) {
		_, _, err := e.admin.CreateFile(e.owner, "web", "a.go", gitea.CreateFileOptions{
			FileOptions: gitea.FileOptions{BranchName: "main", NewBranchName: "feature", Message: "add a"},
			Content:     base64.StdEncoding.EncodeToString([]byte("package a\n\nfunc A() {}\n")),
		})
		require.NoError(t, err)
		pr, _, err := e.admin.CreatePullRequest(e.owner, "web", gitea.CreatePullRequestOption{Head: "feature", Base: "main",
			Title: "Add a", Body: "Adds package a."})
		require.NoError(t, err)
		review, _, err := e.alice.CreatePullReview(e.owner, "web", pr.Index, gitea.CreatePullReviewOptions{
			State: gitea.ReviewStateRequestChanges, Body: "Please rename it.",
			Comments: []gitea.CreatePullReviewComment{{Path: "a.go", Body: "Call it b.", NewLineNum: 3}},
		})
		require.NoError(t, err)
		job := e.job(int(pr.Index))
		job.Job.PullRequest, job.Job.ReviewID = true, review.ID

		c, _ := e.prepare(t, m, job)
		ev := c.Event()
		require.Equal(t, pr.Head.Sha, c.Base())
		require.Equal(t, &jobs.EventPullRequest{Base: "main", Head: "feature", HeadSHA: pr.Head.Sha,
			Files: []jobs.EventFile{{Path: "a.go", Status: "added", Additions: 3}}}, ev.PullRequest)
		require.Equal(t, "Add a", ev.Issue.Title)
		require.Equal(t, jobs.EventPerson{Login: e.owner, Permission: "admin"}, ev.Issue.Author)
		require.NotNil(t, ev.Review)
		require.Equal(t, review.ID, ev.Review.ID)
		require.Equal(t, "changes_requested", ev.Review.State)
		require.Equal(t, "Please rename it.", ev.Review.Body)
		require.Equal(t, jobs.EventPerson{Login: "alice", Permission: "write"}, ev.Review.Author)
		require.Equal(t, []jobs.EventReviewNote{{ID: ev.Review.Comments[0].ID, Path: "a.go", Line: 3,
			Author: jobs.EventPerson{Login: "alice", Permission: "write"}, Body: "Call it b."}}, ev.Review.Comments)
		require.NotZero(t, ev.Review.Comments[0].ID)
	})

	t.Run("LabelTriggerNamesWhoAddedIt", func(t *testing.T) {
		is := e.issue(t, e.admin, "Label me", "")
		_, _, err := e.alice.AddIssueLabels(e.owner, "web", is.Index, gitea.IssueLabelsOption{Labels: []int64{e.labels["pi:fix"]}})
		require.NoError(t, err)
		// A later entry for another label is not the one asked about.
		_, _, err = e.admin.AddIssueLabels(e.owner, "web", is.Index, gitea.IssueLabelsOption{Labels: []int64{e.labels["bug"]}})
		require.NoError(t, err)
		job := e.job(int(is.Index))
		job.Job.Label = "pi:fix"
		c, _ := e.prepare(t, m, job)
		require.Equal(t, &jobs.EventLabel{Name: "pi:fix", AddedBy: jobs.EventPerson{Login: "alice", Permission: "write"}}, c.Event().Label)
	})

	t.Run("HostileTextIsClipped", func(t *testing.T) {
		is := e.issue(t, e.alice, "Title\x1b[2J\u200d", hostileBody())
		e.comment(t, e.bob, is.Index, hostileBody())
		c, _ := e.prepare(t, m, e.job(int(is.Index)))
		ev := c.Event()
		requireClipped(t, ev.Issue.Body, jobs.MaxEventBodyBytes)
		requireClipped(t, ev.Comments[0].Body, jobs.MaxEventCommentBytes)
		require.NotContains(t, ev.Issue.Title, "\x1b")
		require.NotContains(t, ev.Issue.Title, "\u200d")
		requireEncodedFits(t, ev)
	})

	t.Run("ManyCommentsCutToN", func(t *testing.T) {
		is := e.issue(t, e.admin, "Chatty", "")
		for i := range 12 {
			e.comment(t, e.bob, is.Index, fmt.Sprintf("comment %d", i))
		}
		c, _ := e.prepare(t, e.manager(t, 5), e.job(int(is.Index)))
		ev := c.Event()
		var bodies []string
		for _, cm := range ev.Comments {
			bodies = append(bodies, cm.Body)
		}
		require.Equal(t, []string{"comment 7", "comment 8", "comment 9", "comment 10", "comment 11"}, bodies)
		require.Equal(t, 7, ev.CommentsOmitted)
	})

	t.Run("IssueGoneIsNoRepository", func(t *testing.T) {
		_, err := m.Prepare(context.Background(), e.job(9999), t.TempDir())
		require.ErrorIs(t, err, token.ErrNoRepository)
	})

	t.Run("PublishTitle", func(t *testing.T) {
		// Two issues: the jobs of one issue share one pull request.
		issues := []*gitea.Issue{
			e.issue(t, e.alice, "Fix the parser", "It breaks on tabs."),
			e.issue(t, e.alice, "Fix the parser", "It breaks on tabs, again."),
		}
		for i, res := range []workspace.Result{
			{Outcome: jobs.OutcomeCompleted, Turns: 2, Dollars: 0.75},
			{Outcome: jobs.OutcomeCompleted, Turns: 2, Dollars: 0.75, PullRequest: &workspace.PullRequestText{Title: "Parse tabs", Body: "Folds tabs."}},
		} {
			c, dir := e.prepare(t, m, e.job(int(issues[i].Index)))
			require.NoError(t, os.WriteFile(filepath.Join(dir, "README.md"), []byte(fmt.Sprintf("%v\n", res.PullRequest != nil)), 0o644))
			_, err := c.Publish(context.Background(), res)
			require.NoError(t, err)
		}
		prs, _, err := e.admin.ListRepoPullRequests(e.owner, "web", gitea.ListPullRequestsOptions{State: gitea.StateAll})
		require.NoError(t, err)
		titles := map[string]string{}
		for _, pr := range prs {
			titles[pr.Title] = pr.Body
		}
		fromIssue, ok := titles["WIP: pi: Fix the parser"]
		require.True(t, ok, "titled from the issue: %v", titles)
		fromJob, ok := titles["WIP: Parse tabs"]
		require.True(t, ok, "titled from the job's text: %v", titles)
		require.True(t, strings.HasPrefix(fromJob, "Folds tabs.\n\nRefs #"), fromJob)
		for i, body := range []string{fromIssue, fromJob} {
			require.Contains(t, body, fmt.Sprintf("Refs #%d\n", issues[i].Index))
			require.Contains(t, body, "$0.75")
			require.Contains(t, body, "2 turns")
		}
	})
}
