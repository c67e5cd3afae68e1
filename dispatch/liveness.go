package dispatch

import (
	"context"
	"errors"
)

// Finder looks a job up on every queue of the fleet.
// Package stack adapts the Valkey directory of queues to it.
type Finder interface {
	Find(ctx context.Context, id string) (string, *HeldJob, error)
}

// JobLive reports whether the job id is still unfinished (waiting, paused,
// delayed, prioritized or active) on ANY queue, and which. The original
// looked only at the shared queue, so a hold whose job sat on a host queue
// read as dead and was superseded while it still ran. An incomplete lookup is an error, never a "not live".
func JobLive(ctx context.Context, f Finder, id string) (live bool, queueName string, err error) {
	name, job, err := f.Find(ctx, id)
	if errors.Is(err, ErrJobNotFound) {
		return false, "", nil
	}
	if err != nil {
		return false, "", err
	}
	switch job.State {
	case StateCompleted, StateFailed, StateUnknown:
		return false, name, nil
	}
	return true, name, nil
}
