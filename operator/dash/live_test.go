package dash_test

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/pidispatch/pidispatch/config"
	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/fleetstate"
	"github.com/pidispatch/pidispatch/internal/testkit/browsertest"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/jobs"
	"github.com/pidispatch/pidispatch/operator/dash"
	"github.com/pidispatch/pidispatch/queue"
	"github.com/pidispatch/pidispatch/registry"
)

const (
	liveHost = "dash-live-1"
	// hostileRun is a finished run's job id that is markup: the page must
	// show it as text and run nothing.
	hostileRun  = `<img src=x onerror="window.__pwned=1">done-7`
	runningJob  = "running-job-1"
	heldJob     = "held-job-1"
	forgeRun    = "gh-run-1"
	forgePull   = "https://forge.example/acme/web/pull/7"
	forgeStatus = "https://forge.example/acme/web/issues/5#issuecomment-77"
	liveTimeout = 90 * time.Second
)

// liveFleet is a small fleet on a real Valkey: one registered host, one
// finished run in the run mirror (with its spend), one running job taken by
// that host, one held job and one container start.
func liveFleet(t *testing.T) *livetest.ValkeyDB {
	t.Helper()
	db := livetest.Valkey(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	reg, err := registry.New(db.Client, liveHost, registry.Facts{
		Routes: registry.Value(true), Concurrency: registry.Value(2), Caps: registry.Value("s:gh"),
	}, registry.Config{Version: "1.2.3"})
	require.NoError(t, err)
	require.NoError(t, reg.Start(ctx))
	t.Cleanup(func() { _ = reg.Close(context.Background()) })

	end := time.Now().Add(-time.Minute).UTC()
	exit := 0
	rec := jobs.Record{JobID: hostileRun, Kind: jobs.KindManual, Target: "/src/app", Flow: "fix",
		StartedAt: end.Add(-42 * time.Second), EndedAt: end, Outcome: jobs.OutcomeCompleted,
		Reason: jobs.ReasonCompleted, ExitCode: &exit, Attempt: 1, Host: liveHost, Image: "pi-job:test",
		Spend: &jobs.Spend{Dollars: 0.4321, Micros: 432100, Basis: jobs.BasisMetered, Calls: 3}}
	require.NoError(t, fleetstate.NewMirror(db.Client, fleetstate.MirrorConfig{}).Mirror(ctx, rec))
	forgeRec := jobs.Record{JobID: forgeRun, Kind: jobs.KindForge, Target: "acme/web", Flow: "fix",
		StartedAt: end.Add(-2 * time.Minute), EndedAt: end.Add(-time.Minute), Outcome: jobs.OutcomeCompleted,
		Reason: jobs.ReasonCompleted, ExitCode: &exit, Attempt: 1, Host: liveHost, Image: "pi-job:test",
		PullRequestURL: forgePull, StatusCommentURL: forgeStatus}
	require.NoError(t, fleetstate.NewMirror(db.Client, fleetstate.MirrorConfig{}).Mirror(ctx, forgeRec))

	q, err := queue.New(db.Client, fleet.HostQueueName(liveHost), queue.Config{WorkerName: liveHost})
	require.NoError(t, err)
	require.NoError(t, q.Declare(ctx))
	_, _, err = q.Add(ctx, "pi", json.RawMessage(`{}`), queue.AddOptions{JobID: runningJob})
	require.NoError(t, err)
	j, err := q.Fetch(ctx, queue.NewToken())
	require.NoError(t, err)
	require.Equal(t, runningJob, j.ID)

	_, err = fleetstate.NewHolds(db.Client, fleetstate.HoldsConfig{}).Begin(ctx, heldJob, "", dispatch.HoldBounds{WaitMax: time.Hour})
	require.NoError(t, err)
	_, err = fleetstate.NewBudget(db.Client, fleetstate.BudgetConfig{WeeklyCap: 40}).Reserve(ctx, "/src/app", nil)
	require.NoError(t, err)
	return db
}

// serveLive serves the dashboard over db on a free loopback port and returns
// its one-time login address, with the
// Valkey source's actions when actions is set.
func serveLive(t *testing.T, db *livetest.ValkeyDB, opts dash.Options, actions bool) string {
	t.Helper()
	src, err := dash.NewValkey(db.Client, dash.ValkeyConfig{DailyCap: 10, WeeklyCap: 40})
	require.NoError(t, err)
	t.Cleanup(func() { _ = src.Close(context.Background()) })
	if actions {
		opts.Actions = src
	}
	if opts.Refresh == 0 {
		opts.Refresh = 500 * time.Millisecond
	}
	h, err := dash.New(src, opts)
	require.NoError(t, err)
	srv := httptest.NewServer(h) // a free loopback port
	t.Cleanup(srv.Close)
	return h.LoginURL(srv.URL)
}

// The Valkey source reads every section of a live fleet.
func TestValkeySourceReadsALiveFleet(t *testing.T) {
	db := liveFleet(t)
	ctx := context.Background()
	src, err := dash.NewValkey(db.Client, dash.ValkeyConfig{WeeklyCap: 40})
	require.NoError(t, err)

	hosts, err := src.Hosts(ctx)
	require.NoError(t, err)
	require.Len(t, hosts, 1)
	require.Equal(t, liveHost, hosts[0].Name)
	require.Equal(t, "s:gh", hosts[0].Caps)

	rep, err := src.Queues(ctx)
	require.NoError(t, err)
	require.Len(t, rep.PerQueue, 2)
	require.Equal(t, fleet.HostQueueName(liveHost), rep.PerQueue[1].Queue)
	require.Equal(t, int64(1), rep.PerQueue[1].Active)

	running, err := src.Running(ctx, 10)
	require.NoError(t, err)
	require.Len(t, running, 1)
	require.Equal(t, dash.Running{JobID: runningJob, Queue: fleet.HostQueueName(liveHost), Host: liveHost,
		Since: running[0].Since}, running[0])
	require.WithinDuration(t, time.Now(), running[0].Since, time.Minute)

	held, err := src.Held(ctx, 10)
	require.NoError(t, err)
	require.Len(t, held, 1)
	require.Equal(t, heldJob, held[0].JobID)
	require.WithinDuration(t, time.Now(), held[0].Since, time.Minute)

	runs, degraded, err := src.Runs(ctx, 10)
	require.NoError(t, err)
	require.Empty(t, degraded, "nothing to note")
	require.Len(t, runs, 2)
	require.Equal(t, hostileRun, runs[0].JobID, "newest first")
	require.InDelta(t, 0.4321, runs[0].Spend.Dollars, 1e-9)
	require.Equal(t, forgePull, runs[1].PullRequestURL)

	starts, err := src.Starts(ctx)
	require.NoError(t, err)
	require.Equal(t, dash.Starts{Day: 1, Week: 1, DailyCap: config.DefaultDailyCap, WeeklyCap: 40}, starts)

	// A held id whose hold state is gone is left out, and not pruned: the
	// dashboard only reads.
	require.NoError(t, db.Client.SAdd(ctx, fleetstate.WaitHeldKey, "gone-1").Err())
	held, err = src.Held(ctx, 10)
	require.NoError(t, err)
	require.Len(t, held, 1)
	member, err := db.Client.SIsMember(ctx, fleetstate.WaitHeldKey, "gone-1").Result()
	require.NoError(t, err)
	require.True(t, member)
}

// The page, in a real headless Chromium against a live fleet, shows the
// host and the finished run (whose id is markup, shown as text), and no
// button without actions.
func TestDashboardInChromium(t *testing.T) {
	db := liveFleet(t)
	url := serveLive(t, db, dash.Options{}, false)
	b := browsertest.Chromium(t, liveTimeout)

	require.NoError(t, chromedp.Do(b.Ctx,
		chromedp.Navigate(url),
		browsertest.WaitText(30*time.Second, liveHost, hostileRun, runningJob, heldJob, "$0.4321", "1 of 10", "1 of 40", "s:gh"),
	))
	browsertest.Screenshot(t, b, "dashboard")

	check := func(expr string) any {
		t.Helper()
		v, err := chromedp.Run(b.Ctx, chromedp.Evaluate[any](expr))
		require.NoError(t, err, expr)
		return v
	}
	require.Equal(t, false, check(`"__pwned" in window`))
	require.Equal(t, float64(0), check(`document.querySelectorAll("img, script:not([src])").length`))
	require.Equal(t, float64(0), check(`document.querySelectorAll("button").length`))
	// Job ids link to the job page; a forge run links its pull request.
	require.Equal(t, true, check(`[...document.querySelectorAll("#runs a")].some((a) => a.getAttribute("href") === "job?id=`+forgeRun+`")`))
	require.Equal(t, true, check(`[...document.querySelectorAll("#running a")].some((a) => a.textContent === "`+runningJob+`")`))
	require.Equal(t, true, check(`[...document.querySelectorAll("#runs a")].some((a) => a.href === "`+forgePull+`" && a.rel === "noopener noreferrer")`))
	require.Equal(t, true, check(`[...document.querySelectorAll("#runs a")].some((a) => a.href === "`+forgeStatus+`" && a.textContent === "status")`))
	// The running job shows under its host.
	require.Equal(t, true, check(`[...document.querySelectorAll("#hosts td")].some((td) => td.textContent === "`+runningJob+`")`))
}

// The one-time address, in a real Chromium, gives that browser a session it
// cannot read from script, and lands on an address without the token; the
// page holds no token. A second browser (another local user) that opens the
// dashboard's address, or the used login address, gets neither the fleet
// nor the buttons.
func TestLoginInChromium(t *testing.T) {
	db := liveFleet(t)
	loginURL := serveLive(t, db, dash.Options{}, true)
	b := browsertest.Chromium(t, liveTimeout)
	require.NoError(t, chromedp.Do(b.Ctx,
		chromedp.Navigate(loginURL),
		browsertest.WaitText(30*time.Second, liveHost, "Pause fleet"),
	))
	token := loginURL[strings.Index(loginURL, "token=")+len("token="):]
	eval := func(b *browsertest.Browser, expr string) any {
		t.Helper()
		v, err := chromedp.Run(b.Ctx, chromedp.Evaluate[any](expr))
		require.NoError(t, err, expr)
		return v
	}
	href := eval(b, `location.href`).(string)
	require.NotContains(t, href, token)
	require.True(t, strings.HasSuffix(href, "/"), href)
	require.Equal(t, "", eval(b, `document.cookie`))
	require.NotContains(t, eval(b, `document.documentElement.outerHTML`).(string), token)

	other := browsertest.Chromium(t, liveTimeout)
	base := strings.TrimSuffix(href, "/")
	for _, u := range []string{base + "/", loginURL} {
		require.NoError(t, chromedp.Do(other.Ctx, chromedp.Navigate(u)))
		text := eval(other, `document.body.innerText`).(string)
		require.NotContains(t, text, liveHost, u)
		require.Contains(t, text, "pi-dispatch dash", u)
		require.Equal(t, float64(0), eval(other, `document.querySelectorAll("button").length`), u)
	}
}
