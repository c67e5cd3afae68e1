package dash_test

import (
	"context"
	"encoding/json"
	"strings"
	"time"

	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/fleetstate"
	"github.com/pidispatch/pidispatch/internal/testkit/browsertest"
	"github.com/pidispatch/pidispatch/observe/transcript"
	"github.com/pidispatch/pidispatch/operator/dash"
	"github.com/pidispatch/pidispatch/queue"
)

// The job page, in Chromium, shows a running job's state and its live
// transcript, and follows the transcript as lines arrive; the list page
// names the waiting and delayed jobs with their ids. Markup a job printed
// is shown as text.
func TestJobPageShowsLiveTranscriptAndQueuedIDs(t *testing.T) {
	db := liveFleet(t)
	ctx := context.Background()
	live := transcript.NewLive(db.Client)
	now := time.Now().UnixMilli()
	require.NoError(t, live.Append(ctx, runningJob, []transcript.Entry{
		{At: now, Kind: transcript.KindOut, Attempt: 1, Line: "agent says hello"},
		{At: now, Kind: transcript.KindOut, Attempt: 1, Line: `<img src=x onerror="window.__pwned=1">`},
		{At: now, Kind: transcript.KindModel, Attempt: 1, Call: &transcript.Call{Provider: "anthropic", Model: "claude-x", Status: 200, Input: 10, Output: 5, Micros: 2500}},
	}))
	shared, err := queue.New(db.Client, fleet.SharedQueue, queue.Config{})
	require.NoError(t, err)
	_, _, err = shared.Add(ctx, "pi", json.RawMessage(`{}`), queue.AddOptions{JobID: "waiting-job-1"})
	require.NoError(t, err)
	_, _, err = shared.Add(ctx, "pi", json.RawMessage(`{}`), queue.AddOptions{JobID: "delayed-job-1", Delay: time.Hour})
	require.NoError(t, err)

	// A held job: its conditions and next check, as explain says them.
	_, _, err = shared.Add(ctx, "pi", json.RawMessage(`{"kind":"forge","repo":"acme/app","flow":"fix","task":"t","waitFor":[{"after":"1h"}]}`), queue.AddOptions{JobID: "held-page-1"})
	require.NoError(t, err)
	holds := fleetstate.NewHolds(db.Client, fleetstate.HoldsConfig{})
	_, err = holds.Begin(ctx, "held-page-1", "", dispatch.HoldBounds{AfterDelay: time.Hour, AfterMax: 24 * time.Hour, WaitMax: 2 * time.Hour})
	require.NoError(t, err)
	_, err = holds.Checked(ctx, "held-page-1", "", dispatch.CheckOutcome{})
	require.NoError(t, err)
	tok := queue.NewToken()
	j, err := shared.Fetch(ctx, tok)
	require.NoError(t, err)
	require.Equal(t, "waiting-job-1", j.ID) // the oldest first: put it back
	require.NoError(t, shared.Defer(ctx, j.ID, tok, time.Millisecond))
	for {
		tok = queue.NewToken()
		j, err = shared.Fetch(ctx, tok)
		require.NoError(t, err)
		require.NotNil(t, j)
		if j.ID == "held-page-1" {
			require.NoError(t, shared.Defer(ctx, j.ID, tok, 30*time.Second))
			break
		}
		require.NoError(t, shared.Defer(ctx, j.ID, tok, time.Millisecond))
	}

	login := serveLive(t, db, dash.Options{}, false)
	url := login[:strings.Index(login, dash.LoginPath)] // the session first, then the pages
	b := browsertest.Chromium(t, liveTimeout)
	require.NoError(t, chromedp.Do(b.Ctx,
		chromedp.Navigate(login),
		chromedp.Navigate(url+"/job?id="+runningJob),
		browsertest.WaitText(30*time.Second, "job "+runningJob, "active", "agent says hello", `<img src=x onerror="window.__pwned=1">`, "model anthropic/claude-x 200", "running"),
	))
	require.NoError(t, live.Append(ctx, runningJob, []transcript.Entry{{At: time.Now().UnixMilli(), Kind: transcript.KindOut, Attempt: 1, Line: "a later line"}}))
	require.NoError(t, chromedp.Do(b.Ctx, browsertest.WaitText(30*time.Second, "a later line")))
	pwned, err := chromedp.Run(b.Ctx, chromedp.Evaluate[bool](`window.__pwned === 1`))
	require.NoError(t, err)
	require.False(t, pwned)
	browsertest.Screenshot(t, b, "job-page")

	require.NoError(t, chromedp.Do(b.Ctx,
		chromedp.Navigate(url+"/job"),
		browsertest.WaitText(30*time.Second, "waiting-job-1", "delayed-job-1", "waiting", "delayed"),
	))
	browsertest.Screenshot(t, b, "queued-page")

	require.NoError(t, chromedp.Do(b.Ctx,
		chromedp.Navigate(url+"/job?id=held-page-1"),
		browsertest.WaitText(30*time.Second, "job held-page-1", "delayed", "next check about"),
	))
	browsertest.Screenshot(t, b, "held-job-page")
}
