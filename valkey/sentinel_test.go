package valkey_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/valkey"
)

// startSentinel runs a redis-sentinel that monitors master as "mymaster" and
// returns its address; it stops when the test ends.
func startSentinel(t *testing.T, master string) string {
	t.Helper()
	bin, err := exec.LookPath("redis-sentinel")
	if err != nil {
		if livetest.Required() {
			t.Fatalf("redis-sentinel: %v", err)
		}
		t.Skipf("redis-sentinel: %v", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	host, mport, _ := net.SplitHostPort(master)
	dir := t.TempDir()
	conf := filepath.Join(dir, "sentinel.conf")
	body := fmt.Sprintf("port %d\nbind 127.0.0.1\ndir %s\nsentinel monitor mymaster %s %s 1\n", port, dir, host, mport)
	if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, conf)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	sc := redis.NewSentinelClient(&redis.Options{Addr: addr, DialTimeout: 200 * time.Millisecond, MaxRetries: -1})
	defer sc.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		_, err := sc.GetMasterAddrByName(ctx, "mymaster").Result()
		cancel()
		if err == nil {
			return addr
		}
		if time.Now().After(deadline) {
			t.Fatalf("sentinel on %s: %v", addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A master_name query option makes the URL a Sentinel's: the client asks it
// for the master, with the same password rule and the same refusal.
func TestNewClientSentinel(t *testing.T) {
	master := requirePass(t, "pw1")
	sentinel := startSentinel(t, master.Addr())
	url := "redis://" + sentinel + "/0?master_name=mymaster"
	ctx := context.Background()

	c, err := valkey.NewClient(url, valkey.Options{Password: "pw1", OneShot: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Set(ctx, "via-sentinel", "1", 0).Err(); err != nil {
		t.Fatalf("through the sentinel: %v", err)
	}
	direct, err := valkey.NewClient(master.URL(), valkey.Options{Password: "pw1"})
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close()
	if v, err := direct.Get(ctx, "via-sentinel").Result(); err != nil || v != "1" {
		t.Fatalf("the master does not hold the write: %q, %v", v, err)
	}

	for _, pw := range []string{"", "wrong"} {
		bad, err := valkey.NewClient(url, valkey.Options{Password: pw, OneShot: true})
		if err != nil {
			t.Fatal(err)
		}
		authRefused(t, "sentinel, password "+strconv.Quote(pw), bad.Ping(ctx).Err(), "")
		_ = bad.Close()
	}
}
