package forge_test

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pidispatch/pidispatch/forge"
	fixtures "github.com/pidispatch/pidispatch/internal/testkit/forgefixtures"
	"github.com/pidispatch/pidispatch/jobs"
)

// headerDouble answers every request with status, headers and body.
func headerDouble(t *testing.T, status int, headers map[string]string, body string) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		for k, v := range headers {
			w.Header().Set(k, v)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = w.Write([]byte(body))
	}))
	t.Cleanup(srv.Close)
	return srv
}

// A lookup a forge turns away for its rate limit is an ErrLookup to retry
// (with when), never ErrLookupForbidden; a 403 without a rate limit's marks
// stays forbidden.
func TestPermissionLookupRateLimits(t *testing.T) {
	now := time.Now()
	reset := now.Add(90 * time.Second).Truncate(time.Second)
	resetHdr := strconv.FormatInt(reset.Unix(), 10)
	ghEv := forge.Event{Repo: "acme/api", SenderLogin: "octo"}
	for _, c := range []struct {
		name      string
		status    int
		headers   map[string]string
		body      string
		limited   bool
		forbidden bool
		retryAt   time.Time // zero: not said
	}{
		{"primary limit", 403, map[string]string{"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": resetHdr},
			`{"message":"API rate limit exceeded"}`, true, false, reset},
		{"primary limit as 429", 429, map[string]string{"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": resetHdr},
			`{"message":"API rate limit exceeded"}`, true, false, reset},
		{"secondary limit with Retry-After", 403, map[string]string{"Retry-After": "30"},
			`{"message":"You have exceeded a secondary rate limit","documentation_url":"https://docs.github.com/rest/overview/rate-limits-for-the-rest-api#about-secondary-rate-limits"}`,
			true, false, now.Add(30 * time.Second)},
		{"secondary limit without a time: a minute", 403, nil,
			`{"message":"You have exceeded a secondary rate limit","documentation_url":"https://docs.github.com/rest/overview/rate-limits-for-the-rest-api#about-secondary-rate-limits"}`,
			true, false, now.Add(time.Minute)},
		{"plain 403", 403, map[string]string{"X-RateLimit-Remaining": "4999"}, `{"message":"Resource not accessible by integration"}`, false, true, time.Time{}},
		{"5xx", 502, nil, `{}`, false, false, time.Time{}},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := headerDouble(t, c.status, c.headers, c.body)
			_, err := forge.GitHubPermissions{BaseURL: srv.URL, Tokens: forge.StaticToken("tok")}.Allowed(context.Background(), ghEv, forge.NeedWrite)
			require.Error(t, err)
			assert.Equal(t, c.forbidden, isForbidden(err), err.Error())
			assert.Equal(t, !c.forbidden, isLookup(err), err.Error())
			assert.Equal(t, c.limited, isRateLimited(err), err.Error())
			at, ok := forge.RetryAt(err, now)
			assert.Equal(t, !c.retryAt.IsZero(), ok)
			if ok {
				assert.WithinDuration(t, c.retryAt, at, 2*time.Second)
			}
		})
	}

	// GitLab and Forgejo: a 429 with Retry-After or RateLimit-Reset.
	gl := headerDouble(t, 429, map[string]string{"RateLimit-Reset": resetHdr}, `{"message":"Retry later"}`)
	_, err := forge.GitLabPermissions{BaseURL: gl.URL, Tokens: forge.StaticToken("tok")}.Allowed(context.Background(),
		forge.Event{Repo: "g/p", ProjectID: 1, SenderID: 2}, forge.NeedWrite)
	require.True(t, isRateLimited(err), "%v", err)
	at, ok := forge.RetryAt(err, now)
	require.True(t, ok)
	assert.Equal(t, reset, at)
	fj := headerDouble(t, 429, map[string]string{"Retry-After": "7"}, `{"message":"rate limited"}`)
	_, err = forge.ForgejoPermissions{BaseURL: fj.URL, Tokens: forge.StaticToken("tok")}.Allowed(context.Background(),
		forge.Event{Repo: "a/b", SenderLogin: "x"}, forge.NeedWrite)
	require.True(t, isRateLimited(err), "%v", err)
	at, ok = forge.RetryAt(err, now)
	require.True(t, ok)
	assert.Equal(t, now.Add(7*time.Second), at)

	// A header cannot park an event for long.
	far := headerDouble(t, 429, map[string]string{"Retry-After": "999999"}, `{}`)
	_, err = forge.ForgejoPermissions{BaseURL: far.URL, Tokens: forge.StaticToken("tok")}.Allowed(context.Background(),
		forge.Event{Repo: "a/b", SenderLogin: "x"}, forge.NeedWrite)
	at, ok = forge.RetryAt(err, now)
	require.True(t, ok)
	assert.Equal(t, now.Add(forge.MaxRetryWait), at)
}

func isForbidden(err error) bool   { return errors.Is(err, forge.ErrLookupForbidden) }
func isLookup(err error) bool      { return errors.Is(err, forge.ErrLookup) }
func isRateLimited(err error) bool { return errors.Is(err, forge.ErrRateLimited) }

// The intake leaves a rate-limited lookup undecided (an error: retried
// later), where it used to refuse it as permission-unknown.
func TestIntakeRateLimitedLookupIsUndecided(t *testing.T) {
	srv := headerDouble(t, 403, map[string]string{"X-RateLimit-Remaining": "0",
		"X-RateLimit-Reset": strconv.FormatInt(time.Now().Add(time.Minute).Unix(), 10)}, `{"message":"API rate limit exceeded"}`)
	r, logs := &fakeRouter{}, &bytes.Buffer{}
	in := newIntake(t, r, forge.GitHubPermissions{BaseURL: srv.URL, Tokens: forge.StaticToken("tok")}, logs)
	ev, err := forge.ParseGitHub("issue_comment", "rl-1", fixtures.GitHub(t, "issue_comment", "created", 0))
	require.NoError(t, err)
	out, err := in.Handle(context.Background(), ev)
	require.ErrorIs(t, err, forge.ErrRateLimited)
	assert.Empty(t, out.Status)
	assert.Empty(t, r.got)
	assert.NotContains(t, logs.String(), `"msg":"forge_refused"`)
	assert.Contains(t, logs.String(), `"rateLimited":true`)
}

// An event type no trigger handles is ignored, whatever its repository: no
// refusal (it used to be refused as unknown-repository).
func TestIntakeIgnoresUnhandledEvents(t *testing.T) {
	r, logs := &fakeRouter{}, &bytes.Buffer{}
	in := newIntake(t, r, &fakePerms{allow: true}, logs)
	ev, err := forge.ParseGitHub("ping", "ping-1", fixtures.GitHub(t, "ping", "", 0))
	require.NoError(t, err)
	require.Empty(t, ev.Kind)
	out, err := in.Handle(context.Background(), ev)
	require.NoError(t, err)
	assert.Equal(t, forge.StatusIgnored, out.Status)
	assert.Contains(t, logs.String(), `"msg":"forge_ignored"`)
	assert.NotContains(t, logs.String(), `"msg":"forge_refused"`)

	logs.Reset()
	in.Ignore(jobs.ForgeGitHub, "ping-2", "ping")
	assert.Contains(t, logs.String(), `"msg":"forge_ignored"`)
	assert.Contains(t, logs.String(), `"event":"ping"`)
	assert.Contains(t, logs.String(), `"host":"h1"`)
}
