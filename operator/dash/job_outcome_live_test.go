package dash_test

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/pidispatch/pidispatch/fleetstate"
	"github.com/pidispatch/pidispatch/internal/testkit/browsertest"
	"github.com/pidispatch/pidispatch/jobs"
	"github.com/pidispatch/pidispatch/operator"
	"github.com/pidispatch/pidispatch/operator/dash"
)

// The job page shows what became of the run's pull request as the
// receiver's store knows it: merged, with the person's push. A peer's
// record claiming its own pull request merged shows no outcome.
func TestJobPageShowsThePullRequestOutcomeFromTheStore(t *testing.T) {
	db := liveFleet(t)
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Second)
	prs := fleetstate.NewPullRequests(db.Client)
	require.NoError(t, prs.Record(ctx, forgePull, jobs.PullRequestOutcome{State: jobs.PullRequestOpen, HumanCommits: 1, UpdatedAt: now.Add(-time.Minute)}))
	require.NoError(t, prs.Record(ctx, forgePull, jobs.PullRequestOutcome{State: jobs.PullRequestMerged, UpdatedAt: now}))
	const forged = "gh-forged-1"
	claim := jobs.Record{JobID: forged, Kind: jobs.KindForge, Target: "acme/web", Flow: "fix", StartedAt: now.Add(-time.Hour),
		EndedAt: now.Add(-50 * time.Minute), Outcome: jobs.OutcomeCompleted, Reason: jobs.ReasonCompleted, Attempt: 1, Host: liveHost,
		PullRequestURL: "https://forge.example/acme/web/pull/99",
		PullRequest:    &jobs.PullRequestOutcome{State: jobs.PullRequestMerged, UpdatedAt: now}}
	require.NoError(t, fleetstate.NewMirror(db.Client, fleetstate.MirrorConfig{}).Mirror(ctx, claim))

	src, err := dash.NewValkey(db.Client, dash.ValkeyConfig{Explain: operator.ExplainOptions{PullRequests: prs}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = src.Close(context.Background()) })
	read := func(id string) []jobs.Record {
		t.Helper()
		d, err := src.Job(ctx, id) // a finished job: on no queue, its record still shown
		require.ErrorIs(t, err, operator.ErrJobNotFound)
		require.Len(t, d.Explanation.Records, 1)
		return d.Explanation.Records
	}
	got := read(forgeRun)[0].PullRequest
	require.NotNil(t, got)
	require.Equal(t, jobs.PullRequestMerged, got.State)
	require.Equal(t, 1, got.HumanCommits)
	require.Nil(t, read(forged)[0].PullRequest, "a record's own claim is shown")

	h, err := dash.New(src, dash.Options{Refresh: 500 * time.Millisecond, PullRequests: prs})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	login := h.LoginURL(srv.URL)
	base := login[:strings.Index(login, dash.LoginPath)]
	b := browsertest.Chromium(t, liveTimeout)
	require.NoError(t, chromedp.Do(b.Ctx,
		chromedp.Navigate(login),
		chromedp.Navigate(base+"/job?id="+forgeRun),
		browsertest.WaitText(30*time.Second, "job "+forgeRun, forgePull+" (merged, +1 human push)"),
	))
}
