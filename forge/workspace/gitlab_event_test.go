package workspace_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	gitlab "gitlab.com/gitlab-org/api/client-go/v2"

	"github.com/pidispatch/pidispatch/forge/forgetest"
	"github.com/pidispatch/pidispatch/forge/token"
	"github.com/pidispatch/pidispatch/forge/workspace"
	"github.com/pidispatch/pidispatch/jobs"
)

// glBundle is a nested-group project on the GitLab double and a manager
// that reads its jobs' events.
type glBundle struct {
	git  *forgetest.GitServer
	gl   *forgetest.GitLab
	m    *workspace.Manager
	base string
	job  workspace.Job
}

const glProject = "acme/platform/web"

func glSetup(t *testing.T, maxComments int) *glBundle {
	t.Helper()
	b := &glBundle{git: forgetest.StartGitServer(t, nil)}
	b.base = b.git.CreateRepo(t, glProject, "main", map[string]string{"README.md": "hello\n"})
	b.gl = forgetest.StartGitLab(t, b.git)
	b.gl.AddProject(glProject, "main")
	m, err := workspace.New(workspace.Config{
		Forges: map[jobs.Forge]workspace.Forge{jobs.ForgeGitLab: {
			Minter: &token.GitLabProject{URL: b.gl.URL, Parent: token.New(b.gl.Parent, time.Time{})},
			API:    &workspace.GitLab{URL: b.gl.URL},
		}},
		StateDir: t.TempDir(), Host: "h1", Backoff: time.Millisecond, Trigger: hostTrigger, MaxComments: maxComments,
	})
	require.NoError(t, err)
	b.m = m
	b.job = workspace.Job{ID: "job-7", Job: jobs.Job{Kind: jobs.KindForge, Repo: glProject, Flow: "fix", Task: "t",
		ForgeEvent: jobs.ForgeEvent{Forge: jobs.ForgeGitLab, Number: 3, Trigger: "fix-label"}}}
	return b
}

func (b *glBundle) prepare(t *testing.T) (*workspace.Checkout, string) {
	t.Helper()
	dir := t.TempDir()
	c, err := b.m.Prepare(context.Background(), b.job, dir)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	require.NotNil(t, c.Event(), "a job never runs without its event")
	return c, dir
}

