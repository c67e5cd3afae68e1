package poller_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-github/v84/github"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pidispatch/pidispatch/cronsync"
	"github.com/pidispatch/pidispatch/enqueue"
	"github.com/pidispatch/pidispatch/forge"
	"github.com/pidispatch/pidispatch/forge/poller"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/jobs"
)

// fakeGitHub serves acme/api's issue events, comments, open pull requests
// (most recently updated first, paginated) and reviews (paginated), each
// page with an ETag, and counts the answers.
type fakeGitHub struct {
	mu       sync.Mutex
	events   []string // JSON objects, newest first
	pulls    []*fakePR
	reviews  map[int][]fakeReview // oldest first
	gone     map[int]bool         // pull requests whose reviews answer 404
	comments []string             // oldest first
	full     int                  // 200 answers
	cached   int                  // 304 answers
	hits     map[string]int       // requests by path
	sinces   []string
}

type fakePR struct {
	number           int
	sha              string
	created, updated time.Time
	labels           []string
}

type fakeReview struct {
	id    int64
	user  int64
	state string
	at    time.Time
}

func page[T any](r *http.Request, all []T) []T {
	per, _ := strconv.Atoi(r.URL.Query().Get("per_page"))
	n, _ := strconv.Atoi(r.URL.Query().Get("page"))
	if per <= 0 {
		per = 30
	}
	n = max(n, 1)
	lo := min((n-1)*per, len(all))
	return all[lo:min(lo+per, len(all))]
}

func (f *fakeGitHub) handler(t *testing.T) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		if r.Header.Get("Authorization") != "Bearer pat" {
			http.Error(w, "no", http.StatusUnauthorized)
			return
		}
		if f.hits == nil {
			f.hits = map[string]int{}
		}
		f.hits[r.URL.Path]++
		var body []byte
		var err error
		switch path := r.URL.Path; {
		case path == "/repos/acme/api/issues/events":
			if r.URL.Query().Get("page") != "1" {
				body = []byte("[]")
				break
			}
			body = []byte("[" + strings.Join(f.events, ",") + "]")
		case path == "/repos/acme/api/pulls":
			sorted := slices.Clone(f.pulls)
			slices.SortStableFunc(sorted, func(a, b *fakePR) int { return b.updated.Compare(a.updated) })
			var out []*github.PullRequest
			for _, pr := range page(r, sorted) {
				gp := &github.PullRequest{Number: github.Ptr(pr.number), Head: &github.PullRequestBranch{SHA: github.Ptr(pr.sha)},
					User: &github.User{ID: github.Ptr(int64(11)), Login: github.Ptr("author")}}
				if !pr.created.IsZero() {
					gp.CreatedAt = &github.Timestamp{Time: pr.created}
				}
				if !pr.updated.IsZero() {
					gp.UpdatedAt = &github.Timestamp{Time: pr.updated}
				}
				for _, l := range pr.labels {
					gp.Labels = append(gp.Labels, &github.Label{Name: github.Ptr(l)})
				}
				out = append(out, gp)
			}
			body, err = json.Marshal(out)
		case strings.HasPrefix(path, "/repos/acme/api/pulls/") && strings.HasSuffix(path, "/reviews"):
			n, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(path, "/repos/acme/api/pulls/"), "/reviews"))
			if f.gone[n] {
				http.NotFound(w, r)
				return
			}
			out := []*github.PullRequestReview{}
			for _, rv := range page(r, f.reviews[n]) {
				out = append(out, &github.PullRequestReview{ID: github.Ptr(rv.id), State: github.Ptr(rv.state),
					User: &github.User{ID: github.Ptr(rv.user), Login: github.Ptr(fmt.Sprintf("u%d", rv.user))}, SubmittedAt: &github.Timestamp{Time: rv.at}})
			}
			body, err = json.Marshal(out)
		case path == "/repos/acme/api/issues/comments":
			f.sinces = append(f.sinces, r.URL.Query().Get("since"))
			body = []byte("[" + strings.Join(f.comments, ",") + "]")
		default:
			http.NotFound(w, r)
			return
		}
		require.NoError(t, err)
		etag := fmt.Sprintf(`"%x"`, sha256.Sum256(body))
		if r.Header.Get("If-None-Match") == etag {
			f.cached++
			w.WriteHeader(http.StatusNotModified)
			return
		}
		f.full++
		w.Header().Set("ETag", etag)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(body)
	})
}

