package entrypoint

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/pidispatch/pidispatch/agent/image"
)

// The production Dockerfile and lock file say what this package says.
func TestImageRecipeMatchesPackage(t *testing.T) {
	df, err := os.ReadFile("../image/Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		LabelContract + `="` + ContractVersion + `"`,
		LabelCapabilities + `="` + Capabilities + `"`,
		LabelAgent + `="` + AgentPackage + `"`,
		"FROM node:" + nodeVersion(t) + "-slim", "npm ci", "PI_TELEMETRY=0", "PI_OFFLINE=1", "USER node",
	} {
		if !strings.Contains(string(df), want) {
			t.Errorf("agent/image/Dockerfile lacks %s", want)
		}
	}
	lock, err := os.ReadFile("../image/package-lock.json")
	if err != nil {
		t.Fatal(err)
	}
	var l struct {
		Packages map[string]struct {
			Version string `json:"version"`
		} `json:"packages"`
	}
	if err := json.Unmarshal(lock, &l); err != nil {
		t.Fatal(err)
	}
	name, version, _ := strings.Cut(strings.TrimPrefix(AgentPackage, "@"), "@")
	if !strings.HasPrefix(AgentPackage, "@"+name+"@") {
		t.Fatalf("AgentPackage %q is not @scope/name@version", AgentPackage)
	}
	if got := l.Packages["node_modules/@"+name].Version; got != version {
		t.Fatalf("package-lock.json pins %s at %q, want %s", name, got, version)
	}
}

// nodeVersion is the Node.js version agent/image/node/package-lock.json pins.
func nodeVersion(t *testing.T) string {
	t.Helper()
	v, err := image.NodeVersion()
	if err != nil {
		t.Fatal(err)
	}
	return v
}
