package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// resultsPage is how many completed jobs one round trip of CompletedResults
// reads.
const resultsPage = 500

// CompletedResults calls visit with the id and stored result (returnvalue) of
// every completed job of q, oldest first, a page of ids and then their
// results per round trip. A job removed between the two reads (retention)
// is skipped; a result that is not JSON is passed as nil. It is a snapshot
// read, not a transaction: a status count, not an audit.
func (q *Queue) CompletedResults(ctx context.Context, visit func(id string, result json.RawMessage)) error {
	for start := int64(0); ; start += resultsPage {
		ids, err := q.client.ZRange(ctx, q.keys.completed(), start, start+resultsPage-1).Result()
		if err != nil {
			return fmt.Errorf("completed results %s: %w", q.name, err)
		}
		if len(ids) == 0 {
			return nil
		}
		cmds := make([]*redis.StringCmd, len(ids))
		_, err = q.client.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, id := range ids {
				cmds[i] = p.HGet(ctx, q.keys.jobPrefix()+id, "returnvalue")
			}
			return nil
		})
		if err != nil && !errors.Is(err, redis.Nil) {
			return fmt.Errorf("completed results %s: %w", q.name, err)
		}
		for i, id := range ids {
			v, err := cmds[i].Result()
			if errors.Is(err, redis.Nil) {
				continue
			}
			if err != nil {
				return fmt.Errorf("completed results %s: job %s: %w", q.name, id, err)
			}
			var result json.RawMessage
			if json.Valid([]byte(v)) {
				result = json.RawMessage(v)
			}
			visit(id, result)
		}
		if len(ids) < resultsPage {
			return nil
		}
	}
}
