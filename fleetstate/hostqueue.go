package fleetstate

import (
	"context"
	"errors"

	"github.com/pidispatch/pidispatch/queue"
)

// DeclareHostQueue declares a worker's host queue at boot, paused when the
// fleet is paused (PausedKey set), in one atomic call, so a host that joins
// during a pause never takes a job before the operator resumes. It reports
// whether the queue is paused afterwards (by the flag, or left paused from
// before).
func DeclareHostQueue(ctx context.Context, q *queue.Queue) (paused bool, err error) {
	if q == nil {
		return false, errors.New("fleetstate: DeclareHostQueue: nil queue")
	}
	return q.DeclarePausedIf(ctx, PausedKey)
}