type recorder struct {
	mu  sync.Mutex
	got []forge.Event
}

func (r *recorder) Handle(_ context.Context, ev forge.Event) (forge.Outcome, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, ev)
	return forge.Outcome{Status: forge.StatusEnqueued}, nil
}

func labeled(id int64, number int, label string) string {
	return fmt.Sprintf(`{"id":%d,"event":"labeled","actor":{"id":7,"login":"maint"},"label":{"name":%q},
	 "issue":{"number":%d,"labels":[{"name":%q}]}}`, id, label, number, label)
}

func pull(number int, sha string, updated time.Time) *fakePR {
	return &fakePR{number: number, sha: sha, updated: updated, labels: []string{"review"}}
}

func comment(id int64, number int, at time.Time, body string) string {
	return fmt.Sprintf(`{"id":%d,"body":%q,"created_at":%q,"user":{"id":8,"login":"dev"},
	 "issue_url":"https://api.github.com/repos/acme/api/issues/%d","html_url":"https://github.com/acme/api/pull/%d#issuecomment-%d"}`,
		id, body, at.UTC().Format(time.RFC3339), number, number, id)
}

func TestPollerArmsThenHandsOverNewEventsOnceAcrossRestarts(t *testing.T) {
	db := livetest.Valkey(t)
	gh := &fakeGitHub{}
	api := httptest.NewServer(gh.handler(t))
	defer api.Close()
	now := time.Date(2026, 12, 7, 4, 0, 0, 0, time.UTC)
	rec := &recorder{}
	newPoller := func() *poller.Poller {
		p, err := poller.New(poller.Config{
			Repos: []string{"acme/api"}, Interval: 30 * time.Second, BaseURL: api.URL,
			Tokens: forge.StaticToken("pat"), Valkey: db.Client, Handler: rec,
			Now: func() time.Time { return now },
		})
		require.NoError(t, err)
		return p
	}
	ctx := context.Background()

	// History before first contact is never replayed.
	gh.events = []string{labeled(100, 1, "pi")}
	gh.comments = []string{comment(500, 2, now.Add(-time.Hour), "/pi old")}
	gh.pulls = []*fakePR{pull(9, "aaaaaaaaaaaa", now.Add(-time.Hour))}
	p := newPoller()
	p.Cycle(ctx)
	assert.Empty(t, rec.got, "arming enqueues nothing")

	// New events and comments arrive.
	gh.mu.Lock()
	gh.events = []string{labeled(102, 3, "pi"), labeled(101, 1, "other"), labeled(100, 1, "pi")}
	gh.comments = []string{comment(501, 4, now.Add(time.Minute), "/pi please")}
	gh.mu.Unlock()
	p.Cycle(ctx)
	require.Len(t, rec.got, 3)
	assert.Equal(t, "poll-e101", rec.got[0].DeliveryID, "oldest first")
	assert.Equal(t, "poll-e102", rec.got[1].DeliveryID)
	assert.Equal(t, forge.KindLabel, rec.got[1].Kind)
	assert.Equal(t, []string{"pi"}, rec.got[1].Added)
	assert.Equal(t, 3, rec.got[1].Number)
	assert.Equal(t, "poll-c501", rec.got[2].DeliveryID)
	assert.Equal(t, forge.KindComment, rec.got[2].Kind)
	assert.Equal(t, 4, rec.got[2].Number)
	assert.True(t, rec.got[2].PullRequest)

	// Nothing changed: both lists answer 304, nothing is handed over.
	full := gh.full
	p.Cycle(ctx)
	assert.Equal(t, full, gh.full, "an unchanged repository costs only 304s")
	assert.Len(t, rec.got, 3)

	// A restart reads the cursors from Valkey: no replay.
	p2 := newPoller()
	p2.Cycle(ctx)
	assert.Len(t, rec.got, 3)
	gh.mu.Lock()
	gh.events = append([]string{labeled(103, 5, "pi")}, gh.events...)
	gh.mu.Unlock()
	p2.Cycle(ctx)
	require.Len(t, rec.got, 4)
	assert.Equal(t, "poll-e103", rec.got[3].DeliveryID)
	assert.Equal(t, "2026-12-07T04:01:00Z", gh.sinces[len(gh.sinces)-1], "the comment cursor moved to the newest comment")

	// Pull requests: a new head and a new pull request.
	gh.mu.Lock()
	gh.pulls = []*fakePR{pull(9, "bbbbbbbbbbbb", now.Add(time.Minute)), pull(10, "cccccccccccc", now.Add(2*time.Minute))}
	gh.mu.Unlock()
	p2.Cycle(ctx)
	require.Len(t, rec.got, 6)
	assert.Equal(t, "poll-pr9-bbbbbbb", rec.got[4].DeliveryID)
	assert.Equal(t, "synchronize", rec.got[4].Action)
	assert.Equal(t, "poll-pr10-ccccccc", rec.got[5].DeliveryID)
	assert.Equal(t, "opened", rec.got[5].Action)
	assert.Equal(t, forge.KindPullRequest, rec.got[5].Kind)
	assert.Equal(t, int64(11), rec.got[5].SenderID)
	assert.Equal(t, []string{"review"}, rec.got[5].Labels)
	p2.Cycle(ctx)
	assert.Len(t, rec.got, 6, "an unchanged list hands nothing over")
}

