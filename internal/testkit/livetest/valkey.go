package livetest

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Keys in database 0 that hand out test databases. Database 0 itself is never
// given to a test.
const (
	nextDBKey   = "pidispatch:test:nextdb"
	dbLeaseKey  = "pidispatch:test:db:" // + number
	dbLeaseTTL  = 30 * time.Minute
	dialTimeout = 3 * time.Second
)

// ValkeyDB is a logical database of the test server that belongs to one test
// until it ends.
type ValkeyDB struct {
	// Client talks to the test's own database.
	Client *redis.Client
	// URL names the same database (redis://host:port/N), for code under test
	// that builds its own client, or for child processes.
	URL string
	// DB is the database number.
	DB int
}

// Valkey gives the test a logical database of its own on the server at
// VALKEY_TEST_URL: empty at the start, flushed at the end, never shared with a
// concurrently running test (in this or another package's test binary).
// It skips (or fails, when PIDISPATCH_REQUIRE_LIVE=1) when the server is absent.
func Valkey(t testing.TB) *ValkeyDB {
	t.Helper()
	SkipShort(t)
	raw := os.Getenv(EnvValkey)
	if raw == "" {
		unavailable(t, "%s is not set", EnvValkey)
		return nil
	}
	opts, err := redis.ParseURL(raw)
	if err != nil {
		t.Fatalf("%s=%q: %v", EnvValkey, raw, err)
	}
	opts.DB = 0
	opts.DialTimeout = dialTimeout
	admin := redis.NewClient(opts)
	defer admin.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := admin.Ping(ctx).Err(); err != nil {
		unavailable(t, "valkey at %s: %v", raw, err)
		return nil
	}
	count, err := databases(ctx, admin)
	if err != nil {
		t.Fatalf("valkey at %s: %v", raw, err)
	}
	if count < 2 {
		t.Fatalf("valkey at %s has %d database(s); tests need at least 2 (start it with --databases 4096)", raw, count)
	}

	db, err := leaseDB(ctx, admin, count, t.Name())
	if err != nil {
		t.Fatalf("valkey at %s: %v", raw, err)
	}
	dbOpts := *opts
	dbOpts.DB = db
	client := redis.NewClient(&dbOpts)
	if err := client.FlushDB(ctx).Err(); err != nil {
		t.Fatalf("flush test database %d: %v", db, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = client.FlushDB(ctx).Err()
		_ = client.Close()
		release := redis.NewClient(opts)
		defer release.Close()
		_ = release.Del(ctx, dbLeaseKey+strconv.Itoa(db)).Err()
	})
	return &ValkeyDB{Client: client, URL: withDB(raw, db), DB: db}
}

// databases reads the server's `databases` setting.
func databases(ctx context.Context, c *redis.Client) (int, error) {
	cfg, err := c.ConfigGet(ctx, "databases").Result()
	if err != nil {
		return 0, fmt.Errorf("config get databases: %w", err)
	}
	n, err := strconv.Atoi(cfg["databases"])
	if err != nil {
		return 0, fmt.Errorf("config get databases: %q is not a number", cfg["databases"])
	}
	return n, nil
}

// leaseDB claims a free database number in 1..count-1 with SET NX, starting at
// a shared counter so parallel test binaries spread out.
func leaseDB(ctx context.Context, c *redis.Client, count int, owner string) (int, error) {
	start, err := c.Incr(ctx, nextDBKey).Result()
	if err != nil {
		return 0, fmt.Errorf("allocate test database: %w", err)
	}
	value := fmt.Sprintf("%d:%s", os.Getpid(), owner)
	for i := range count - 1 {
		db := 1 + int((start+int64(i))%int64(count-1))
		ok, err := c.SetNX(ctx, dbLeaseKey+strconv.Itoa(db), value, dbLeaseTTL).Result()
		if err != nil {
			return 0, fmt.Errorf("lease test database %d: %w", db, err)
		}
		if ok {
			return db, nil
		}
	}
	return 0, fmt.Errorf("all %d test databases are leased; wait or start the server with more --databases", count-1)
}

// withDB returns raw with its database path set to db.
func withDB(raw string, db int) string {
	u, err := url.Parse(raw)
	if err != nil {
		return raw
	}
	u.Path = "/" + strconv.Itoa(db)
	return u.String()
}
