package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pidispatch/pidispatch/internal/image/jobimage"
)

// A worker whose triggers file has forge triggers and which holds no
// credential for their forge refuses to boot (exit 2) naming the file and
// the forge: its forge jobs could only ever be refused.
func TestForgeTriggersWithoutCredentialRefuseBoot(t *testing.T) {
	t.Parallel()
	bin := workerBinary(t)
	dir := t.TempDir()
	triggers := filepath.Join(dir, "triggers.json")
	data, err := json.Marshal(map[string]any{"triggers": []any{
		map[string]any{"on": map[string]any{"type": "label", "id": "fix-on-label", "repos": []string{"acme/api"}, "any": []string{"pi:fix"}},
			"run": map[string]any{"kind": "github", "flow": "fix"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(triggers, data, 0o600); err != nil {
		t.Fatal(err)
	}
	valkey := listenRecorder(t, "tcp", "127.0.0.1:0")
	p := startProcess(t, bin, processEnv(map[string]string{
		"VALKEY_URL": "redis://" + valkey.ln.Addr().String() + "/0", "PI_UNSIGNED_QUEUES": "*", "PI_WORKER_NAME": "nocred-boot-" + randomHex(4),
		"PI_TRIGGERS_FILE": triggers, "PI_LOGS_DIR": filepath.Join(dir, "logs"), "PI_JOB_IMAGE": jobimage.TestTag,
	}))
	code := p.exit(t, argsGuard)
	out := p.stderr.String()
	if code != exitConfig {
		t.Fatalf("exit %d, want %d; stderr:\n%s", code, exitConfig, out)
	}
	for _, want := range []string{"PI_TRIGGERS_FILE", triggers, "github triggers", "no github credential"} {
		if !strings.Contains(out, want) {
			t.Errorf("stderr does not name %q:\n%s", want, out)
		}
	}
	if n := valkey.accepted.Load(); n != 0 {
		t.Errorf("the refused worker dialled Valkey %d times", n)
	}
}