func TestPollerConfig(t *testing.T) {
	_, err := poller.New(poller.Config{Repos: []string{"a/b"}, Interval: 10 * time.Second, Handler: &recorder{},
		Tokens: forge.StaticToken("x"), Valkey: livetest.Valkey(t).Client})
	assert.ErrorContains(t, err, "under 30s")
	_, err = poller.New(poller.Config{Handler: &recorder{}})
	assert.Error(t, err)
}

// tap hands events to a real forge.Intake and keeps them with their outcomes.
type tap struct {
	in   *forge.Intake
	mu   sync.Mutex
	evs  []forge.Event
	outs []forge.Outcome
}

func (t *tap) Handle(ctx context.Context, ev forge.Event) (forge.Outcome, error) {
	out, err := t.in.Handle(ctx, ev)
	t.mu.Lock()
	defer t.mu.Unlock()
	t.evs = append(t.evs, ev)
	t.outs = append(t.outs, out)
	return out, err
}

type enqueuer struct {
	mu  sync.Mutex
	got []enqueue.ForgeDelivery
}

func (e *enqueuer) EnqueueForge(_ context.Context, d enqueue.ForgeDelivery) (enqueue.Enqueued, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.got = append(e.got, d)
	return enqueue.Enqueued{JobID: d.JobID, Queue: "pi-jobs", Added: true}, nil
}

func (e *enqueuer) ids() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []string
	for _, d := range e.got {
		out = append(out, d.JobID+" "+d.Job.Trigger)
	}
	return out
}

type allowAll struct{}

func (allowAll) Allowed(context.Context, forge.Event, forge.Need) (bool, error) { return true, nil }

// rig is a poller of acme/api on a fake GitHub, handing over to an intake
// with triggers; newPoller makes another on the same Valkey db (a restart).
type rig struct {
	gh        *fakeGitHub
	enq       *enqueuer
	tap       *tap
	logs      *bytes.Buffer
	now       time.Time
	newPoller func() *poller.Poller
}

