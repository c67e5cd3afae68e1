package main

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// The README's install step installs both binaries by this module's path and
// puts the worker where the systemd unit in deploy/ and service render run it.
func TestReadmeInstallMatchesTheUnit(t *testing.T) {
	readme := readRepoFile(t, "README.md")
	mod := regexp.MustCompile(`(?m)^module (\S+)$`).FindStringSubmatch(readRepoFile(t, "go.mod"))
	if mod == nil {
		t.Fatal("go.mod names no module")
	}
	for _, cmd := range []string{"worker", "pi-dispatch"} {
		if !strings.Contains(readme, "go install ") || !strings.Contains(readme, mod[1]+"/cmd/"+cmd+"@latest") {
			t.Errorf("README does not go install %s/cmd/%s", mod[1], cmd)
		}
	}
	unit := readRepoFile(t, "deploy/pi-dispatch-worker.service")
	if !strings.Contains(unit, "\nExecStart="+defaultWorkerBin+"\n") {
		t.Errorf("deploy unit does not run %s", defaultWorkerBin)
	}
	if !strings.Contains(unit, "\nRestartPreventExitStatus=2\n") {
		t.Error("deploy unit restarts a worker that refused boot (exit 2)")
	}
	if !strings.Contains(readme, `"$bin/worker" `+defaultWorkerBin) {
		t.Errorf("README does not install the worker as %s", defaultWorkerBin)
	}
}

func readRepoFile(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile("../../" + path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}
