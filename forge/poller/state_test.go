package poller_test

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pidispatch/pidispatch/forge"
	"github.com/pidispatch/pidispatch/forge/poller"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/internal/testkit/logtest"
)

// Written as a Valkey writer without the fleet key: it moves the poller's
// cursors back (to replay old commands as new jobs) and ahead (to hide the
// next ones), and stores an ETag with a header in it. The poller replays
// nothing it handed over, reads from now when a cursor is ahead of now, and
// sends no stored ETag that is not a plain header value.
func TestPollerStateFromValkeyIsValidated(t *testing.T) {
	db := livetest.Valkey(t)
	gh := &fakeGitHub{}
	api := httptest.NewServer(gh.handler(t))
	defer api.Close()
	now := time.Date(2026, 12, 7, 4, 0, 0, 0, time.UTC)
	rec := &recorder{}
	logs := &logtest.Buffer{}
	p, err := poller.New(poller.Config{
		Repos: []string{"acme/api"}, Interval: 30 * time.Second, BaseURL: api.URL,
		Tokens: forge.StaticToken("pat"), Valkey: db.Client, Handler: rec, Logger: logs.Logger(), Host: "h1",
		Now: func() time.Time { return now },
	})
	require.NoError(t, err)
	ctx := context.Background()
	const prefix = "pidispatch:forge:poll:acme/api:"

	gh.events = []string{labeled(100, 1, "pi")}
	gh.comments = []string{comment(500, 2, now.Add(-time.Hour), "/pi old")}
	p.Cycle(ctx) // arms
	gh.mu.Lock()
	gh.events = []string{labeled(101, 3, "pi"), labeled(100, 1, "pi")}
	gh.comments = []string{comment(501, 4, now.Add(time.Minute), "/pi please")}
	gh.mu.Unlock()
	p.Cycle(ctx)
	require.Len(t, rec.got, 2)

	// Back: the events cursor to before everything; an ETag with a header.
	require.NoError(t, db.Client.Set(ctx, prefix+"events", 1, 0).Err())
	require.NoError(t, db.Client.Set(ctx, prefix+"etag:events", "\"x\"\r\nX-Injected: 1", 0).Err())
	// Ahead: the comments cursor far in the future.
	require.NoError(t, db.Client.Set(ctx, prefix+"comments", "2099-01-01T00:00:00Z", 0).Err())
	p.Cycle(ctx)
	assert.Len(t, rec.got, 2, "nothing handed over twice")
	gh.mu.Lock()
	lastSince := gh.sinces[len(gh.sinces)-1]
	gh.mu.Unlock()
	assert.Equal(t, "2026-12-07T04:01:00Z", lastSince, "read from this process's own cursor, not 2099")
	assert.Contains(t, logs.String(), `"msg":"poll_state_invalid"`)
	assert.Contains(t, logs.String(), "moved backwards")
	assert.Contains(t, logs.String(), "ETag")
}
