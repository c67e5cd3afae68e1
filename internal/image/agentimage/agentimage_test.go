package agentimage_test

import (
	"bytes"
	"context"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/pidispatch/pidispatch/agent/entrypoint"
	"github.com/pidispatch/pidispatch/agent/image"
	"github.com/pidispatch/pidispatch/internal/image/agentimage"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
)

// TestEnsureAssemblesTheAgentOffline builds (or finds) the offline agent
// image and runs pi in it with no network: the pinned version answers, the
// labels say what the image is, and a second Ensure with nothing changed is
// answered from the label in well under 2 s.
func TestEnsureAssemblesTheAgentOffline(t *testing.T) {
	c := livetest.Docker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	start := time.Now()
	if err := agentimage.Ensure(ctx, c, agentimage.Tag, t.Logf); err != nil {
		t.Fatal(err)
	}
	t.Logf("first Ensure: %v", time.Since(start))
	start = time.Now()
	if err := agentimage.Ensure(ctx, c, agentimage.Tag, func(f string, a ...any) { t.Errorf("cached Ensure rebuilt: "+f, a...) }); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("cached Ensure took %v, want < 2s", d)
	}

	img, err := c.ImageInspect(ctx, agentimage.Tag)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{
		entrypoint.LabelContract: entrypoint.ContractVersion, entrypoint.LabelCapabilities: entrypoint.Capabilities,
		entrypoint.LabelAgent: entrypoint.AgentPackage,
	} {
		if img.Config.Labels[k] != v {
			t.Errorf("label %s = %q, want %q", k, img.Config.Labels[k], v)
		}
	}
	if img.Config.User != "1000:1000" || !slices.Equal(img.Config.Entrypoint, []string{"/usr/local/bin/pi-entrypoint"}) {
		t.Errorf("user %q, entrypoint %q", img.Config.User, img.Config.Entrypoint)
	}
	t.Logf("image size: %d MB", img.Size>>20)

	_, version, _ := strings.Cut(strings.TrimPrefix(entrypoint.AgentPackage, "@"), "@")
	if !strings.Contains(agentimage.Tag, ":"+version+"-") {
		t.Errorf("tag %s does not name the pinned pi %s", agentimage.Tag, version)
	}
	out, code := run(t, c, "pi", "--version")
	if code != 0 || strings.TrimSpace(out) != version {
		t.Fatalf("pi --version: exit %d, %q, want %s", code, out, version)
	}
	// The image runs the Node.js of agent/image/node/package-lock.json, not the
	// machine's.
	out, code = run(t, c, "node", "--version")
	if want := "v" + nodeVersion(t); code != 0 || strings.TrimSpace(out) != want {
		t.Fatalf("node --version: exit %d, %q, want %s", code, out, want)
	}
	// With no job mounted the entrypoint refuses, speaking the contract.
	out, code = run(t, c)
	if code != entrypoint.ExitPolicy || !strings.Contains(out, `"reason":"invalid-job"`) {
		t.Fatalf("no job: exit %d, %q", code, out)
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

// run runs the image with --network none and returns its output (stdout
// and stderr) and exit code.
func run(t *testing.T, c *client.Client, cmd ...string) (string, int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := c.ContainerCreate(ctx, client.ContainerCreateOptions{
		Config:     &container.Config{Image: agentimage.Tag, Cmd: cmd},
		HostConfig: &container.HostConfig{NetworkMode: "none"},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.ContainerRemove(context.Background(), res.ID, client.ContainerRemoveOptions{Force: true})
	wait := c.ContainerWait(ctx, res.ID, client.ContainerWaitOptions{Condition: container.WaitConditionNextExit})
	if _, err := c.ContainerStart(ctx, res.ID, client.ContainerStartOptions{}); err != nil {
		t.Fatal(err)
	}
	var code int64
	select {
	case r := <-wait.Result:
		code = r.StatusCode
	case err := <-wait.Error:
		t.Fatal(err)
	}
	logs, err := c.ContainerLogs(ctx, res.ID, client.ContainerLogsOptions{ShowStdout: true, ShowStderr: true})
	if err != nil {
		t.Fatal(err)
	}
	defer logs.Close()
	var out bytes.Buffer // pi prints its version on stderr
	_, _ = stdcopy.StdCopy(&out, &out, logs)
	return out.String(), code
}

// The scratch module's main is cmd/pi-entrypoint's.
func TestMainSourceIsTheCommand(t *testing.T) {
	cmd, err := os.ReadFile("../../../cmd/pi-entrypoint/main.go")
	if err != nil {
		t.Fatal(err)
	}
	copied, err := os.ReadFile("main.go.txt")
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Replace(string(cmd), `"github.com/pidispatch/pidispatch/agent/entrypoint"`, `"pientrypoint/entrypoint"`, 1)
	if string(copied) != want {
		t.Fatal("internal/image/agentimage/main.go.txt differs from cmd/pi-entrypoint/main.go: copy it again (with the import renamed)")
	}
}
