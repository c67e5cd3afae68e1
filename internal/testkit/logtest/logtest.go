// Package logtest is a log sink for tests: a buffer that slog handlers on
// many goroutines write to while the test reads it.
package logtest

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

// Buffer is a bytes.Buffer safe for concurrent writers and readers. The zero
// value is ready to use.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Logger returns a JSON logger at debug level that writes to b.
func (b *Buffer) Logger() *slog.Logger {
	return slog.New(slog.NewJSONHandler(b, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// Lines returns every line written so far, decoded as JSON. A line that is
// not JSON fails the test.
func (b *Buffer) Lines(t testing.TB) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(b.String()), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line is not JSON: %q", line)
		}
		out = append(out, m)
	}
	return out
}

// Events returns the decoded lines whose message is msg.
func (b *Buffer) Events(t testing.TB, msg string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, m := range b.Lines(t) {
		if m["msg"] == msg {
			out = append(out, m)
		}
	}
	return out
}

// Count returns how many lines have message msg.
func (b *Buffer) Count(t testing.TB, msg string) int {
	t.Helper()
	return len(b.Events(t, msg))
}

// WaitEvents waits up to 5 seconds until msg has been logged at least n
// times, and returns those lines; it fails the test when they do not come.
func (b *Buffer) WaitEvents(t testing.TB, msg string, n int) []map[string]any {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		ev := b.Events(t, msg)
		if len(ev) >= n {
			return ev
		}
		if time.Now().After(deadline) {
			t.Fatalf("waited 5s for %d %s event(s), have %d; log:\n%s", n, msg, len(ev), b)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// EveryLineHasHost fails the test when a line lacks host=host.
func (b *Buffer) EveryLineHasHost(t testing.TB, host string) {
	t.Helper()
	for _, m := range b.Lines(t) {
		if m["host"] != host {
			t.Fatalf("log line without host=%q: %v", host, m)
		}
	}
}
