package dash

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/pidispatch/pidispatch/internal/testkit/browsertest"
)

// cspBefore is the page's Content-Security-Policy as it was before the
// charts: they must draw under it, not loosen it.
const cspBefore = "default-src 'none'; script-src 'self'; style-src 'self'; " +
	"connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// consoleErrors collects what the page reports as an error: console.error,
// an uncaught exception, and the browser's own log errors (a CSP refusal
// is one).
type consoleErrors struct {
	mu   sync.Mutex
	seen []string
}

func (c *consoleErrors) listen(b *browsertest.Browser) {
	err := chromedp.Listen(b.Ctx, func(ev any) {
		var msg string
		switch e := ev.(type) {
		case *runtime.EventConsoleAPICalled:
			if e.Type == runtime.ConsoleAPICalledTypeError || e.Type == runtime.ConsoleAPICalledTypeAssert {
				for _, a := range e.Args {
					msg += string(a.Value) + a.Description + " "
				}
			}
		case *runtime.EventExceptionThrown:
			msg = e.ExceptionDetails.Text
			if e.ExceptionDetails.Exception != nil {
				msg += " " + e.ExceptionDetails.Exception.Description
			}
		case *log.EventEntryAdded:
			if e.Entry.Level == log.EntryLevelError {
				msg = string(e.Entry.Source) + ": " + e.Entry.Text + " " + e.Entry.URL
			}
		}
		if msg != "" {
			c.mu.Lock()
			c.seen = append(c.seen, msg)
			c.mu.Unlock()
		}
	})
	if err != nil {
		panic(err)
	}
}

func (c *consoleErrors) all() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.seen...)
}

