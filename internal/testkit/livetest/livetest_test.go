package livetest_test

import (
	"context"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
)

// TestValkeySmoke proves a real Valkey answers and that two tests' databases
// are separate namespaces.
func TestValkeySmoke(t *testing.T) {
	a := livetest.Valkey(t)
	b := livetest.Valkey(t)
	if a.DB == b.DB {
		t.Fatalf("two leases got the same database %d", a.DB)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := a.Client.Set(ctx, "k", "a", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if n, err := b.Client.Exists(ctx, "k").Result(); err != nil || n != 0 {
		t.Fatalf("key leaked across test databases: exists=%d err=%v", n, err)
	}
	tm, err := a.Client.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	if tm.IsZero() {
		t.Fatal("server TIME returned zero")
	}
	info, err := a.Client.Info(ctx, "server").Result()
	if err != nil || info == "" {
		t.Fatalf("INFO server: %q %v", info, err)
	}
}

// TestDockerSmoke proves a real Docker daemon answers and reports itself.
func TestDockerSmoke(t *testing.T) {
	c := livetest.Docker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	v, err := c.ServerVersion(ctx, client.ServerVersionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if v.APIVersion == "" || v.Os == "" {
		t.Fatalf("daemon version incomplete: %+v", v)
	}
	t.Logf("docker %s api %s os %s", v.Version, v.APIVersion, v.Os)
}
