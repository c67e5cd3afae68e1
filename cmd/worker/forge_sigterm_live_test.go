package main

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pidispatch/pidispatch/enqueue"
	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/forge/forgetest"
	"github.com/pidispatch/pidispatch/internal/image/jobimage"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/jobs"
)

// The worker binary, sent SIGTERM while a forge job runs, revokes the
// job's installation token before it exits: the GitHub double shows every
// token it minted revoked, none left valid for the rest of its hour.
func TestSIGTERMMidForgeJobRevokesItsToken(t *testing.T) {
	ensureImage(t)
	bin := workerBinary(t)
	db := livetest.Valkey(t)
	name := uniqueName("forge-sigterm", db)
	const repo = "acme/web"
	git := forgetest.StartGitServer(t, nil)
	git.CreateRepo(t, repo, "main", map[string]string{"README.md": "hello\n"})
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	gh := forgetest.StartGitHub(t, git, 42, &key.PublicKey, time.Hour)
	gh.AddRepo(repo, "main")
	dir := t.TempDir()
	keyPath := filepath.Join(dir, "app.pem")
	if err := os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}), 0o600); err != nil {
		t.Fatal(err)
	}
	triggers := filepath.Join(dir, "triggers.json")
	if err := os.WriteFile(triggers, []byte(`{"triggers": [
  {"on": {"type": "label", "id": "fix-label", "repos": ["acme/web"], "any": ["pi:fix"]}, "run": {"kind": "github", "flow": "fix"}}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	logs := filepath.Join(dir, "logs")
	p := startProcess(t, bin, processEnv(map[string]string{
		"VALKEY_URL": db.URL, "PI_UNSIGNED_QUEUES": "*", "PI_WORKER_NAME": name, "PI_JOB_IMAGE": jobimage.TestTag, "PI_LOGS_DIR": logs,
		"PI_JOB_MEMORY": "256m", "PI_JOB_CPUS": "0.5", "PI_CONTAINER_USER": "65534:65534", "PI_TRIGGERS_FILE": triggers,
		"GITHUB_API_URL": gh.URL, "GITHUB_APP_ID": "42", "GITHUB_APP_INSTALLATION_ID": "7", "GITHUB_APP_PRIVATE_KEY_PATH": keyPath,
	}))
	p.waitEvent(t, "worker_started", 60*time.Second)

	producer, err := enqueue.NewProducer(db.Client, enqueue.ProducerConfig{UnsignedQueues: []string{fleet.EveryQueue}, Attempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := enqueue.NewRouter(producer, enqueue.RouterConfig{}).EnqueueForge(context.Background(), enqueue.ForgeDelivery{
		JobID: "gh-sigterm-" + name, Job: jobs.Job{Kind: jobs.KindForge, Repo: repo, Flow: "fix", Task: "JOB_SLEEP=5m",
			ForgeEvent: jobs.ForgeEvent{Forge: jobs.ForgeGitHub, Number: 5, Trigger: "fix-label", Label: "pi:fix"}},
	}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		c := gh.Comments(repo, 5)
		if len(c) == 1 && strings.Contains(c[0], "running") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the job never ran; comments %q; worker log:\n%s", c, p.stderr.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	minted := gh.Tokens()
	if len(minted) == 0 {
		t.Fatal("no token minted for the running job")
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	p.exit(t, 2*time.Minute)
	revoked := map[string]bool{}
	for _, tok := range gh.Revoked() {
		revoked[tok] = true
	}
	for _, tok := range gh.Tokens() {
		if !revoked[tok] {
			t.Errorf("a token minted for the job is still valid after SIGTERM (%d minted, %d revoked); worker log:\n%s",
				len(gh.Tokens()), len(gh.Revoked()), p.stderr.String())
			break
		}
	}
}
