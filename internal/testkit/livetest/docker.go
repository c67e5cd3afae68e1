package livetest

import (
	"context"
	"testing"
	"time"

	"github.com/moby/moby/client"
)

// Docker gives the test a client of the local Docker daemon (DOCKER_HOST and
// friends honoured) that has answered a ping, with the API version negotiated.
// It skips (or fails, when PIDISPATCH_REQUIRE_LIVE=1) when no daemon answers.
func Docker(t testing.TB) *client.Client {
	t.Helper()
	SkipShort(t)
	c, err := client.New(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		unavailable(t, "docker client: %v", err)
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := c.Ping(ctx, client.PingOptions{NegotiateAPIVersion: true}); err != nil {
		_ = c.Close()
		unavailable(t, "docker daemon: %v", err)
		return nil
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}
