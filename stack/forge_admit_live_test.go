package stack_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pidispatch/pidispatch/config"
	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/enqueue"
	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/forge/forgetest"
	"github.com/pidispatch/pidispatch/internal/image/jobimage"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/jobs"
	"github.com/pidispatch/pidispatch/stack"
)

// Written as a raw Valkey writer (no fleet key): forge jobs on a worker
// wired from its environment and its own triggers file. One on a
// repository no trigger names, one naming a trigger that does not exist,
// one with another flow than its trigger's: each is refused
// forge-not-agreed before a token is minted, with no clone, push or
// comment. The job its trigger covers runs.
func TestRawWriterForgeJobMintsNoToken(t *testing.T) {
	db := livetest.Valkey(t)
	dc := livetest.Docker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	require.NoError(t, jobimage.Ensure(ctx, dc, jobimage.TestTag))

	key, err := rsa.GenerateKey(rand.Reader, 2048)
	require.NoError(t, err)
	keyPath := filepath.Join(t.TempDir(), "app.pem")
	require.NoError(t, os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}), 0o600))
	git := forgetest.StartGitServer(t, nil)
	git.CreateRepo(t, "acme/web", "main", map[string]string{"README.md": "hello\n"})
	git.CreateRepo(t, "acme/secrets", "main", map[string]string{"README.md": "keep out\n"})
	gh := forgetest.StartGitHub(t, git, 42, &key.PublicKey, time.Hour)
	gh.AddRepo("acme/web", "main")
	gh.AddRepo("acme/secrets", "main")

	triggers := filepath.Join(t.TempDir(), "triggers.json")
	require.NoError(t, os.WriteFile(triggers, []byte(`{"triggers": [
  {"on": {"type": "label", "id": "fix-label", "repos": ["acme/web"], "any": ["pi:fix"]}, "run": {"kind": "github", "flow": "fix"}}
]}`), 0o600))
	name := "admit-worker-1"
	logs := t.TempDir()
	env := map[string]string{
		"VALKEY_URL": db.URL, "PI_UNSIGNED_QUEUES": "*", "PI_WORKER_NAME": name, "PI_JOB_IMAGE": jobimage.TestTag, "PI_LOGS_DIR": logs,
		"PI_JOB_MEMORY": "256m", "PI_JOB_CPUS": "0.5", "PI_CONTAINER_USER": "65534:65534", "PI_TRIGGERS_FILE": triggers,
		"GITHUB_API_URL": gh.URL, "GITHUB_APP_ID": "42", "GITHUB_APP_INSTALLATION_ID": "7", "GITHUB_APP_PRIVATE_KEY_PATH": keyPath,
	}
	getenv := func(k string) string { return env[k] }
	cfg, err := config.Load(getenv)
	require.NoError(t, err)
	log := slog.New(slog.NewJSONHandler(io.Discard, nil))
	policies, err := stack.LoadForgePolicies(triggers, name, log)
	require.NoError(t, err)
	m, err := stack.ForgeWorkspacesFromEnv(getenv, name, log, policies)
	require.NoError(t, err)
	s, err := stack.Build(context.Background(), cfg, log, dispatch.Tuning{JobsDir: t.TempDir()}, stack.WithForgeWorkspaces(m))
	require.NoError(t, err)
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Worker.Run(runCtx) }()
	t.Cleanup(func() {
		stop()
		<-done
		s.Close()
	})
	p, err := enqueue.NewProducer(db.Client, enqueue.ProducerConfig{UnsignedQueues: []string{fleet.EveryQueue}, Attempts: 1})
	require.NoError(t, err)
	router := enqueue.NewRouter(p, enqueue.RouterConfig{})
	run := func(id string, job jobs.Job) jobs.Record {
		t.Helper()
		e, err := router.EnqueueForge(context.Background(), enqueue.ForgeDelivery{JobID: id, Job: job})
		require.NoError(t, err)
		var recs []jobs.Record
		require.Eventually(t, func() bool {
			recs, err = jobs.ReadRecords(logs, e.JobID)
			return err == nil && len(recs) == 1
		}, 90*time.Second, 100*time.Millisecond, "no record of %s", e.JobID)
		return recs[0]
	}
	job := func(repo, trigger, flow string) jobs.Job {
		return jobs.Job{Kind: jobs.KindForge, Repo: repo, Flow: flow, Task: "JOB_WRITE_FILE=pwned.txt",
			ForgeEvent: jobs.ForgeEvent{Forge: jobs.ForgeGitHub, Number: 5, Trigger: trigger, Label: "pi:fix"}}
	}
	for id, j := range map[string]jobs.Job{
		"raw-other-repo":   job("acme/secrets", "fix-label", "fix"),
		"raw-no-trigger":   job("acme/web", "made-up", "fix"),
		"raw-another-flow": job("acme/web", "fix-label", "review"),
	} {
		rec := run(id, j)
		require.Equal(t, jobs.OutcomePolicy, rec.Outcome, id)
		require.Equal(t, jobs.ReasonForgeNotAgreed, rec.Reason, id)
		require.Nil(t, rec.ExitCode, "%s: no container started", id)
	}
	require.Empty(t, gh.Tokens(), "no token was minted for any of them")
	require.Empty(t, gh.Comments("acme/secrets", 5))
	require.Empty(t, gh.Comments("acme/web", 5))
	require.Empty(t, git.Head(t, "acme/secrets", "pi/issue-5"))

	rec := run("covered", job("acme/web", "fix-label", "fix"))
	require.Equal(t, jobs.OutcomeCompleted, rec.Outcome, rec.Reason)
	require.NotEmpty(t, rec.PullRequestURL)
}
