package dispatch

import (
	"context"
	"errors"

	"github.com/pidispatch/pidispatch/queue"
)

// Finder looks a job up on every queue of the fleet. *queue.Directory
// implements it.
type Finder interface {
	Find(ctx context.Context, id string) (string, *queue.Job, error)
}

var _ Finder = (*queue.Directory)(nil)

// JobLive reports whether the job id is still unfinished (waiting, paused,
// delayed, prioritized or active) on ANY queue, and which. The original
// looked only at the shared queue, so a hold whose job sat on a host queue
// read as dead and was superseded while it still ran. An incomplete lookup is an error, never a "not live".
func JobLive(ctx context.Context, f Finder, id string) (live bool, queueName string, err error) {
	name, job, err := f.Find(ctx, id)
	if errors.Is(err, queue.ErrNotFound) {
		return false, "", nil
	}
	if err != nil {
		return false, "", err
	}
	switch job.State {
	case queue.StateCompleted, queue.StateFailed, queue.StateUnknown:
		return false, name, nil
	}
	return true, name, nil
}
