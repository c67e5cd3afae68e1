package queuebench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// trivialScript is the cheapest script call there is: what the server
// spends on an EVALSHA round trip itself, with no work inside.
var trivialScript = redis.NewScript("return 1")

// evalshaRate runs trivialScript from clients concurrent goroutines (one
// connection each) for d and returns the calls per second completed.
func evalshaRate(ctx context.Context, url string, clients int, d time.Duration) (float64, error) {
	rdb, err := newClient(url, clients)
	if err != nil {
		return 0, err
	}
	defer rdb.Close()
	sha, err := trivialScript.Load(ctx, rdb).Result()
	if err != nil {
		return 0, fmt.Errorf("script load: %w", err)
	}
	// Open every connection before the clock starts.
	var wg sync.WaitGroup
	for range clients {
		wg.Go(func() { _ = rdb.Ping(ctx).Err() })
	}
	wg.Wait()

	var calls atomic.Int64
	var mu sync.Mutex
	var firstErr error
	start := time.Now()
	deadline := start.Add(d)
	for range clients {
		wg.Go(func() {
			n := int64(0)
			for time.Now().Before(deadline) {
				if err := rdb.EvalSha(ctx, sha, nil).Err(); err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					break
				}
				n++
			}
			calls.Add(n)
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if firstErr != nil {
		return 0, fmt.Errorf("evalsha: %w", firstErr)
	}
	return float64(calls.Load()) / elapsed.Seconds(), nil
}
