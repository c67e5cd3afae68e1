package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pidispatch/pidispatch/internal/image/jobimage"
)

// The worker binary refuses to boot on a triggers file whose triggers name
// a flow the host does not know: exit 2, its stderr naming the file, each
// such trigger and the flow, and nothing connected (Valkey is a listener
// that counts who dials it) and nothing written. A trigger naming a known
// flow is not named.
func TestUnknownFlowInTriggersRefusesBoot(t *testing.T) {
	t.Parallel()
	bin := workerBinary(t)
	dir := t.TempDir()
	folder := filepath.Join(dir, "app")
	if err := os.Mkdir(folder, 0o755); err != nil {
		t.Fatal(err)
	}
	triggers := filepath.Join(dir, "triggers.json")
	data, err := json.Marshal(map[string]any{"triggers": []any{
		map[string]any{"on": map[string]any{"type": "cron", "id": "nightly-tidy", "pattern": "0 3 * * *"},
			"run": map[string]any{"kind": "local", "folder": folder, "flow": "no-such-flow", "task": "tidy up"}},
		map[string]any{"on": map[string]any{"type": "label", "id": "fix-on-label", "repos": []string{"acme/api"}, "any": []string{"pi:fix"}},
			"run": map[string]any{"kind": "github", "flow": "fix"}},
		map[string]any{"on": map[string]any{"type": "comment", "id": "ask-pi", "repos": []string{"acme/api"}, "phrase": "/pi"},
			"run": map[string]any{"kind": "github", "flow": "no-such-flow"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(triggers, data, 0o600); err != nil {
		t.Fatal(err)
	}
	valkey := listenRecorder(t, "tcp", "127.0.0.1:0")
	logs := filepath.Join(dir, "logs")
	p := startProcess(t, bin, processEnv(map[string]string{
		"VALKEY_URL": "redis://" + valkey.ln.Addr().String() + "/0", "PI_UNSIGNED_QUEUES": "*", "PI_WORKER_NAME": "flows-boot-" + randomHex(4),
		"PI_TRIGGERS_FILE": triggers, "PI_LOGS_DIR": logs, "PI_JOB_IMAGE": jobimage.TestTag, "PI_FOLDER_ROOTS": dir,
		// Its github triggers need a github credential, or that is what it refuses.
		"GITHUB_PAT": "ghp_test-" + randomHex(8),
	}))
	code := p.exit(t, argsGuard)
	out := p.stderr.String()
	t.Logf("stderr: %s", out)
	if code != exitConfig {
		t.Fatalf("exit %d, want %d; stderr:\n%s", code, exitConfig, out)
	}
	for _, want := range []string{"PI_TRIGGERS_FILE", triggers, `triggers[0] (nightly-tidy): run.flow "no-such-flow"`,
		`triggers[2] (ask-pi): run.flow "no-such-flow"`, "not a flow this host knows"} {
		if !strings.Contains(out, want) {
			t.Errorf("stderr does not name %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "fix-on-label") {
		t.Errorf("stderr names the trigger of a known flow:\n%s", out)
	}
	time.Sleep(100 * time.Millisecond)
	if n := valkey.accepted.Load(); n != 0 {
		t.Errorf("the refused worker dialled Valkey %d times", n)
	}
	if entries, err := os.ReadDir(logs); err == nil {
		for _, e := range entries {
			t.Errorf("the refused worker wrote %s in its logs folder", e.Name())
		}
	}
}
