package poller_test

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
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

	"github.com/pidispatch/pidispatch/forge"
	"github.com/pidispatch/pidispatch/forge/poller"
	"github.com/pidispatch/pidispatch/internal/livetest"
)

// fakeGitHub serves acme/api's issue events, comments, open pull requests
// (most recently updated first, paginated) and reviews (paginated), each
// page with an ETag, and counts the answers.
type fakeGitHub struct {
	mu       sync.Mutex
	events   []string // JSON objects, newest first
	pulls    []*fakePR
	reviews  map[int][]fakeReview // oldest first
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
