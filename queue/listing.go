package queue

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// Listing is a read of the jobs waiting on a queue, by list.
type Listing struct {
	// Waiting are ready jobs (wait and paused lists oldest first, then
	// prioritized), up to the limit.
	Waiting []string
	// Delayed are delayed jobs, soonest first, each with when it is due.
	Delayed []Delayed
}

// Delayed is one delayed job.
type Delayed struct {
	ID string
	// Until is when it becomes ready (BullMQ's score: the due time in
	// milliseconds, shifted 12 bits for its counter).
	Until time.Time
}

// List reads up to limit ids of each of q's waiting and delayed lists. It is
// a read, not a snapshot: jobs may move while it runs.
func (q *Queue) List(ctx context.Context, limit int) (Listing, error) {
	if limit <= 0 {
		return Listing{}, optErr("limit", "must be positive")
	}
	pipe := q.client.Pipeline()
	wait := pipe.LRange(ctx, q.keys.wait(), int64(-limit), -1)
	paused := pipe.LRange(ctx, q.keys.paused(), int64(-limit), -1)
	prio := pipe.ZRange(ctx, q.keys.prioritized(), 0, int64(limit-1))
	delayed := pipe.ZRangeWithScores(ctx, q.keys.delayed(), 0, int64(limit-1))
	if _, err := pipe.Exec(ctx); err != nil {
		return Listing{}, fmt.Errorf("list jobs of %s: %w", q.name, err)
	}
	var out Listing
	for _, l := range [][]string{wait.Val(), paused.Val()} {
		for i := len(l) - 1; i >= 0; i-- {
			out.Waiting = append(out.Waiting, l[i])
		}
	}
	out.Waiting = append(out.Waiting, prio.Val()...)
	if len(out.Waiting) > limit {
		out.Waiting = out.Waiting[:limit]
	}
	for _, z := range delayed.Val() {
		id, ok := z.Member.(string)
		if !ok {
			continue
		}
		out.Delayed = append(out.Delayed, Delayed{ID: id, Until: delayedDue(z)})
	}
	return out, nil
}

func delayedDue(z redis.Z) time.Time {
	if z.Score <= 0 || z.Score > 1<<62 {
		return time.Time{}
	}
	return time.UnixMilli(int64(z.Score) >> 12).UTC()
}
