package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
)

// A forge trigger that does not parse refuses boot with exit 2, naming the
// triggers file and the rule, before anything connects: the worker reads
// its publish policies from the same file the receiver reads its triggers.
func TestForgeTriggerThatDoesNotParseRefusesBoot(t *testing.T) {
	t.Parallel()
	db := livetest.Valkey(t)
	triggers := filepath.Join(t.TempDir(), "triggers.json")
	data := `{"triggers":[{"on":{"type":"cron","id":"nightly","pattern":"0 3 * * *"},"run":{"kind":"local","folder":"/srv/app","flow":"fix","task":"tidy"}},` +
		`{"on":{"type":"label","id":"ci","repos":["acme/api"],"any":["pi"]},"run":{"kind":"github","flow":"fix"},"publish":{"allowCi":"yes"}}]}`
	if err := os.WriteFile(triggers, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	code := run(context.Background(), nil, testEnv(t, db.URL, map[string]string{"PI_TRIGGERS_FILE": triggers}), io.Discard, &stderr)
	out := stderr.String()
	if code != exitConfig || !strings.Contains(out, "PI_TRIGGERS_FILE") || !strings.Contains(out, triggers) || !strings.Contains(out, "triggers[1]") || !strings.Contains(out, "publish") {
		t.Fatalf("exit %d, stderr %q; want 2 naming PI_TRIGGERS_FILE, the file, triggers[1] and publish", code, out)
	}
	if !strings.Contains(out, "nothing started") {
		t.Fatalf("refused after starting: %q", out)
	}
}