// The dashboard's charts in a real headless Chromium, from seeded records
// with known sums: each chart's numbers, read back from the SVG (each
// bar's and point's data-value, each bucket's title), match the records;
// switching the grouping redraws the spend by model; every bucket is
// focusable; the capacity panel shows its figures; no console error; and
// the Content-Security-Policy is the one the page had before the charts.
func TestChartsInChromium(t *testing.T) {
	src := chartSource()
	h, err := New(src, Options{PullRequests: sampleOutcomes(), Clock: func() time.Time { return chartNow }})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	loginURL := h.LoginURL(srv.URL)

	b := browsertest.Chromium(t, 120*time.Second)
	var errs consoleErrors
	errs.listen(b)
	require.NoError(t, chromedp.Do(b.Ctx,
		chromedp.Navigate(loginURL),
		browsertest.WaitText(30*time.Second, "Where the money and the time went", "fleet: 5 slots", "acme/web"),
		until(`document.body.dataset.chartsLoaded === "1" && document.body.dataset.capacityLoaded === "1"`),
	))
	browsertest.Screenshot(t, b, "charts")

	eval := func(expr string) any {
		t.Helper()
		v, err := chromedp.Run(b.Ctx, chromedp.Evaluate[any](expr))
		require.NoError(t, err, expr)
		return v
	}
	// sum adds the data-value of every element sel matches.
	sum := func(sel string) float64 {
		t.Helper()
		return eval(fmt.Sprintf(`[...document.querySelectorAll(%q)].reduce((a, e) => a + Number(e.dataset.value), 0)`, sel)).(float64)
	}
	label := func(chart, when string) string {
		t.Helper()
		return eval(fmt.Sprintf(`document.querySelector('#%s g.bucket[data-when="%s"] title').textContent`, chart, when)).(string)
	}

	// Spend per day, stacked by repository: every bar of the chart adds up
	// to the records' 4.6 dollars, each repository's bars to its own.
	require.Equal(t, 4_600_000.0, sum(`#chart-spend rect.bar`))
	require.Equal(t, 2_500_000.0, sum(`#chart-spend rect.bar[data-key="acme/api"]`))
	require.Equal(t, 2_100_000.0, sum(`#chart-spend rect.bar[data-key="acme/web"]`))
	require.Equal(t, 1_250_000.0, sum(`#chart-spend g[data-when="2026-03-10"] rect.bar[data-key="acme/web"]`))
	require.Equal(t, "2026-03-10: acme/api $0.5000, acme/web $1.25; total $1.75", label("chart-spend", "2026-03-10"))
	require.Equal(t, "2026-03-09: acme/api $2.00, acme/web $0.7500; total $2.75", label("chart-spend", "2026-03-09"))
	require.Equal(t, float64(14), eval(`document.querySelectorAll('#chart-spend g.bucket[tabindex="0"]').length`), "each day focusable")
	require.Equal(t, "acme/api acme/web", eval(`[...document.querySelectorAll('#chart-spend .legend li')].map((li) => li.textContent).join(' ')`))
	// The axis says dollars.
	require.Equal(t, true, eval(`[...document.querySelectorAll('#chart-spend text.tick')].some((t) => t.textContent.startsWith('$'))`))

	// Runs per hour by outcome: the four runs of the last 48 hours.
	require.Equal(t, 4.0, sum(`#chart-runs rect.bar`))
	require.Equal(t, 1.0, sum(`#chart-runs rect.bar[data-key="failed"]`))
	require.Equal(t, "2026-03-10 14:00 UTC: completed 1, failed 1; 2 runs", label("chart-runs", "2026-03-10 14:00 UTC"))

	// Queue wait: p50 and p90 of the 14:00 hour, and the depth now.
	require.Equal(t, 4000.0, sum(`#chart-wait g[data-when="2026-03-10 14:00 UTC"] circle[data-key="p50"]`))
	require.Equal(t, 60_000.0, sum(`#chart-wait g[data-when="2026-03-10 14:00 UTC"] circle[data-key="p90"]`))
	// Hours without a run break the lines: 9 March 10:00 to 11:00 is one
	// segment per percentile, 10 March 14:00 a point alone.
	require.Equal(t, float64(2), eval(`document.querySelectorAll('#chart-wait polyline.series').length`))
	require.Equal(t, "waiting now: 3 jobs", eval(`document.getElementById('queue-depth').textContent`))

	// p90 cost per run per day.
	require.Equal(t, 2_000_000.0, sum(`#chart-cost g[data-when="2026-03-09"] rect.bar`))
	require.Equal(t, 1_250_000.0, sum(`#chart-cost g[data-when="2026-03-10"] rect.bar`))

	// Merged share: 1 of 1 on 10 March, 0 of 2 on 9 March.
	require.Equal(t, 1.0, sum(`#chart-merged g[data-when="2026-03-10"] rect.bar`))
	require.Equal(t, "2026-03-09: merged 0%; 0 of 2 pull requests merged, 1 closed", label("chart-merged", "2026-03-09"))

	// The data table holds the same numbers, for a reader without the chart.
	require.Equal(t, true, eval(`[...document.querySelectorAll('#chart-spend details tr')].some((tr) => tr.textContent === '2026-03-09$2.00$0.7500total $2.75')`))

	// The capacity panel.
	require.Equal(t, "5", eval(`document.getElementById('capacity-summary').dataset.slots`))
	require.Equal(t, "4500000", eval(`document.getElementById('capacity-summary').dataset.drainMs`))
	require.Contains(t, eval(`document.getElementById('capacity-summary').textContent`), "drains in about 75m")
	require.Equal(t, true, eval(`[...document.querySelectorAll('#capacity-hosts td')].some((td) => td.textContent === '50%')`))

	// Keyboard: the grouping is a select; choosing "model" redraws the spend.
	require.NoError(t, chromedp.Do(b.Ctx, chromedp.Focus(`#chart-by`)))
	require.Equal(t, "chart-by", eval(`document.activeElement.id`))
	eval(`(() => { const s = document.getElementById('chart-by'); s.value = 'model'; s.dispatchEvent(new Event('change')); return s.value; })()`)
	err = chromedp.Do(b.Ctx, until(`document.body.dataset.chartsLoaded === "2"`))
	require.NoError(t, err, "page: loaded %v, error %v", eval(`document.body.dataset.chartsLoaded`), eval(`document.getElementById('err-charts').textContent`))
	require.Equal(t, 2_800_000.0+1_200_000.0+600_000.0, sum(`#chart-spend rect.bar`))
	require.Equal(t, 4_000_000.0, sum(`#chart-spend rect.bar[data-key="anthropic/claude-x"]`))
	require.Equal(t, 600_000.0, sum(`#chart-spend rect.bar[data-key="openai/gpt-y"]`))
	browsertest.Screenshot(t, b, "charts-by-model")

	require.Empty(t, errs.all(), "console errors")
	require.Equal(t, false, eval(`"__pwned" in window`))

	// The headers, as the browser got them, are the same as before.
	for _, path := range []string{"/", "/static/charts.js", "/api/charts", "/api/capacity"} {
		resp, _ := getWith(t, srv.URL+path, sessionFromBrowser(t, b))
		require.Equal(t, http.StatusOK, resp.StatusCode, path)
		require.Equal(t, cspBefore, resp.Header.Get("Content-Security-Policy"), path)
	}
}

// until waits for expr to be true on the page.
func until(expr string) chromedp.Action[chromedp.Void] {
	poll := chromedp.Poll[bool](expr, chromedp.WithPollingTimeout(30*time.Second), chromedp.WithPollingInterval(100*time.Millisecond))
	return func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
		_, err := poll(ctx, t)
		return chromedp.Void{}, err
	}
}

// sessionFromBrowser reads the session cookie the browser holds (through
// DevTools: the page's script cannot).
func sessionFromBrowser(t *testing.T, b *browsertest.Browser) string {
	t.Helper()
	res, err := chromedp.Call(b.Ctx, network.GetCookies, network.GetCookiesParams{})
	require.NoError(t, err)
	for _, c := range res.Cookies {
		if c.Name == SessionCookie {
			return c.Value
		}
	}
	t.Fatal("the browser holds no session")
	return ""
}
