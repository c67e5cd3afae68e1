package queue

import (
	"context"
	"errors"
	"fmt"
)

// ActiveIDs returns up to limit ids of the jobs a consumer holds on q (the
// active list), oldest first. It is a read, not a snapshot: a job may finish
// while it runs.
func (q *Queue) ActiveIDs(ctx context.Context, limit int) ([]string, error) {
	if limit <= 0 {
		return nil, optErr("limit", "must be positive")
	}
	l, err := q.client.LRange(ctx, q.keys.active(), int64(-limit), -1).Result()
	if err != nil {
		return nil, fmt.Errorf("active jobs of %s: %w", q.name, err)
	}
	// The list takes LPUSH at the head: the tail is the oldest.
	out := make([]string, 0, len(l))
	for i := len(l) - 1; i >= 0; i-- {
		out = append(out, l[i])
	}
	return out, nil
}

// Active returns up to limit jobs a consumer holds on q (see ActiveIDs); a
// job that finished meanwhile is left out.
func (q *Queue) Active(ctx context.Context, limit int) ([]*Job, error) {
	ids, err := q.ActiveIDs(ctx, limit)
	if err != nil {
		return nil, err
	}
	out := make([]*Job, 0, len(ids))
	for _, id := range ids {
		j, err := q.Get(ctx, id)
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			return out, err
		}
		if j.State == StateActive {
			out = append(out, j)
		}
	}
	return out, nil
}
