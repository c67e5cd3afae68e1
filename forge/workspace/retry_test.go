package workspace_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pidispatch/pidispatch/forge/token"
	"github.com/pidispatch/pidispatch/forge/workspace"
)

// A forge that answers 429 with Retry-After is waited for as long as it
// asks (not the shorter backoff); one that asks for longer than
// MaxRetryWait fails the call at once, for the job to be retried later.
func TestRetryAfterHonoured(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("WaitedFor", func(t *testing.T) {
		t.Parallel()
		b := setup(t, workspace.PublishPolicy{}, workspace.Limits{})
		withGitHubConfig(t, b, func(c *workspace.Config) { c.Backoff = time.Millisecond })
		b.gh.FailRetryAfter("GET", "/repos/acme/web", http.StatusTooManyRequests, 1, "1")
		start := time.Now()
		_, err := b.m.Prepare(ctx, b.job, b.dir)
		require.NoError(t, err)
		require.GreaterOrEqual(t, time.Since(start), time.Second, "the 1 s the forge asked for, not the 1 ms backoff")
	})

	t.Run("TooLongFailsAtOnce", func(t *testing.T) {
		t.Parallel()
		b := setup(t, workspace.PublishPolicy{}, workspace.Limits{})
		withGitHubConfig(t, b, func(c *workspace.Config) { c.MaxRetryWait = time.Second })
		b.gh.FailRetryAfter("GET", "/repos/acme/web", http.StatusTooManyRequests, 1, "3600")
		_, err := b.m.Prepare(ctx, b.job, b.dir)
		require.ErrorIs(t, err, token.ErrUnavailable)
		wait, ok := token.RetryAfter(err)
		require.True(t, ok)
		require.Equal(t, time.Hour, wait)
		require.Equal(t, 1, b.gh.Calls("GET /repos/acme/web"), "not tried again within the job")
	})

	t.Run("OtherClientErrorIsRejectedNotRetried", func(t *testing.T) {
		t.Parallel()
		b := setup(t, workspace.PublishPolicy{}, workspace.Limits{})
		withGitHubConfig(t, b, nil)
		b.gh.Fail("GET", "/repos/acme/web", http.StatusBadRequest, 5, false)
		_, err := b.m.Prepare(ctx, b.job, b.dir)
		require.ErrorIs(t, err, token.ErrRejected)
		require.NotErrorIs(t, err, token.ErrUnavailable)
		require.Equal(t, 1, b.gh.Calls("GET /repos/acme/web"))
	})
}
