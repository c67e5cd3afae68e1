package queue

import (
	"context"
	"fmt"
	"strings"
)

// maxUnlockedScan bounds how many active jobs Unlocked looks at in one call.
const maxUnlockedScan = 10000

// Unlocked lists the active jobs whose lock has expired: the jobs the next
// CheckStalled will fail or requeue, unless their holder renews the lock
// first. It changes nothing. A caller that must write something durable
// about a stalled job before its state changes (a run record) reads the
// candidates here, writes, then calls CheckStalled.
func (q *Queue) Unlocked(ctx context.Context) ([]string, error) {
	ids, err := q.client.LRange(ctx, q.keys.active(), 0, maxUnlockedScan-1).Result()
	if err != nil {
		return nil, fmt.Errorf("unlocked jobs of %s: %w", q.name, err)
	}
	if len(ids) == 0 {
		return nil, nil
	}
	pipe := q.client.Pipeline()
	locks := make([]interface{ Val() int64 }, len(ids))
	for i, id := range ids {
		locks[i] = pipe.Exists(ctx, q.keys.jobPrefix()+id+":lock")
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("unlocked jobs of %s: %w", q.name, err)
	}
	var out []string
	for i, id := range ids {
		// "0:..." entries are BullMQ's markers, not jobs (stalled.lua drops them).
		if locks[i].Val() == 0 && !strings.HasPrefix(id, "0:") {
			out = append(out, id)
		}
	}
	return out, nil
}
