package workspace_test

import (
	"context"
	"errors"
	"fmt"
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

// statusJob is a job of the host's fix-comment trigger on issue 5.
func statusJob(id string) workspace.Job {
	j := issueJob(id, 5)
	j.Job.Trigger = fixTrigger.Event.Name
	return j
}

func TestStatusComment(t *testing.T) {
	t.Parallel()

	t.Run("OneCommentForThreeFailedAttempts", func(t *testing.T) {
		t.Parallel()
		b := setup(t, workspace.PublishPolicy{}, workspace.Limits{})
		withGitHubConfig(t, b, nil)
		job := statusJob("job-s1")
		steps := []workspace.Status{
			{State: workspace.StatusWaiting, Reason: jobs.ReasonDollarCap, Until: time.Date(2026, 12, 7, 18, 0, 0, 0, time.UTC)},
			{State: workspace.StatusRunning, Attempt: 1, Attempts: 3},
			{State: workspace.StatusRetrying, Reason: jobs.ReasonExitOther, Attempt: 1, Attempts: 3},
			{State: workspace.StatusRunning, Attempt: 2, Attempts: 3},
			{State: workspace.StatusRetrying, Reason: jobs.ReasonExitOther, Attempt: 2, Attempts: 3},
			{State: workspace.StatusRunning, Attempt: 3, Attempts: 3},
			{State: workspace.StatusFailed, Reason: jobs.ReasonExitOther, Attempt: 3, Attempts: 3, Turns: 4, Dollars: 0.5},
		}
		for i, s := range steps {
			writeStatus(t, b.m, job, s)
			comments := b.gh.Comments(repo, 5)
			require.Len(t, comments, 1, "step %d: one status comment, edited in place", i)
			if s.State != workspace.StatusFailed {
				require.NotContains(t, comments[0], "failed", "step %d: no failure text before the last attempt", i)
			}
		}
		last := b.gh.Comments(repo, 5)[0]
		require.Contains(t, last, "failed (`exit-other`) after 3 attempt(s)")
		require.Contains(t, last, "4 turns, $0.50")
		require.Contains(t, last, "job-s1")
		require.Equal(t, len(steps)-1, b.gh.CommentEdits())
		require.ElementsMatch(t, b.gh.Tokens(), b.gh.Revoked(), "every token minted for a status is revoked")
	})

	t.Run("SameStateWritesNothing", func(t *testing.T) {
		t.Parallel()
		b := setup(t, workspace.PublishPolicy{}, workspace.Limits{})
		withGitHubConfig(t, b, nil)
		job := statusJob("job-s2")
		until := time.Date(2026, 12, 7, 18, 0, 0, 0, time.UTC)
		for i := range 5 {
			// Deferred again and again for the same reason: only its due time changes.
			writeStatus(t, b.m, job, workspace.Status{State: workspace.StatusWaiting, Reason: jobs.ReasonThreadBusy, Until: until.Add(time.Duration(i) * time.Second)})
		}
		require.Len(t, b.gh.Comments(repo, 5), 1)
		require.Zero(t, b.gh.CommentEdits(), "the same state is not written again")
		require.Len(t, b.gh.Tokens(), 1, "nor is a token minted for it")
	})

	t.Run("AnotherHostEditsTheSameComment", func(t *testing.T) {
		t.Parallel()
		b := setup(t, workspace.PublishPolicy{}, workspace.Limits{})
		withGitHubConfig(t, b, nil)
		first := b.m
		withGitHubConfig(t, b, nil) // a second host: a Manager that remembers nothing
		job := statusJob("job-s3")
		writeStatus(t, first, job, workspace.Status{State: workspace.StatusRetrying, Reason: jobs.ReasonExitOther, Attempt: 1, Attempts: 2})
		writeStatus(t, b.m, job, workspace.Status{State: workspace.StatusCompleted, PullRequestURL: "https://example.test/pr/1"})
		comments := b.gh.Comments(repo, 5)
		require.Len(t, comments, 1, "the second host found the first's comment by its marker")
		require.Contains(t, comments[0], "Pull request: https://example.test/pr/1")
	})

	t.Run("SomeoneElsesMarkerIsNotEdited", func(t *testing.T) {
		t.Parallel()
		b := setup(t, workspace.PublishPolicy{}, workspace.Limits{})
		withGitHubConfig(t, b, nil)
		job := statusJob("job-s4")
		b.gh.AddIssueComment(repo, 5, "mallory", "spoof <!-- pidispatch:status job=job-s4 -->")
		writeStatus(t, b.m, job, workspace.Status{State: workspace.StatusRunning})
		require.Zero(t, b.gh.CommentEdits(), "a comment by another author is never edited")
		require.Len(t, b.gh.Comments(repo, 5), 1, "the host wrote its own")
	})

	t.Run("RefusedOutputsGetALineEach", func(t *testing.T) {
		t.Parallel()
		b := setup(t, workspace.PublishPolicy{}, workspace.Limits{})
		withGitHubConfig(t, b, nil)
		job := statusJob("job-s5")
		writeStatus(t, b.m, job, workspace.Status{State: workspace.StatusCompleted, Outputs: []jobs.OutputResult{
			{File: jobs.OutputComment, Status: jobs.OutputPosted},
			{File: jobs.OutputLabels, Status: jobs.OutputRefused, Reason: "label \"admin\" is not allowed\nsecond line"},
		}})
		body := b.gh.Comments(repo, 5)[0]
		require.Contains(t, body, "`labels.json` was not posted: label \"admin\" is not allowed second line")
		require.NotContains(t, body, "`comment.md`")
	})

	t.Run("NoTriggerOfTheHostNoComment", func(t *testing.T) {
		t.Parallel()
		b := setup(t, workspace.PublishPolicy{}, workspace.Limits{})
		withGitHubConfig(t, b, func(c *workspace.Config) { c.Admit = admitFix })
		job := statusJob("job-s6")
		job.Job.Trigger = "written-by-someone-with-valkey"
		writeStatus(t, b.m, job, workspace.Status{State: workspace.StatusRefused, Reason: jobs.ReasonJobUnsigned})
		require.Empty(t, b.gh.Comments(repo, 5))
		require.Empty(t, b.gh.Tokens(), "no token is minted for it either")
	})

	t.Run("GitLabOneNote", func(t *testing.T) {
		t.Parallel()
		b := glSetup(t, 0)
		b.job.Job.Trigger = fixTrigger.Event.Name
		for _, s := range []workspace.Status{
			{State: workspace.StatusRunning, Attempt: 1, Attempts: 2},
			{State: workspace.StatusRetrying, Reason: jobs.ReasonExitOther, Attempt: 1, Attempts: 2},
			{State: workspace.StatusFailed, Reason: jobs.ReasonExitOther, Attempt: 2, Attempts: 2},
		} {
			writeStatus(t, b.m, b.job, s)
		}
		notes := b.gl.Notes(glProject, "issue/3")
		require.Len(t, notes, 1)
		require.True(t, strings.Contains(notes[0], "failed (`exit-other`)"), notes[0])
		require.Equal(t, 2, b.gl.NoteEdits())
		require.Equal(t, []string{forgetest.ParentUser}, b.gl.NoteAuthors(glProject, "issue/3"), "written by GITLAB_TOKEN's user")
		require.Empty(t, b.gl.Mints(), "a status note mints no project token")
	})
}

// TestCloseRevokesOnACancelledContext: a job stopped mid-run (its context
// cancelled, the worker stopping) still has its tokens revoked.
func TestCloseRevokesOnACancelledContext(t *testing.T) {
	t.Parallel()
	b := setup(t, workspace.PublishPolicy{}, workspace.Limits{})
	ctx, cancel := context.WithCancel(context.Background())
	c, err := b.m.Prepare(ctx, b.job, b.dir)
	require.NoError(t, err)
	require.NotEmpty(t, b.gh.Tokens())
	cancel()
	_, err = c.Publish(ctx, workspace.Result{Outcome: jobs.OutcomeFailed, Reason: jobs.ReasonWorkerShutdown})
	require.NoError(t, err)
	require.NoError(t, c.Close())
	require.ElementsMatch(t, b.gh.Tokens(), b.gh.Revoked())
}

// admitFix admits the jobs of the host's fix-comment trigger only.
func admitFix(j jobs.Job) error {
	if j.Trigger != fixTrigger.Event.Name {
		return errors.New("trigger " + j.Trigger + " is not in this host's triggers file")
	}
	return nil
}

// A job no trigger of the host covers is refused by Prepare before any
// token is minted.
func TestPrepareRefusesAJobNoTriggerCovers(t *testing.T) {
	t.Parallel()
	b := setup(t, workspace.PublishPolicy{}, workspace.Limits{})
	withGitHubConfig(t, b, func(c *workspace.Config) { c.Admit = admitFix })
	_, err := b.m.Prepare(context.Background(), b.job, b.dir) // trigger fix-label
	require.ErrorIs(t, err, workspace.ErrNotAgreed)
	require.Empty(t, b.gh.Tokens(), "no token minted")
	require.Empty(t, b.gh.Comments(repo, 5))
}

// writeStatus writes s to job's status comment through m, and answers the
// comment's address.
func writeStatus(t *testing.T, m *workspace.Manager, job workspace.Job, s workspace.Status) string {
	t.Helper()
	url, err := m.Status(context.Background(), job, s)
	require.NoError(t, err)
	return url
}

// The intake's queued comment is the job's one status comment: written
// once whatever retries it, found and edited by the worker that takes the
// job (another Manager, remembering nothing), and never put back to queued
// by a delivery handled again after the job moved on.
func TestQueuedStatusComment(t *testing.T) {
	t.Parallel()
	b := setup(t, workspace.PublishPolicy{}, workspace.Limits{})
	withGitHubConfig(t, b, nil)
	receiver := b.m
	withGitHubConfig(t, b, nil)
	retried := b.m // the same delivery handled again, after a restart
	withGitHubConfig(t, b, nil)
	worker := b.m
	job := statusJob("gh-queued-1")

	url, err := receiver.Queued(context.Background(), job)
	require.NoError(t, err)
	require.Regexp(t, `/issues/5#issuecomment-\d+$`, url)
	again, err := retried.Queued(context.Background(), job)
	require.NoError(t, err)
	require.Equal(t, url, again, "found by its marker, not written twice")
	comments := b.gh.Comments(repo, 5)
	require.Len(t, comments, 1)
	require.Contains(t, comments[0], "queued, waiting for a worker.")
	require.Contains(t, comments[0], "<!-- pidispatch:status job=gh-queued-1 -->")

	running, err := worker.Status(context.Background(), job, workspace.Status{State: workspace.StatusRunning})
	require.NoError(t, err)
	require.Equal(t, url, running, "the worker edits the queued comment")
	_, err = retried.Queued(context.Background(), job)
	require.NoError(t, err)
	withGitHubConfig(t, b, nil)
	_, err = b.m.Queued(context.Background(), job)
	require.NoError(t, err)
	comments = b.gh.Comments(repo, 5)
	require.Len(t, comments, 1, "one status comment")
	require.Contains(t, comments[0], "running.", "never put back to queued")
	require.Equal(t, 1, b.gh.CommentEdits())
	require.ElementsMatch(t, b.gh.Tokens(), b.gh.Revoked(), "every token minted for a status is revoked")
}

// glStatusManager is a Manager of the GitLab double's project with f as its
// GitLab forge (a receiver's, or a worker's), remembering nothing.
func glStatusManager(t *testing.T, b *glBundle, f workspace.Forge) *workspace.Manager {
	t.Helper()
	m, err := workspace.New(workspace.Config{Forges: map[jobs.Forge]workspace.Forge{jobs.ForgeGitLab: f},
		StateDir: t.TempDir(), Host: "h1", Backoff: time.Millisecond, Trigger: hostTrigger})
	require.NoError(t, err)
	return m
}

// glReceiverForge is GitLab as the receiver writes queued notes: with the
// parent token, never a project token.
func glReceiverForge(b *glBundle) workspace.Forge {
	parent := token.Static{Token: token.New(b.gl.Parent, time.Time{})}
	return workspace.Forge{API: &workspace.GitLab{URL: b.gl.URL}, Minter: parent, Status: parent}
}

// glWorkerForge is GitLab as a worker uses it: a project token per job.
func glWorkerForge(b *glBundle) workspace.Forge {
	return workspace.Forge{API: &workspace.GitLab{URL: b.gl.URL},
		Minter: &token.GitLabProject{URL: b.gl.URL, Parent: token.New(b.gl.Parent, time.Time{})}}
}

// On GitLab too the receiver's queued note is the job's one status note:
// the receiver writes it with GITLAB_TOKEN's user (a Maintainer, as the
// permissions table asks), a delivery handled again finds it, and the
// workers that take the job (a live workspace with its own project token,
// then another host) edit that note, never one of their own: each job's
// project token is a bot user that GitLab lets edit only its own notes. A
// job refused before it ran edits its queued note too.
func TestQueuedStatusNoteGitLab(t *testing.T) {
	t.Parallel()
	b := glSetup(t, 0)
	b.gl.SetMember(glProject, forgetest.ParentUser, gitlab.MaintainerPermissions)
	b.job.Job.Trigger = fixTrigger.Event.Name
	job := b.job
	receiver := glStatusManager(t, b, glReceiverForge(b))
	retried := glStatusManager(t, b, glReceiverForge(b))

	url, err := receiver.Queued(context.Background(), job)
	require.NoError(t, err)
	require.Regexp(t, `/acme/platform/web/-/issues/3#note_\d+$`, url)
	again, err := retried.Queued(context.Background(), job)
	require.NoError(t, err)
	require.Equal(t, url, again, "found by its marker and author, not written twice")
	notes := b.gl.Notes(glProject, "issue/3")
	require.Len(t, notes, 1, "before any worker: one note")
	require.Contains(t, notes[0], "queued, waiting for a worker.")
	require.Contains(t, notes[0], "<!-- pidispatch:status job=job-7 -->")
	require.Empty(t, b.gl.Mints(), "the receiver mints no project token")

	// A worker takes the job: its workspace holds the job's project token.
	worker := glStatusManager(t, b, glWorkerForge(b))
	c, err := worker.Prepare(context.Background(), job, t.TempDir())
	require.NoError(t, err)
	running, err := worker.Status(context.Background(), job, workspace.Status{State: workspace.StatusRunning, Attempt: 1, Attempts: 2})
	require.NoError(t, err)
	require.Equal(t, url, running, "the worker edits the queued note")
	_, err = worker.Status(context.Background(), job, workspace.Status{State: workspace.StatusRetrying, Reason: jobs.ReasonExitOther, Attempt: 1, Attempts: 2})
	require.NoError(t, err)
	_, err = c.Publish(context.Background(), workspace.Result{Outcome: jobs.OutcomeFailed, Reason: jobs.ReasonExitOther})
	require.NoError(t, err)
	require.NoError(t, c.Close())

	// The retry runs on another host, which remembers nothing.
	second := glStatusManager(t, b, glWorkerForge(b))
	_, err = second.Status(context.Background(), job, workspace.Status{State: workspace.StatusRunning, Attempt: 2, Attempts: 2})
	require.NoError(t, err)
	done, err := second.Status(context.Background(), job, workspace.Status{State: workspace.StatusCompleted, PullRequestURL: "https://example.test/mr/1"})
	require.NoError(t, err)
	require.Equal(t, url, done)
	_, err = glStatusManager(t, b, glReceiverForge(b)).Queued(context.Background(), job)
	require.NoError(t, err)

	notes = b.gl.Notes(glProject, "issue/3")
	require.Len(t, notes, 1, "one status note for the job")
	require.Contains(t, notes[0], "done. Pull request: https://example.test/mr/1", "never put back to queued")
	require.Equal(t, []string{forgetest.ParentUser}, b.gl.NoteAuthors(glProject, "issue/3"), "written by GITLAB_TOKEN's user")
	require.Equal(t, 4, b.gl.NoteEdits())
	require.Zero(t, b.gl.NoteEditsRefused(), "no edit the forge refused")
	require.NotEmpty(t, b.gl.Mints(), "the job's workspace had its project token")
	require.ElementsMatch(t, b.gl.Tokens(), b.gl.Revoked(), "every project token is revoked")

	// A job refused before it ran (an image the host does not allow).
	refusedJob := b.job
	refusedJob.ID, refusedJob.Job.Number = "job-8", 4
	_, err = receiver.Queued(context.Background(), refusedJob)
	require.NoError(t, err)
	_, err = glStatusManager(t, b, glWorkerForge(b)).Status(context.Background(), refusedJob,
		workspace.Status{State: workspace.StatusRefused, Reason: jobs.ReasonImageNotAllowed})
	require.NoError(t, err)
	notes = b.gl.Notes(glProject, "issue/4")
	require.Len(t, notes, 1, "the refusal edits the queued note")
	require.Contains(t, notes[0], "refused (`image-not-allowed`)")
}

// An attacker who can comment on the thread writes a note carrying the
// job's marker before the receiver writes its queued note (a job's id is
// the digest of a delivery body the attacker may have seen). GITLAB_TOKEN's
// user is a Maintainer, whom GitLab lets edit anyone's note: the host must
// still neither adopt nor edit the attacker's note, only one it wrote.
func TestStatusNoteGitLabSpoofedMarker(t *testing.T) {
	t.Parallel()
	b := glSetup(t, 0)
	b.gl.SetMember(glProject, forgetest.ParentUser, gitlab.MaintainerPermissions)
	b.job.Job.Trigger = fixTrigger.Event.Name
	const spoof = "click https://evil.test <!-- pidispatch:status job=job-7 -->"
	spoofed := b.gl.AddNote(glProject, "issue/3", "mallory", spoof, false)

	url, err := glStatusManager(t, b, glReceiverForge(b)).Queued(context.Background(), b.job)
	require.NoError(t, err)
	_, err = glStatusManager(t, b, glWorkerForge(b)).Status(context.Background(), b.job, workspace.Status{State: workspace.StatusRunning})
	require.NoError(t, err)
	require.Equal(t, spoof, b.gl.Note(glProject, "issue/3", spoofed), "the attacker's note is never edited")
	notes := b.gl.Notes(glProject, "issue/3")
	require.Len(t, notes, 1, "the host wrote its own note")
	require.Contains(t, notes[0], "running.", "and edits that one")
	require.NotContains(t, url, fmt.Sprintf("#note_%d", spoofed), "the attacker's note is not the job's")
}

// While GitLab does not say who GITLAB_TOKEN's user is (GET /user fails),
// a note carrying the job's marker cannot be known as the host's: the host
// writes its own rather than edit the attacker's.
func TestStatusNoteGitLabSpoofedMarkerSelfUnknown(t *testing.T) {
	t.Parallel()
	b := glSetup(t, 0)
	b.gl.SetMember(glProject, forgetest.ParentUser, gitlab.MaintainerPermissions)
	b.job.Job.Trigger = fixTrigger.Event.Name
	const spoof = "click https://evil.test <!-- pidispatch:status job=job-7 -->"
	spoofed := b.gl.AddNote(glProject, "issue/3", "mallory", spoof, false)
	b.gl.Fail("GET", forgetest.GLUser, 500, 100)

	_, err := glStatusManager(t, b, glReceiverForge(b)).Queued(context.Background(), b.job)
	require.NoError(t, err)
	_, err = glStatusManager(t, b, glWorkerForge(b)).Status(context.Background(), b.job, workspace.Status{State: workspace.StatusRunning})
	require.NoError(t, err)
	require.Equal(t, spoof, b.gl.Note(glProject, "issue/3", spoofed), "the attacker's note is never edited")
	require.NotEmpty(t, b.gl.Notes(glProject, "issue/3"), "the host wrote its own")
}
