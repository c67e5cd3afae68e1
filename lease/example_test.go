package lease_test

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/lease"
)

// A worker bounds a scope's concurrency across the fleet: at most 2 jobs of
// acme/web at once, whichever hosts run them.
func ExampleLease_Acquire() {
	ctx := context.Background()
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer client.Close()
	l := lease.New(client, "mini1", lease.Config{})

	hash := fleet.ScopeHash("acme/web")
	h, err := l.Acquire(ctx, "gh-123", 2, 35*time.Minute, func(i int) string { return fleet.ScopeSlotKey(hash, i) })
	if err != nil {
		return
	}
	if h == nil {
		fmt.Println("scope busy: defer the job")
		return
	}
	defer h.Release(ctx)
	if h.Degraded() {
		fmt.Println("Valkey unreachable: only the in-process bound holds")
	}
	// ... run the job ...
}

// At boot, after the container reaper has enumerated and removed this host's
// job containers, the worker deletes its own stale scope claims.
func ExampleLease_SweepOwnClaims() {
	ctx := context.Background()
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer client.Close()
	l := lease.New(client, "mini1", lease.Config{})

	reaped := true // the reaper listed this host's containers and removed them
	n, err := l.SweepOwnClaims(ctx, reaped, []lease.ScopeRow{{Scope: "acme/web", Concurrent: 2}})
	if err != nil {
		fmt.Println("sweep failed; the claims expire at their TTL:", err)
	}
	fmt.Println("swept", n)
}
