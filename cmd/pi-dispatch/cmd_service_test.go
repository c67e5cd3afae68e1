package main

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

func TestServiceRenderIsTheDeployUnit(t *testing.T) {
	r := runCLI(t, nil, "service", "render", "--dir", "/opt/pi-dispatch")
	if r.code != exitOK || r.stderr != "" {
		t.Fatalf("%+v", r)
	}
	want, err := os.ReadFile("../../deploy/pi-dispatch-worker.service")
	if err != nil {
		t.Fatal(err)
	}
	if r.stdout != string(want) {
		t.Fatalf("deploy/pi-dispatch-worker.service is not what service render prints; regenerate it:\n"+
			"  go run ./cmd/pi-dispatch service render --dir /opt/pi-dispatch > deploy/pi-dispatch-worker.service\n--- got\n%s", r.stdout)
	}
	for _, line := range []string{
		"WorkingDirectory=/opt/pi-dispatch",
		"EnvironmentFile=/opt/pi-dispatch/.env",
		"ExecStart=/usr/local/bin/pi-dispatch-worker",
		"Restart=on-failure",
		"RestartPreventExitStatus=2",
		"KillSignal=SIGTERM",
		"TimeoutStopSec=60",
		"NoNewPrivileges=yes",
		"User=pi-dispatch",
		"SupplementaryGroups=docker",
		"WantedBy=multi-user.target",
	} {
		if !strings.Contains(r.stdout, "\n"+line+"\n") {
			t.Errorf("unit lacks %q", line)
		}
	}
	for _, bad := range []string{"PrivateTmp", "ProtectHome", "UMask"} {
		if strings.Contains(r.stdout, bad) {
			t.Errorf("unit sets %s, which hides host paths from the Docker daemon or the container", bad)
		}
	}
}

func TestServiceRenderFlags(t *testing.T) {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	r := runCLI(t, nil, "service", "render", "--worker-bin", "/srv/bin/worker", "--user", "")
	if r.code != exitOK {
		t.Fatalf("%+v", r)
	}
	for _, line := range []string{"WorkingDirectory=" + wd, "EnvironmentFile=" + wd + "/.env", "ExecStart=/srv/bin/worker"} {
		if !strings.Contains(r.stdout, "\n"+line+"\n") {
			t.Errorf("unit lacks %q:\n%s", line, r.stdout)
		}
	}
	if strings.Contains(r.stdout, "User=") || strings.Contains(r.stdout, "SupplementaryGroups=") {
		t.Errorf("--user \"\" still names a user:\n%s", r.stdout)
	}
	if r := runCLI(t, nil, "service", "render", "--dir", "/opt/pi-dispatch/"); !strings.Contains(r.stdout, "\nEnvironmentFile=/opt/pi-dispatch/.env\n") {
		t.Errorf("trailing slash not cleaned: %+v", r)
	}
}

func TestServiceRenderRefuses(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"service"}, "only render"},
		{[]string{"service", "install"}, "only render"},
		{[]string{"service", "render", "--dir", "/opt/my app"}, "--dir"},
		{[]string{"service", "render", "--dir", "/opt/100%"}, "--dir"},
		{[]string{"service", "render", "--worker-bin", "bin/worker"}, "--worker-bin"},
		{[]string{"service", "render", "--user", "Root User"}, "--user"},
		{[]string{"service", "render", "stray"}, "unexpected argument"},
	} {
		r := runCLI(t, nil, tc.args...)
		if r.code != exitUsage || !strings.Contains(r.stderr, tc.want) || r.stdout != "" {
			t.Errorf("%v: %+v", tc.args, r)
		}
	}
}

func TestDeployComposeAndDockerfile(t *testing.T) {
	compose, err := os.ReadFile("../../deploy/docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	c := string(compose)
	for _, want := range []string{
		"\nservices:\n",
		"\n  valkey:\n",
		"image: valkey/valkey:8",
		`"--appendonly", "yes"`,
		"\n  worker:\n",
		"dockerfile: deploy/Dockerfile",
		"- /var/run/docker.sock:/var/run/docker.sock",
		"VALKEY_URL: redis://valkey:6379",
		"condition: service_healthy",
		"stop_grace_period: 60s",
		"HOST PATHS",
	} {
		if !strings.Contains(c, want) {
			t.Errorf("docker-compose.yml lacks %q", want)
		}
	}
	if strings.Contains(c, "\t") {
		t.Error("docker-compose.yml holds a tab, which YAML refuses as indentation")
	}
	dockerfile, err := os.ReadFile("../../deploy/Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	d := string(dockerfile)
	for _, want := range []string{
		"FROM golang:1.26 AS build",
		"CGO_ENABLED=0",
		"./cmd/worker",
		"FROM scratch",
		`ENTRYPOINT ["/usr/local/bin/pi-dispatch-worker"]`,
	} {
		if !strings.Contains(d, want) {
			t.Errorf("Dockerfile lacks %q", want)
		}
	}
	// Every package the binaries import is copied into the build stage, and
	// nothing else from the checkout (a .env would carry secrets).
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", "../worker", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	const module = "github.com/pidispatch/pidispatch/"
	seen := map[string]bool{}
	for _, pkg := range strings.Fields(string(out)) {
		rest, ok := strings.CutPrefix(pkg, module)
		if !ok {
			continue
		}
		top, _, _ := strings.Cut(rest, "/")
		if !seen[top] && !strings.Contains(d, "COPY "+top+" ./"+top+"\n") {
			t.Errorf("Dockerfile does not copy %s, which %s needs", top, pkg)
		}
		seen[top] = true
	}
	if !seen["dispatch"] || !seen["cmd"] {
		t.Fatalf("go list found no packages of the module: %v", seen)
	}
	if strings.Contains(d, "COPY . ") {
		t.Error("Dockerfile copies the whole checkout")
	}
}

// The unit's stop timeout outlasts the worker's shutdown grace, so systemd
// never kills a worker still giving its jobs their grace.
func TestServiceRenderStopTimeoutFollowsTheGrace(t *testing.T) {
	r := runCLI(t, map[string]string{"PI_SHUTDOWN_GRACE": "2m"}, "service", "render", "--dir", "/opt/pi-dispatch")
	if r.code != exitOK || !strings.Contains(r.stdout, "\nTimeoutStopSec=155\n") {
		t.Fatalf("%+v", r)
	}
	r = runCLI(t, map[string]string{"PI_SHUTDOWN_GRACE": "soon"}, "service", "render", "--dir", "/opt/pi-dispatch")
	if r.code != exitOK || !strings.Contains(r.stdout, "\nTimeoutStopSec=60\n") || !strings.Contains(r.stderr, "PI_SHUTDOWN_GRACE") {
		t.Fatalf("%+v", r)
	}
}
