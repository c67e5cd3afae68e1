package main

import (
	"context"
	"fmt"

	"github.com/pidispatch/pidispatch/operator"
	"github.com/redis/go-redis/v9"
)

// noteHold tells the operator, after `run` queued a job, that it will not
// start until a resume (the fleet or its queue is paused). Best effort: a
// failed read says nothing, since the job is queued either way.
func noteHold(ctx context.Context, e env, client *redis.Client, queueName string) {
	hold, err := operator.PauseHold(ctx, client, queueName)
	if err != nil || hold == "" {
		return
	}
	fmt.Fprintf(e.stderr, "note: %s, so this job waits until `pi-dispatch resume`\n", hold)
}
