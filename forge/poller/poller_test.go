package poller_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pidispatch/pidispatch/forge"
	"github.com/pidispatch/pidispatch/forge/poller"
	"github.com/pidispatch/pidispatch/internal/livetest"
)

// fakeGitHub serves /repos/acme/api/issues/events and /issues/comments with
// ETags, and counts the requests that were not answered 304.
type fakeGitHub struct {
	mu       sync.Mutex
	events   []string // JSON objects, newest first
	pulls    []string
	comments []string // oldest first
	full     int      // 200 answers
	sinces   []string
}

func (f *fakeGitHub) handler(t *testing.T) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		if r.Header.Get("Authorization") != "Bearer pat" {
			http.Error(w, "no", http.StatusUnauthorized)
			return
		}
		var body string
		switch r.URL.Path {
		case "/repos/acme/api/issues/events":
			if r.URL.Query().Get("page") != "1" {
				body = "[]"
				break
			}
			body = "[" + strings.Join(f.events, ",") + "]"
		case "/repos/acme/api/pulls":
			body = "[" + strings.Join(f.pulls, ",") + "]"
		case "/repos/acme/api/issues/comments":
			f.sinces = append(f.sinces, r.URL.Query().Get("since"))
			body = "[" + strings.Join(f.comments, ",") + "]"
		default:
			http.NotFound(w, r)
			return
		}
		etag := fmt.Sprintf(`"%x"`, len(body)*7919+strings.Count(body, "id"))
		if r.Header.Get("If-None-Match") == etag {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		f.full++
		w.Header().Set("ETag", etag)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(body))
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

func pull(number int, sha string) string {
	return fmt.Sprintf(`{"number":%d,"head":{"sha":%q},"user":{"id":11,"login":"author"},"labels":[{"name":"review"}]}`, number, sha)
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
	gh.pulls = []string{pull(9, "aaaaaaaaaaaa")}
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
	gh.pulls = []string{pull(9, "bbbbbbbbbbbb"), pull(10, "cccccccccccc")}
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
