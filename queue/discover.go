package queue

import (
	"context"
	"slices"

	"github.com/pidispatch/pidispatch/fleet"
	"github.com/redis/go-redis/v9"
)

// discoverScanCount is the SCAN page size hint.
const discoverScanCount = 500

// Discover returns the host queues that exist under prefix ("" means
// DefaultPrefix): a complete SCAN of "<prefix>:pi-jobs@*:meta", each name
// re-validated (keys written by peers may be junk; invalid ones are
// skipped), sorted and unique. fleet.SharedQueue is not included. When the scan
// cannot finish (ctx ends, Valkey errs) it returns a *DiscoveryError, which
// matches ErrDiscoveryIncomplete and carries the names seen so far, never a
// silently partial list.
//
// It scans the node client talks to: on a Valkey Cluster that is one shard.
func Discover(ctx context.Context, client redis.UniversalClient, prefix string) ([]string, error) {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	seen := map[string]bool{}
	collect := func() []string {
		names := make([]string, 0, len(seen))
		for n := range seen {
			names = append(names, n)
		}
		slices.Sort(names)
		return names
	}
	pattern := hostMetaPattern(prefix)
	var cursor uint64
	for {
		if err := ctx.Err(); err != nil {
			return nil, &DiscoveryError{Found: collect(), Err: err}
		}
		keys, next, err := client.Scan(ctx, cursor, pattern, discoverScanCount).Result()
		if err != nil {
			return nil, &DiscoveryError{Found: collect(), Err: err}
		}
		for _, k := range keys {
			name, ok := queueFromMetaKey(prefix, k)
			if ok && name != fleet.SharedQueue && ValidateQueueName(name) == nil {
				seen[name] = true
			}
		}
		if next == 0 {
			return collect(), nil
		}
		cursor = next
	}
}
