package dispatch_test

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/pidispatch/pidispatch/dispatch"
)

// An operator's status line counts held jobs; cancelling a held job removes
// it from its queue, then its hold state.
func ExampleHeldCount() {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer client.Close()
	ctx := context.Background()

	if n, err := dispatch.HeldCount(ctx, client); err == nil {
		fmt.Printf("%d held\n", n)
	}
	if res, err := dispatch.Cancel(ctx, client, "gh-1234", 0); err == nil && res.Where == dispatch.CancelRemoved {
		_ = dispatch.RemoveHold(ctx, client, "gh-1234")
	}
}