// TestGitLabEvent reads jobs' events from the GitLab double: notes are its
// comments (its own system notes are not), resource label events say who
// added a label, members' access levels are the permissions.
func TestGitLabEvent(t *testing.T) {
	t.Parallel()

	t.Run("IssueNotesAndTriggeringNote", func(t *testing.T) {
		t.Parallel()
		b := glSetup(t, 0)
		b.gl.AddIssue(glProject, 3, "alice", "Fix the parser", "It breaks on tabs.", "bug", "pi:fix")
		first := b.gl.AddNote(glProject, "issue/3", "bob", "I see it too.", false)
		b.gl.AddNote(glProject, "issue/3", "alice", "added ~bug label", true)
		second := b.gl.AddNote(glProject, "issue/3", "carol", "Only with tabs?", false)
		third := b.gl.AddNote(glProject, "issue/3", "dave", "Yes, only tabs.", false)
		trigger := b.gl.AddNote(glProject, "issue/3", "alice", "/pi fix please handle tabs too", false)
		b.gl.SetMember(glProject, "alice", gitlab.DeveloperPermissions)
		b.gl.SetMember(glProject, "bob", gitlab.ReporterPermissions)
		b.gl.SetMember(glProject, "dave", gitlab.MaintainerPermissions)
		b.job.Job.Trigger, b.job.Job.CommentID = "fix-comment", trigger

		c, _ := b.prepare(t)
		person := func(login, perm string) jobs.EventPerson { return jobs.EventPerson{Login: login, Permission: perm} }
		require.Equal(t, &jobs.Event{
			Version: jobs.EventVersion, Forge: jobs.ForgeGitLab,
			Repository: jobs.EventRepository{FullName: glProject, URL: b.gl.URL + "/" + glProject, DefaultBranch: "main"},
			Trigger:    fixTrigger.Event,
			Issue: &jobs.EventIssue{Number: 3, Title: "Fix the parser", Body: "It breaks on tabs.", State: "opened",
				URL: b.gl.URL + "/" + glProject + "/-/issues/3", Author: person("alice", "write"), Labels: []string{"bug", "pi:fix"}},
			Comment: &jobs.EventComment{ID: trigger, Author: person("alice", "write"), Body: "please handle tabs too", CreatedAt: created(trigger)},
			Comments: []jobs.EventComment{
				{ID: first, Author: person("bob", "triage"), Body: "I see it too.", CreatedAt: created(first)},
				{ID: second, Author: person("carol", "none"), Body: "Only with tabs?", CreatedAt: created(second)},
				{ID: third, Author: person("dave", "maintain"), Body: "Yes, only tabs.", CreatedAt: created(third)},
			},
		}, c.Event())
		require.Empty(t, b.gl.Notes(glProject, "issue/3"), "preparing writes nothing on the thread")
	})

	t.Run("MergeRequestWithDiffNotes", func(t *testing.T) {
		t.Parallel()
		b := glSetup(t, 0)
		head := b.git.Commit(t, glProject, "main", "feature", map[string]string{"a.go": "package a\n"})
		n := b.gl.OpenMergeRequest(t, glProject, "feature", "main", "erin", "Add a", "Adds package a.", "feature")
		b.gl.SetDiffs(glProject, n,
			&gitlab.MergeRequestDiff{NewPath: "a.go", OldPath: "a.go", NewFile: true, Diff: "@@ -0,0 +1,2 @@\n+package a\n+\n"},
			&gitlab.MergeRequestDiff{NewPath: "README.md", OldPath: "README.md", Diff: "@@ -1 +1 @@\n-hello\n+hello, world\n"},
			&gitlab.MergeRequestDiff{NewPath: "old.txt", OldPath: "old.txt", DeletedFile: true, Diff: "@@ -1 +0,0 @@\n-gone\n"})
		b.gl.AddNote(glProject, fmt.Sprintf("mr/%d", n), "frank", "Call it b.", false)
		b.gl.SetMember(glProject, "erin", gitlab.OwnerPermissions)
		b.job.Job.Number, b.job.Job.PullRequest, b.job.Job.ReviewID = n, true, 77

		c, _ := b.prepare(t)
		require.Equal(t, head, c.Base())
		ev := c.Event()
		require.Equal(t, &jobs.EventPullRequest{Base: "main", Head: "feature", HeadSHA: head, Files: []jobs.EventFile{
			{Path: "a.go", Status: "added", Additions: 2},
			{Path: "README.md", Status: "modified", Additions: 1, Deletions: 1},
			{Path: "old.txt", Status: "removed", Deletions: 1},
		}}, ev.PullRequest)
		require.Equal(t, "Add a", ev.Issue.Title)
		require.Equal(t, "Adds package a.", ev.Issue.Body)
		require.Equal(t, []string{"feature"}, ev.Issue.Labels)
		require.Equal(t, jobs.EventPerson{Login: "erin", Permission: "admin"}, ev.Issue.Author)
		require.Len(t, ev.Comments, 1)
		require.Equal(t, "Call it b.", ev.Comments[0].Body)
		require.Nil(t, ev.Review, "GitLab has no reviews with a body and a state")
	})

	t.Run("LabelTriggerNamesWhoAddedIt", func(t *testing.T) {
		t.Parallel()
		b := glSetup(t, 0)
		b.gl.AddLabelEvent(glProject, "issue/3", "henry", "pi:fix")
		for i := range 120 { // the latest adding is on the last page
			b.gl.AddLabelEvent(glProject, "issue/3", "ivan", fmt.Sprintf("other-%d", i))
		}
		b.gl.AddLabelEvent(glProject, "issue/3", "gina", "pi:fix")
		b.gl.SetMember(glProject, "gina", gitlab.ReporterPermissions)
		b.job.Job.Label = "pi:fix"
		c, _ := b.prepare(t)
		require.Equal(t, &jobs.EventLabel{Name: "pi:fix", AddedBy: jobs.EventPerson{Login: "gina", Permission: "triage"}}, c.Event().Label)
	})

	t.Run("HostileTextIsClipped", func(t *testing.T) {
		t.Parallel()
		b := glSetup(t, 0)
		b.gl.AddIssue(glProject, 3, "mallory", "Title\x1b[2J\u200d", hostileBody())
		b.gl.AddNote(glProject, "issue/3", "mallory", hostileBody(), false)
		c, _ := b.prepare(t)
		ev := c.Event()
		requireClipped(t, ev.Issue.Body, jobs.MaxEventBodyBytes)
		requireClipped(t, ev.Comments[0].Body, jobs.MaxEventCommentBytes)
		require.Equal(t, "Title[2J", ev.Issue.Title)
		requireEncodedFits(t, ev)
	})

	t.Run("ManyNotesCutToN", func(t *testing.T) {
		t.Parallel()
		b := glSetup(t, 5)
		for i := range 130 {
			b.gl.AddNote(glProject, "issue/3", "bob", fmt.Sprintf("note %d", i), false)
			if i%10 == 0 {
				b.gl.AddNote(glProject, "issue/3", "bob", "changed the description", true)
			}
		}
		c, _ := b.prepare(t)
		ev := c.Event()
		var bodies []string
		for _, cm := range ev.Comments {
			bodies = append(bodies, cm.Body)
		}
		require.Equal(t, []string{"note 125", "note 126", "note 127", "note 128", "note 129"}, bodies, "the last five, oldest first")
		require.Equal(t, 125, ev.CommentsOmitted, "the people's notes not shown; GitLab's own are not comments")
		require.Equal(t, 1, b.gl.Calls("GET issues/3/notes"), "newest first: one page holds the last five")
	})

	t.Run("FetchFailureFailsPrepare", func(t *testing.T) {
		t.Parallel()
		b := glSetup(t, 0)
		b.gl.Fail("GET", "issues/3/notes", 500, 100)
		_, err := b.m.Prepare(context.Background(), b.job, t.TempDir())
		require.ErrorIs(t, err, token.ErrUnavailable)
		var refusal *workspace.RefusalError
		require.False(t, errors.As(err, &refusal))
		require.Empty(t, b.gl.Notes(glProject, "issue/3"), "no note for a job that does not start")
		require.NotEmpty(t, b.gl.Revoked())
		require.ElementsMatch(t, b.gl.Tokens(), b.gl.Revoked(), "a job that does not start leaves no project token")
	})

	t.Run("IssueGoneIsNoRepository", func(t *testing.T) {
		t.Parallel()
		b := glSetup(t, 0)
		b.gl.Fail("GET", "issues/3", 404, 100)
		_, err := b.m.Prepare(context.Background(), b.job, t.TempDir())
		require.ErrorIs(t, err, token.ErrNoRepository)
	})

	t.Run("PublishTitle", func(t *testing.T) {
		t.Parallel()
		b := glSetup(t, 0)
		// Two issues: the jobs of one issue share one merge request.
		b.gl.AddIssue(glProject, 3, "alice", "Fix the parser", "b")
		b.gl.AddIssue(glProject, 4, "alice", "Fix the parser", "b")
		for i, res := range []workspace.Result{
			{Outcome: jobs.OutcomeCompleted, Turns: 4, Dollars: 1.5},
			{Outcome: jobs.OutcomeCompleted, Turns: 4, Dollars: 1.5, PullRequest: &workspace.PullRequestText{Title: "Parse tabs", Body: "Folds tabs."}},
		} {
			b.job.ID, b.job.Job.Number = fmt.Sprintf("job-%d", i), 3+i
			c, dir := b.prepare(t)
			require.NoError(t, os.WriteFile(filepath.Join(dir, "README.md"), []byte("fixed\n"), 0o644))
			_, err := c.Publish(context.Background(), res)
			require.NoError(t, err)
		}
		mrs := b.gl.MergeRequests(glProject)
		require.Len(t, mrs, 2)
		require.Equal(t, "Draft: pi: Fix the parser", mrs[0].Title)
		require.Equal(t, "Draft: Parse tabs", mrs[1].Title)
		for i, mr := range mrs {
			require.Contains(t, mr.Description, fmt.Sprintf("Refs #%d\n", 3+i))
			require.Contains(t, mr.Description, "$1.50")
			require.Contains(t, mr.Description, "4 turns")
		}
		require.True(t, strings.HasPrefix(mrs[1].Description, "Folds tabs.\n\n"))
		require.Contains(t, mrs[0].Description, "job `job-0`")
	})
}
