package main

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/valkey"
)

// A worker whose password Valkey refuses (none, or a wrong one) refuses boot
// with exit 2 naming the fix, within seconds, instead of starting and failing
// every call for ever; systemd's unit does not restart on exit 2.
func TestBootRefusedPassword(t *testing.T) {
	t.Parallel()
	srv := livetest.StartServer(t)
	if err := srv.Client().ConfigSet(context.Background(), "requirepass", "pw1").Err(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ url, pw string }{
		{srv.URL(), ""},
		{srv.URL(), "wrong"},
		{"redis://:wrong@" + srv.Addr() + "/0", "pw1"},
	} {
		env := map[string]string{"VALKEY_URL": tc.url, "PI_UNSIGNED_QUEUES": "*", "VALKEY_PASSWORD": tc.pw, "PI_WORKER_NAME": "authcheck", "PI_LOGS_DIR": t.TempDir()}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		var stderr bytes.Buffer
		start := time.Now()
		code := run(ctx, nil, func(k string) string { return env[k] }, io.Discard, &stderr)
		el := time.Since(start)
		cancel()
		out := stderr.String()
		if code != exitConfig || el > 15*time.Second || !strings.Contains(out, valkey.ErrAuthRefused.Error()) ||
			strings.Contains(out, "worker_started") || strings.Contains(out, "wrong") {
			t.Fatalf("%s with %q: exit %d after %s:\n%s", tc.url, tc.pw, code, el, out)
		}
	}
	admin, err := valkey.NewClient(srv.URL(), valkey.Options{Password: "pw1"})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if n, err := admin.DBSize(context.Background()).Result(); err != nil || n != 0 {
		t.Fatalf("a refused boot wrote %d keys (%v)", n, err)
	}

	// With the password the worker boots, and stops cleanly with its context.
	env := map[string]string{"VALKEY_URL": srv.URL(), "PI_UNSIGNED_QUEUES": "*", "VALKEY_PASSWORD": "pw1", "PI_WORKER_NAME": "authcheck", "PI_LOGS_DIR": t.TempDir()}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	var stderr bytes.Buffer
	if code := run(ctx, nil, func(k string) string { return env[k] }, io.Discard, &stderr); code != exitOK || !strings.Contains(stderr.String(), `"msg":"worker_started"`) {
		t.Fatalf("with the password: exit %d\n%s", code, stderr.String())
	}
}
