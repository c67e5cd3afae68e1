package workspace_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pidispatch/pidispatch/forge/workspace"
	"github.com/pidispatch/pidispatch/jobs"
)

// hostileID is a job id a Valkey writer chose to break out of the code span
// the host puts an id in, then ping an organisation, run HTML and pass an
// option; CheckJobID allows every character of it.
const hostileID = "--output=/tmp/x` @org/everyone <img src=x onerror=alert(1)> [x](javascript:alert(1)) `"

// A job's refused outputs reach its status comment: a file name made to
// close its code span and a refusal's reason quoting the job's label
// (mention, HTML, a link, a bidi control) are shown as text there.
func TestStatusCommentShowsJobStringsAsText(t *testing.T) {
	t.Parallel()
	b := setup(t, workspace.PublishPolicy{}, workspace.Limits{})
	withGitHubConfig(t, b, nil)
	job := statusJob(hostileID)
	writeStatus(t, b.m, job, workspace.Status{State: workspace.StatusCompleted, Outputs: []jobs.OutputResult{
		{File: "x` @org/everyone <b>y</b> `z", Status: jobs.OutputRefused, Reason: "not an output the host posts"},
		{File: jobs.OutputLabels, Status: jobs.OutputRefused,
			Reason: `label "@org/everyone <img src=x> ![i](http://evil/i.png) #1 <!channel>" is not in the trigger's publish.labels`},
		{File: jobs.OutputComment, Status: jobs.OutputRefused, Reason: "holds U+202E \u202egnp.exe"},
	}})
	comments := b.gh.Comments(repo, 5)
	require.Len(t, comments, 1)
	body := comments[0]
	t.Log(body)
	require.Contains(t, body, "- ``x` @org/everyone <b>y</b> `z`` was not posted", "the file name stays in its code span")
	reason := body[strings.Index(body, "`labels.json` was not posted: "):]
	reason = reason[:strings.IndexByte(reason, '\n')]
	for _, bad := range []string{"@org/everyone", "<img", "<!channel>", "](", "#1 "} {
		require.NotContains(t, reason, bad, "the reason is text")
	}
	require.Contains(t, reason, "@&#8203;org/everyone", "the reader still sees @org/everyone")
	require.NotContains(t, body, "\u202e")
	require.Contains(t, body, `&#92;u202egnp.exe`, "the bidi control is shown, not obeyed")
	require.Contains(t, body, "<!-- pidispatch:status job="+jobs.SanitizeJobID(hostileID)+" -->")
}

// The pull request's footer shows the job's id, whatever it holds, in one
// code span that the id cannot close: no mention, no HTML, no link.
func TestPullRequestFooterShowsIDAsCode(t *testing.T) {
	t.Parallel()
	b := setup(t, workspace.PublishPolicy{}, workspace.Limits{})
	b.job.ID = hostileID
	c := b.prepare(t)
	b.write(t, "src/app.go", "package app\n\nfunc Fixed() {}\n")
	_, err := c.Publish(context.Background(), completed)
	require.NoError(t, err)
	pulls := b.gh.Pulls(repo)
	require.Len(t, pulls, 1)
	body := pulls[0].GetBody()
	t.Log(body)
	require.Contains(t, body, "Proposed by pidispatch job `` "+hostileID+" `` (flow `fix`; ")
}
