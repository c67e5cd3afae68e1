package stack_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pidispatch/pidispatch/config"
	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/stack"
)

// Build reads the policy files before it dials anything: a file that does
// not parse refuses boot as a ConfigError naming its variable, with Valkey
// never asked (the URL names a port nobody listens on).
func TestBuildReadsThePolicyFilesFirst(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bad := filepath.Join(dir, "pause.json")
	if err := os.WriteFile(bad, []byte(`{"windows":[{"scope":"*","from":"01:00","to":"01:00"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	// A Valkey that counts who dials it: Build must read the file first.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var dials atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			dials.Add(1)
			_ = c.Close()
		}
	}()
	env := map[string]string{"VALKEY_URL": "redis://" + ln.Addr().String() + "/0", "PI_UNSIGNED_QUEUES": "*", "PI_LOGS_DIR": dir, "PI_PAUSE_WINDOWS_FILE": bad}
	cfg, err := config.Load(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	_, err = stack.Build(context.Background(), cfg, slog.New(slog.DiscardHandler), dispatch.Tuning{JobsDir: t.TempDir()})
	var ce *config.ConfigError
	if !errors.As(err, &ce) || ce.Var != "PI_PAUSE_WINDOWS_FILE" || !strings.Contains(ce.Rule, "windows[0].to") {
		t.Fatalf("Build: %v, want a PI_PAUSE_WINDOWS_FILE error naming windows[0].to", err)
	}
	_ = ln.Close()
	if n := dials.Load(); n != 0 {
		t.Fatalf("Build dialled Valkey %d time(s) before reading the file", n)
	}
}

// beats records the registry beats the Worker reports.
type beats struct {
	mu sync.Mutex
	at []time.Time
}

func (b *beats) Observe(ev dispatch.Event) {
	if ev.Kind != dispatch.EventBeat {
		return
	}
	b.mu.Lock()
	b.at = append(b.at, ev.At)
	b.mu.Unlock()
}

func (b *beats) first() (time.Time, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.at) == 0 {
		return time.Time{}, false
	}
	return b.at[0], true
}

// One clock: the Worker's Tuning.Now stamps the registry's beats too.
func TestBuildStampsBeatsWithTheWorkersClock(t *testing.T) {
	db := livetest.Valkey(t)
	env := map[string]string{"VALKEY_URL": db.URL, "PI_UNSIGNED_QUEUES": "*", "PI_WORKER_NAME": fmt.Sprintf("clock-%d", db.DB), "PI_LOGS_DIR": t.TempDir(), "PI_JOB_IMAGE": "never-pulled:1"}
	cfg, err := config.Load(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	// A day behind: far from the real clock, inside every retention.
	lag := 24 * time.Hour
	now := func() time.Time { return time.Now().Add(-lag) }
	seen := &beats{}
	s, err := stack.Build(context.Background(), cfg, slog.New(slog.DiscardHandler),
		dispatch.Tuning{JobsDir: t.TempDir(), Now: now, Version: "test"},
		func(d *dispatch.Deps) { d.Runtime = &scriptedRuntime{}; d.Observers = append(d.Observers, seen) })
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Worker.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	deadline := time.Now().Add(20 * time.Second)
	for {
		if at, ok := seen.first(); ok {
			if d := time.Since(at); d < lag-time.Minute || d > lag+time.Minute {
				t.Fatalf("beat stamped %s, %s before the real clock; want the Worker's clock, %s behind", at, d, lag)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("no registry beat reported")
		}
		time.Sleep(50 * time.Millisecond)
	}
}
