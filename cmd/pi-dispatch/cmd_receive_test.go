package main

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func receiveVars(t *testing.T, triggers string) map[string]string {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "triggers.json")
	if err := os.WriteFile(path, []byte(triggers), 0o600); err != nil {
		t.Fatal(err)
	}
	return map[string]string{
		"PI_ENV_FILE": "/dev/null", "PI_TRIGGERS_FILE": path, "PI_UNSIGNED_QUEUES": "*",
		"WEBHOOK_SECRET": "s3cret-value", "GITHUB_PAT": "ghp_secretvalue",
		// --check asks GitHub about the credential: here nothing answers
		// (a warning), so the test never reaches the real GitHub.
		"GITHUB_API_URL": "http://127.0.0.1:1",
	}
}

const goodForgeTriggers = `{"triggers": [
 {"on": {"type": "comment", "repos": ["acme/api"], "phrase": "/pi"}, "run": {"kind": "github", "flow": "fix"}}]}`

func TestReceiveCheckPasses(t *testing.T) {
	r := runCLI(t, receiveVars(t, goodForgeTriggers), "receive", "--check")
	if r.code != exitOK || !strings.Contains(r.stdout, "ok: 1 forge triggers") {
		t.Fatalf("%+v", r)
	}
	if strings.Contains(r.stdout+r.stderr, "s3cret-value") || strings.Contains(r.stdout+r.stderr, "ghp_secretvalue") {
		t.Fatalf("a secret was printed: %+v", r)
	}
}

// GITHUB_AUTH_SOURCE=app boots: the key is read and parsed at --check.
func TestReceiveCheckPassesInAppMode(t *testing.T) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "app.pem")
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}), 0o600); err != nil {
		t.Fatal(err)
	}
	vars := receiveVars(t, goodForgeTriggers)
	vars["GITHUB_PAT"] = ""
	vars["GITHUB_APP_ID"], vars["GITHUB_APP_INSTALLATION_ID"], vars["GITHUB_APP_PRIVATE_KEY_PATH"] = "1", "2", path
	r := runCLI(t, vars, "receive", "--check")
	if r.code != exitOK || !strings.Contains(r.stdout, "github=app(") {
		t.Fatalf("%+v", r)
	}
}

func TestReceiveRefusesAnInvalidTriggersFile(t *testing.T) {
	r := runCLI(t, receiveVars(t, `{"triggers": [
	 {"on": {"type": "comment", "repos": ["acme/api"]}, "run": {"kind": "github", "flow": "fix"}},
	 {"on": {"type": "label", "repos": ["acme"], "any": ["x"]}, "run": {"kind": "github", "flow": "fix"}}]}`), "receive", "--check")
	if r.code != exitUsage {
		t.Fatalf("%+v", r)
	}
	for _, want := range []string{"triggers[0]: on.phrase: required", "triggers[1]: on.repos[0]: must be owner/name"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, r.stderr)
		}
	}
}

func TestReceiveRefusesBadConfiguration(t *testing.T) {
	notAKey := filepath.Join(t.TempDir(), "k.pem")
	if err := os.WriteFile(notAKey, []byte("not a key"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		set  map[string]string
		want string
	}{
		{map[string]string{"RECEIVER_PORT": "99999"}, `RECEIVER_PORT="99999": must be a port number`},
		{map[string]string{"WEBHOOK_SECRET": "", "GITHUB_PAT": ""}, "nothing to receive"},
		{map[string]string{"PI_TRIGGERS_FILE": ""}, `PI_TRIGGERS_FILE="": must be set`},
		{map[string]string{"GITHUB_AUTH_SOURCE": "app", "GITHUB_PAT": "", "GITHUB_APP_ID": "1", "GITHUB_APP_INSTALLATION_ID": "2",
			"GITHUB_APP_PRIVATE_KEY_PATH": "/nonexistent/k.pem"}, "GITHUB_APP_PRIVATE_KEY_PATH=\"/nonexistent/k.pem\": must name a readable file"},
		{map[string]string{"GITHUB_AUTH_SOURCE": "app", "GITHUB_PAT": "", "GITHUB_APP_ID": "1", "GITHUB_APP_INSTALLATION_ID": "2",
			"GITHUB_APP_PRIVATE_KEY_PATH": notAKey}, "must hold an RSA private key"},
		{map[string]string{"GITHUB_PAT": "ghp_secretvalue", "GITHUB_APP_ID": "1"}, "GITHUB_APP_INSTALLATION_ID"},
	} {
		vars := receiveVars(t, goodForgeTriggers)
		for k, v := range c.set {
			vars[k] = v
		}
		r := runCLI(t, vars, "receive", "--check")
		if r.code != exitUsage || !strings.Contains(r.stderr, c.want) {
			t.Errorf("%v: %+v", c.set, r)
		}
		if strings.Contains(r.stderr, "ghp_secretvalue") || strings.Contains(r.stderr, "s3cret-value") {
			t.Errorf("%v: a secret was printed: %s", c.set, r.stderr)
		}
	}
}

func TestServiceRenderReceiverIsTheDeployUnit(t *testing.T) {
	r := runCLI(t, nil, "service", "render", "--receiver", "--dir", "/opt/pi-dispatch")
	if r.code != exitOK || r.stderr != "" {
		t.Fatalf("%+v", r)
	}
	want, err := os.ReadFile("../../deploy/pi-dispatch-receiver.service")
	if err != nil {
		t.Fatal(err)
	}
	if r.stdout != string(want) {
		t.Fatalf("deploy/pi-dispatch-receiver.service is not what service render --receiver prints; regenerate it:\n"+
			"  go run ./cmd/pi-dispatch service render --receiver --dir /opt/pi-dispatch > deploy/pi-dispatch-receiver.service\n--- got\n%s", r.stdout)
	}
	for _, line := range []string{"ExecStart=/usr/local/bin/pi-dispatch receive", "EnvironmentFile=/opt/pi-dispatch/.env",
		"RestartPreventExitStatus=2", "ReadWritePaths=/opt/pi-dispatch", "User=pi-dispatch"} {
		if !strings.Contains(r.stdout, "\n"+line+"\n") {
			t.Errorf("unit lacks %q", line)
		}
	}
	if strings.Contains(r.stdout, "docker") {
		t.Error("the receiver needs no docker group")
	}
}