func newRig(t *testing.T, triggers ...cronsync.ForgeTrigger) *rig {
	t.Helper()
	db := livetest.Valkey(t)
	r := &rig{gh: &fakeGitHub{reviews: map[int][]fakeReview{}}, enq: &enqueuer{}, logs: &bytes.Buffer{},
		now: time.Date(2026, 12, 7, 4, 0, 0, 0, time.UTC)}
	api := httptest.NewServer(r.gh.handler(t))
	t.Cleanup(api.Close)
	in, err := forge.NewIntake(forge.IntakeConfig{Enqueuer: r.enq,
		Permissions: map[jobs.Forge]forge.Permissions{jobs.ForgeGitHub: allowAll{}}, Host: "h1"})
	require.NoError(t, err)
	for i := range triggers {
		triggers[i].Index, triggers[i].Forge, triggers[i].Repos = i, jobs.ForgeGitHub, []string{"acme/api"}
	}
	in.SetTriggers(triggers)
	r.tap = &tap{in: in}
	var logMu sync.Mutex
	r.newPoller = func() *poller.Poller {
		p, err := poller.New(poller.Config{
			Repos: []string{"acme/api"}, Interval: 30 * time.Second, BaseURL: api.URL,
			Tokens: forge.StaticToken("pat"), Valkey: db.Client, Handler: r.tap, Host: "h1",
			Logger: slog.New(slog.NewJSONHandler(lockedWriter{&logMu, r.logs}, nil)),
			Now:    func() time.Time { return r.now },
		})
		require.NoError(t, err)
		return p
	}
	return r
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

// unchanged runs a cycle and asserts it cost only 304s and handed nothing over.
func (r *rig) unchanged(t *testing.T, p *poller.Poller) {
	t.Helper()
	r.gh.mu.Lock()
	full, cached := r.gh.full, r.gh.cached
	r.gh.mu.Unlock()
	n := len(r.tap.evs)
	p.Cycle(context.Background())
	r.gh.mu.Lock()
	defer r.gh.mu.Unlock()
	assert.Equal(t, full, r.gh.full, "an unchanged repository costs only 304s")
	assert.Greater(t, r.gh.cached, cached, "the lists were asked, conditionally")
	assert.Len(t, r.tap.evs, n, "nothing handed over")
}

func issueEvent(id int64, event string, number int, pr bool, labels ...string) string {
	var ls []string
	for _, l := range labels {
		ls = append(ls, fmt.Sprintf(`{"name":%q}`, l))
	}
	pull := ""
	if pr {
		pull = fmt.Sprintf(`,"pull_request":{"url":"https://api.github.com/repos/acme/api/pulls/%d"}`, number)
	}
	return fmt.Sprintf(`{"id":%d,"event":%q,"actor":{"id":7,"login":"maint"},"issue":{"number":%d,"labels":[%s]%s}}`,
		id, event, number, strings.Join(ls, ","), pull)
}

func TestPollerReopenedFiresTheReopenedTriggerOnce(t *testing.T) {
	r := newRig(t,
		cronsync.ForgeTrigger{Name: "on-reopen", Type: cronsync.TypePullRequest, Actions: []string{"reopened"}},
		cronsync.ForgeTrigger{Name: "pi-label", Type: cronsync.TypeLabel, Any: []string{"pi"}})
	ctx := context.Background()
	r.gh.events = []string{issueEvent(100, "closed", 9, true)}
	p := r.newPoller()
	p.Cycle(ctx)
	assert.Empty(t, r.tap.evs, "arming hands nothing over")

	r.gh.mu.Lock()
	r.gh.events = append([]string{issueEvent(102, "reopened", 4, false, "pi"), issueEvent(101, "reopened", 9, true, "x")}, r.gh.events...)
	r.gh.mu.Unlock()
	p.Cycle(ctx)
	require.Len(t, r.tap.evs, 2)
	ev := r.tap.evs[0]
	assert.Equal(t, forge.KindPullRequest, ev.Kind)
	assert.Equal(t, "reopened", ev.Action)
	assert.True(t, ev.PullRequest)
	assert.Equal(t, 9, ev.Number)
	assert.Equal(t, int64(7), ev.SenderID)
	assert.Equal(t, []string{"x"}, ev.Labels)
	assert.Equal(t, []string{"gh-poll-e101 on-reopen", "gh-poll-e102 pi-label"}, r.enq.ids(),
		"a reopened pull request fires the pull_request trigger, a reopened issue the label trigger, as the webhooks do")

	r.unchanged(t, p)
	r.unchanged(t, r.newPoller())
	assert.Len(t, r.enq.ids(), 2, "fired once, across a restart")
}

func TestPollerReviewFiresTheReviewStateTriggerOnce(t *testing.T) {
	r := newRig(t, cronsync.ForgeTrigger{Name: "approved", Type: cronsync.TypePullRequest,
		Actions: []string{"review_submitted"}, ReviewState: "approved", All: []string{"review"}})
	ctx := context.Background()
	now := r.now
	r.gh.pulls = []*fakePR{pull(9, "aaaaaaa", now.Add(-time.Hour)), pull(10, "bbbbbbb", now.Add(-2*time.Hour))}
	r.gh.reviews[9] = []fakeReview{{id: 50, user: 12, state: "APPROVED", at: now.Add(-time.Hour)}}
	p := r.newPoller()
	p.Cycle(ctx)
	assert.Empty(t, r.tap.evs)

	// A review of before arming is history, even when read later.
	r.gh.mu.Lock()
	r.gh.reviews[9] = append(r.gh.reviews[9],
		fakeReview{id: 60, user: 12, state: "COMMENTED", at: now.Add(time.Minute)},
		fakeReview{id: 61, user: 13, state: "APPROVED", at: now.Add(2 * time.Minute)})
	r.gh.pulls[0].updated = now.Add(2 * time.Minute)
	r.gh.mu.Unlock()
	p.Cycle(ctx)
	require.Len(t, r.tap.evs, 2)
	assert.Equal(t, "poll-r60", r.tap.evs[0].DeliveryID, "oldest first")
	assert.Equal(t, "commented", r.tap.evs[0].ReviewState)
	assert.Equal(t, forge.ReasonReviewState, r.tap.outs[0].Reason)
	ev := r.tap.evs[1]
	assert.Equal(t, forge.KindPullRequest, ev.Kind)
	assert.Equal(t, "review_submitted", ev.Action)
	assert.Equal(t, "approved", ev.ReviewState)
	assert.Equal(t, int64(13), ev.SenderID)
	assert.Equal(t, 9, ev.Number)
	assert.Equal(t, []string{"review"}, ev.Labels)
	assert.Equal(t, []string{"gh-poll-r61 approved"}, r.enq.ids())
	r.gh.mu.Lock()
	assert.Zero(t, r.gh.hits["/repos/acme/api/pulls/10/reviews"], "an unmoved pull request's reviews are not read")
	r.gh.mu.Unlock()

	r.unchanged(t, p)
	p2 := r.newPoller()
	r.unchanged(t, p2)

	// The pull request moves without a review: its reviews answer 304.
	r.gh.mu.Lock()
	r.gh.pulls[0].updated = now.Add(150 * time.Second)
	full, reads := r.gh.full, r.gh.hits["/repos/acme/api/pulls/9/reviews"]
	r.gh.mu.Unlock()
	p2.Cycle(ctx)
	r.gh.mu.Lock()
	assert.Equal(t, full+1, r.gh.full, "only the list of pull requests is new")
	assert.Equal(t, reads+1, r.gh.hits["/repos/acme/api/pulls/9/reviews"])
	r.gh.mu.Unlock()
	assert.Len(t, r.enq.ids(), 1)

	// A review started before others and submitted after them keeps its
	// place in the list: it is still read, once.
	r.gh.mu.Lock()
	r.gh.reviews[9] = slices.Insert(r.gh.reviews[9], 1, fakeReview{id: 55, user: 14, state: "APPROVED", at: now.Add(3 * time.Minute)})
	r.gh.pulls[0].updated = now.Add(3 * time.Minute)
	r.gh.mu.Unlock()
	p2.Cycle(ctx)
	assert.Equal(t, []string{"gh-poll-r61 approved", "gh-poll-r55 approved"}, r.enq.ids())
	r.unchanged(t, p2)
	assert.Len(t, r.enq.ids(), 2)
}

func TestPollerPagesThroughOpenPullRequests(t *testing.T) {
	r := newRig(t, cronsync.ForgeTrigger{Name: "pr", Type: cronsync.TypePullRequest, Actions: []string{"opened", "synchronize"}})
	ctx := context.Background()
	now := r.now
	for i := 1; i <= 510; i++ { // PR 1 updated last; 501..510 beyond five pages
		r.gh.pulls = append(r.gh.pulls, &fakePR{number: i, sha: fmt.Sprintf("a%06d", i),
			created: now.Add(-48 * time.Hour), updated: now.Add(-time.Hour - time.Duration(i)*time.Minute)})
	}
	p := r.newPoller()
	p.Cycle(ctx)
	assert.Empty(t, r.tap.evs)
	assert.Contains(t, r.logs.String(), `"msg":"poll_prs_gap"`)
	assert.Equal(t, 5, r.gh.hits["/repos/acme/api/pulls"], "five pages, no more")

	r.gh.mu.Lock()
	r.gh.pulls[299].sha, r.gh.pulls[299].updated = "b000300", now.Add(time.Minute) // page 3 when armed
	r.gh.pulls[504].sha, r.gh.pulls[504].updated = "b000505", now.Add(time.Minute) // never listed
	r.gh.pulls = append(r.gh.pulls, &fakePR{number: 600, sha: "c000600", created: now.Add(time.Minute), updated: now.Add(2 * time.Minute)})
	r.gh.mu.Unlock()
	p.Cycle(ctx)
	assert.ElementsMatch(t, []string{"gh-poll-pr300-b000300 pr", "gh-poll-pr600-c000600 pr"}, r.enq.ids(),
		"a new head of a pull request beyond the first page is a synchronize; one older than arming never seen is not opened")
	r.unchanged(t, p)
}

func TestPollerBoundsReviewReadsPerCycle(t *testing.T) {
	r := newRig(t, cronsync.ForgeTrigger{Name: "approved", Type: cronsync.TypePullRequest,
		Actions: []string{"review_submitted"}, ReviewState: "approved"})
	ctx := context.Background()
	now := r.now
	for i := 1; i <= 12; i++ {
		r.gh.pulls = append(r.gh.pulls, pull(i, "aaaaaaa", now.Add(-time.Hour)))
	}
	p := r.newPoller()
	p.Cycle(ctx)
	r.gh.mu.Lock()
	for i, pr := range r.gh.pulls {
		pr.updated = now.Add(time.Duration(i+1) * time.Minute)
		r.gh.reviews[pr.number] = []fakeReview{{id: int64(100 + i), user: 12, state: "APPROVED", at: pr.updated}}
	}
	r.gh.mu.Unlock()
	p.Cycle(ctx)
	assert.Len(t, r.enq.ids(), 10, "ten pull requests' reviews per cycle")
	assert.Contains(t, r.logs.String(), `"msg":"poll_reviews_behind"`)
	assert.Contains(t, r.logs.String(), `"pending":12`)

	// The list answers 304; the two left are read all the same.
	p.Cycle(ctx)
	ids := r.enq.ids()
	require.Len(t, ids, 12)
	assert.Equal(t, "gh-poll-r110 approved", ids[10], "least recently queued first")
	assert.Equal(t, "gh-poll-r111 approved", ids[11])
	r.unchanged(t, p)
}

func TestPollerReviewsOfAPullRequestNotFoundDoNotHoldUpTheRest(t *testing.T) {
	r := newRig(t, cronsync.ForgeTrigger{Name: "approved", Type: cronsync.TypePullRequest,
		Actions: []string{"review_submitted"}, ReviewState: "approved"})
	ctx := context.Background()
	now := r.now
	r.gh.pulls = []*fakePR{pull(1, "aaaaaaa", now.Add(-time.Hour)), pull(2, "aaaaaaa", now.Add(-time.Hour))}
	p := r.newPoller()
	p.Cycle(ctx)
	r.gh.mu.Lock()
	r.gh.gone = map[int]bool{1: true}
	r.gh.pulls[0].updated = now.Add(time.Minute) // queued first
	r.gh.pulls[1].updated = now.Add(2 * time.Minute)
	r.gh.reviews[2] = []fakeReview{{id: 70, user: 12, state: "APPROVED", at: now.Add(2 * time.Minute)}}
	r.gh.mu.Unlock()
	p.Cycle(ctx)
	assert.Equal(t, []string{"gh-poll-r70 approved"}, r.enq.ids())
	assert.Contains(t, r.logs.String(), `"msg":"poll_reviews_not_found"`)
	r.unchanged(t, p)
}

// failOnce fails the first event it is handed, as an intake whose Valkey is
// down would.
type failOnce struct {
	recorder
	failed bool
}

func (f *failOnce) Handle(ctx context.Context, ev forge.Event) (forge.Outcome, error) {
	if !f.failed {
		f.failed = true
		return forge.Outcome{}, errors.New("valkey down")
	}
	return f.recorder.Handle(ctx, ev)
}

func TestPollerRetriesAnUnchangedListAfterAFailedHandOver(t *testing.T) {
	db := livetest.Valkey(t)
	gh := &fakeGitHub{}
	api := httptest.NewServer(gh.handler(t))
	defer api.Close()
	h := &failOnce{}
	p, err := poller.New(poller.Config{Repos: []string{"acme/api"}, Interval: 30 * time.Second, BaseURL: api.URL,
		Tokens: forge.StaticToken("pat"), Valkey: db.Client, Handler: h})
	require.NoError(t, err)
	ctx := context.Background()
	p.Cycle(ctx)
	gh.mu.Lock()
	gh.events = []string{labeled(201, 3, "pi")}
	gh.mu.Unlock()
	p.Cycle(ctx)
	assert.Empty(t, h.got, "the hand-over failed")
	p.Cycle(ctx)
	require.Len(t, h.got, 1, "the list is read again, not answered 304 from an ETag stored before the failure")
	assert.Equal(t, "poll-e201", h.got[0].DeliveryID)
}
