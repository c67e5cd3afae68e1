package fleetstate_test

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/fleetstate"
	"github.com/pidispatch/pidispatch/queue"
)

// A worker declares its host queue at boot; during a fleet pause it starts
// paused.
func ExampleDeclareHostQueue() {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer client.Close()
	q, err := queue.New(client, fleet.HostQueueName("alpha"), queue.Config{})
	if err != nil {
		return
	}
	if paused, err := fleetstate.DeclareHostQueue(context.Background(), q); err == nil && paused {
		fmt.Println("fleet paused: this host takes no job until `pi-dispatch resume`")
	}
}
