package queue

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/pidispatch/pidispatch/fleet"
	"github.com/redis/go-redis/v9"
)

// A host queue's lines carry the caller's host once: the queue adds only its
// name (a second "host" key made a JSON line that parsers read differently).
func TestQueueLogAddsOnlyItsName(t *testing.T) {
	var buf bytes.Buffer
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	logger := slog.New(slog.NewJSONHandler(&buf, nil)).With("host", "b")
	q, err := New(c, fleet.HostQueueName("b"), Config{Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	q.log.Warn("probe")
	line := buf.String()
	if strings.Count(line, `"host"`) != 1 || !strings.Contains(line, `"queue":"pi-jobs@b"`) {
		t.Fatalf("log line %s: want one host and the queue", line)
	}
}
