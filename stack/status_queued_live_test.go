package stack_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pidispatch/pidispatch/config"
	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/forge/forgetest"
	"github.com/pidispatch/pidispatch/forge/inbox"
	"github.com/pidispatch/pidispatch/forge/token"
	"github.com/pidispatch/pidispatch/forge/workspace"
	"github.com/pidispatch/pidispatch/internal/image/jobimage"
	fixtures "github.com/pidispatch/pidispatch/internal/testkit/forgefixtures"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/internal/testkit/stacktest"
	"github.com/pidispatch/pidispatch/jobs"
	"github.com/pidispatch/pidispatch/queue"
	"github.com/pidispatch/pidispatch/stack"
)

// The receiver writes a job's status comment when it accepts the job: a
// real receiver (GitHub App mode, against the GitHub double) takes a signed
// comment, and before any worker runs the issue shows exactly one comment,
// saying queued. A real worker then runs the job in Docker: still exactly
// one comment, edited to the outcome, and the record links it.
func TestReceiverQueuedStatusCommentIsTheJobsOne(t *testing.T) {
	db := livetest.Valkey(t)
	dc := livetest.Docker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	require.NoError(t, jobimage.Ensure(ctx, dc, jobimage.TestTag))

	const repo = "Codertocat/Hello-World"
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	require.NoError(t, err)
	dir := t.TempDir()
	keyPath := filepath.Join(dir, "app.pem")
	require.NoError(t, os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}), 0o600))
	git := forgetest.StartGitServer(t, nil)
	git.CreateRepo(t, repo, "main", map[string]string{"README.md": "hello\n"})
	gh := forgetest.StartGitHub(t, git, 4242, &key.PublicKey, time.Hour)
	gh.AddRepo(repo, "main")
	gh.SetPermission(repo, "Codertocat", "write")
	triggers := filepath.Join(dir, "triggers.json")
	require.NoError(t, os.WriteFile(triggers, []byte(`{"triggers": [{"on": {"type": "comment", "id": "c", "repos": ["`+repo+`"], "phrase": "totally right"},
	  "run": {"kind": "github", "flow": "fix", "task": "JOB_WRITE_FILE=README.md"}}]}`), 0o600))

	// The receiver, alone: no worker yet.
	port := freePort(t)
	env := map[string]string{
		"PI_ENV_FILE": "/dev/null", "VALKEY_URL": db.URL, "PI_UNSIGNED_QUEUES": "*", "PI_TRIGGERS_FILE": triggers,
		"WEBHOOK_SECRET": "app-secret", "GITHUB_APP_ID": "4242", "GITHUB_APP_INSTALLATION_ID": "7",
		"GITHUB_APP_PRIVATE_KEY_PATH": keyPath, "GITHUB_API_URL": gh.URL,
		"RECEIVER_BIND": "127.0.0.1", "RECEIVER_PORT": strconv.Itoa(port), "RECEIVER_SPOOL_DIR": filepath.Join(dir, "spool"),
	}
	in, err := buildIntake(t, env)
	require.NoError(t, err)
	inCtx, stopIntake := context.WithCancel(context.Background())
	inDone := make(chan error, 1)
	go func() { inDone <- in.Run(inCtx) }()
	t.Cleanup(func() {
		stopIntake()
		<-inDone
		in.Close()
	})
	body := fixtures.GitHub(t, "issue_comment", "created", 0)
	var payload struct {
		Repository struct {
			ID int64 `json:"id"`
		} `json:"repository"`
		Comment struct {
			ID   int64  `json:"id"`
			Body string `json:"body"`
		} `json:"comment"`
	}
	require.NoError(t, json.Unmarshal(body, &payload))
	// The repository and the comment the delivery names.
	gh.SetRepoID(repo, payload.Repository.ID)
	gh.AddDeliveredComment(repo, 1, payload.Comment.ID, "Codertocat", payload.Comment.Body)
	require.Equal(t, http.StatusAccepted, fixtures.PostGitHub(t, "http://"+in.Addr().String()+"/github", "issue_comment", "d-1", "app-secret", body))
	jobID := "gh-" + inbox.Delivery{Forge: jobs.ForgeGitHub, Body: body}.Key()
	q, err := queue.New(db.Client, "pi-jobs", queue.Config{})
	require.NoError(t, err)
	require.Eventually(t, func() bool { _, err := q.Get(context.Background(), jobID); return err == nil }, 30*time.Second, 20*time.Millisecond)
	comments := gh.Comments(repo, 1)
	require.Len(t, comments, 1, "before any worker: one status comment")
	require.Contains(t, comments[0], "queued, waiting for a worker.")
	require.Contains(t, comments[0], "<!-- pidispatch:status job="+jobID+" -->")

	// A worker with the same App takes the job.
	logs, name := t.TempDir(), "forge-worker-1"
	wenv := map[string]string{
		"VALKEY_URL": db.URL, "PI_UNSIGNED_QUEUES": "*", "PI_WORKER_NAME": name, "PI_JOB_IMAGE": jobimage.TestTag,
		"PI_LOGS_DIR": logs, "PI_JOB_MEMORY": "256m", "PI_JOB_CPUS": "0.5", "PI_CONTAINER_USER": "65534:65534",
	}
	cfg, err := config.Load(func(k string) string { return wenv[k] })
	require.NoError(t, err)
	log := slog.New(slog.NewJSONHandler(io.Discard, nil))
	m, err := workspace.New(workspace.Config{
		Forges: map[jobs.Forge]workspace.Forge{jobs.ForgeGitHub: {
			Minter: &token.GitHubApp{AppID: 4242, InstallationID: 7, Key: key, APIURL: gh.URL},
			API:    &workspace.GitHub{APIURL: gh.URL},
		}},
		StateDir: t.TempDir(), Host: name, Logger: log, Backoff: 10 * time.Millisecond,
	})
	require.NoError(t, err)
	s, err := stack.Build(context.Background(), cfg, log, dispatch.Tuning{JobsDir: t.TempDir()}, stack.WithForgeWorkspaces(m))
	require.NoError(t, err)
	stacktest.Run(t, s)
	require.Eventually(t, func() bool {
		recs, err := jobs.ReadRecords(logs, jobID)
		return err == nil && len(recs) == 1
	}, 90*time.Second, 200*time.Millisecond, "no record of %s", jobID)
	recs, err := jobs.ReadRecords(logs, jobID)
	require.NoError(t, err)
	require.Equal(t, jobs.OutcomeCompleted, recs[0].Outcome, recs[0].Reason)
	require.Eventually(t, func() bool {
		c := gh.Comments(repo, 1)
		return len(c) == 1 && strings.Contains(c[0], "done. Pull request: ")
	}, 30*time.Second, 50*time.Millisecond, "comments: %q", gh.Comments(repo, 1))
	require.Len(t, gh.Comments(repo, 1), 1, "after the worker: still one comment")
	require.Regexp(t, `/issues/1#issuecomment-\d+$`, recs[0].StatusCommentURL)
	require.Positive(t, gh.CommentEdits(), "edited in place")
}
