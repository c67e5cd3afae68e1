package fleetstate_test

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/pidispatch/pidispatch/fleetstate"
	"github.com/pidispatch/pidispatch/operator"
)

// An operator's status line counts held jobs; cancelling a held job removes
// it from its queue, then its hold state.
func ExampleHeldCount() {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer client.Close()
	ctx := context.Background()

	if n, err := fleetstate.HeldCount(ctx, client); err == nil {
		fmt.Printf("%d held\n", n)
	}
	if res, err := operator.Cancel(ctx, client, "gh-1234", 0); err == nil && res.Where == operator.CancelRemoved {
		_ = fleetstate.RemoveHold(ctx, client, "gh-1234")
	}
}
