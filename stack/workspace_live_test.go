package stack_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pidispatch/pidispatch/config"
	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/enqueue"
	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/forge/forgetest"
	"github.com/pidispatch/pidispatch/forge/token"
	"github.com/pidispatch/pidispatch/forge/workspace"
	"github.com/pidispatch/pidispatch/internal/image/jobimage"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/internal/testkit/secrettest"
	"github.com/pidispatch/pidispatch/jobs"
	"github.com/pidispatch/pidispatch/observe/transcript"
	"github.com/pidispatch/pidispatch/queue"
	"github.com/pidispatch/pidispatch/stack"
)

type forgeWorker struct {
	spy    *secrettest.Spy
	git    *forgetest.GitServer
	gh     *forgetest.GitHub
	base   string
	logs   string
	router *enqueue.Router
	db     *livetest.ValkeyDB
	// stop stops the worker and waits for it (once; the test's cleanup
	// calls it too).
	stop func()
}

const forgeRepo = "acme/web"

// startForgeWorker runs a real worker whose forge jobs are cloned from and
// published to a git server and a GitHub double.
func startForgeWorker(t *testing.T, limits workspace.Limits) *forgeWorker {
	t.Helper()
	return startForgeWorkerWith(t, limits, nil)
}

// startForgeWorkerWith is startForgeWorker with a publish policy.
func startForgeWorkerWith(t *testing.T, limits workspace.Limits, policy func(jobs.Job) workspace.PublishPolicy) *forgeWorker {
	t.Helper()
	db := livetest.Valkey(t)
	dc := livetest.Docker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	require.NoError(t, jobimage.Ensure(ctx, dc, jobimage.TestTag))

	key, err := rsa.GenerateKey(rand.Reader, 2048)
	require.NoError(t, err)
	f := &forgeWorker{logs: t.TempDir(), db: db}
	f.git = forgetest.StartGitServer(t, nil)
	f.base = f.git.CreateRepo(t, forgeRepo, "main", map[string]string{"README.md": "hello\n"})
	f.gh = forgetest.StartGitHub(t, f.git, 42, &key.PublicKey, time.Hour)
	f.gh.AddRepo(forgeRepo, "main")

	name := "forge-worker-1"
	env := map[string]string{
		"VALKEY_URL": db.URL, "PI_UNSIGNED_QUEUES": "*", "PI_WORKER_NAME": name, "PI_JOB_IMAGE": jobimage.TestTag,
		"PI_LOGS_DIR": f.logs, "PI_JOB_MEMORY": "256m", "PI_JOB_CPUS": "0.5", "PI_CONTAINER_USER": "65534:65534",
	}
	cfg, err := config.Load(func(k string) string { return env[k] })
	require.NoError(t, err)
	log := slog.New(slog.NewJSONHandler(io.Discard, nil))
	m, err := workspace.New(workspace.Config{
		Forges: map[jobs.Forge]workspace.Forge{jobs.ForgeGitHub: {
			Minter: &token.GitHubApp{AppID: 42, InstallationID: 7, Key: key, APIURL: f.gh.URL},
			API:    &workspace.GitHub{APIURL: f.gh.URL},
		}},
		StateDir: t.TempDir(), Host: name, Logger: log, Backoff: 10 * time.Millisecond, Limits: limits, Policy: policy,
	})
	require.NoError(t, err)
	f.spy = &secrettest.Spy{}
	s, err := stack.Build(context.Background(), cfg, log, dispatch.Tuning{JobsDir: t.TempDir()}, stack.WithForgeWorkspaces(m), f.spy.Option)
	require.NoError(t, err)
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Worker.Run(runCtx) }()
	f.stop = sync.OnceFunc(func() {
		stop()
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(60 * time.Second):
			t.Error("the worker did not stop")
		}
		s.Close()
	})
	t.Cleanup(f.stop)
	p, err := enqueue.NewProducer(db.Client, enqueue.ProducerConfig{UnsignedQueues: []string{fleet.EveryQueue}, Attempts: 1})
	require.NoError(t, err)
	f.router = enqueue.NewRouter(p, enqueue.RouterConfig{})
	return f
}

// run enqueues a forge delivery for issue 5 and waits for its record.
func (f *forgeWorker) run(t *testing.T, delivery, task string) jobs.Record {
	t.Helper()
	e, err := f.router.EnqueueForge(context.Background(), enqueue.ForgeDelivery{JobID: delivery, Job: jobs.Job{
		Kind: jobs.KindForge, Repo: forgeRepo, Flow: "fix", Task: task,
		ForgeEvent: jobs.ForgeEvent{Forge: jobs.ForgeGitHub, Number: 5, DeliveryID: delivery, Trigger: "fix-label"},
	}})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		recs, err := jobs.ReadRecords(f.logs, e.JobID)
		return err == nil && len(recs) == 1
	}, 90*time.Second, 200*time.Millisecond, "no record of %s", e.JobID)
	recs, _ := jobs.ReadRecords(f.logs, e.JobID)
	return recs[0]
}

// A forge delivery becomes a job on a real worker: the host clones the
// repository from a git server over smart HTTP with a token minted by a
// GitHub double, the test job (in Docker, no network) changes a file, and the
// host pushes pi/<job id> and opens a draft pull request whose URL the record
// carries. The token is nowhere the job could see or the run left: not in its
// environment (the job prints it, and the container's spec is read), not in
// any file of its mounts (.git included), the transcript, the record, nor any
// Valkey value.
func TestForgeJobPublishesPullRequest(t *testing.T) {
	f := startForgeWorker(t, workspace.Limits{})
	rec := f.run(t, "gh-delivery-1", "JOB_WRITE_FILE=README.md\nJOB_SHOW_FILE=/proc/self/environ\nJOB_PRINT_EXIT_LINE=1")
	git, gh, repo, base, logs := f.git, f.gh, forgeRepo, f.base, f.logs
	require.Equal(t, jobs.OutcomeCompleted, rec.Outcome, rec.Reason)
	pulls := gh.Pulls(repo)
	require.Len(t, pulls, 1)
	require.True(t, pulls[0].GetDraft())
	require.Equal(t, pulls[0].GetHTMLURL(), rec.PullRequestURL)
	require.Equal(t, base, rec.BaseCommit)
	require.Equal(t, git.Head(t, repo, "pi/issue-5"), rec.PushedCommit)
	require.Equal(t, base, git.Head(t, repo, "main"))
	require.Equal(t, "written by jobprog", forgetest.Git(t, git.Dir(repo), "show", rec.PushedCommit+":README.md"))
	comments := gh.Comments(repo, 5)
	require.Len(t, comments, 1, "one status comment")
	require.Contains(t, comments[0], rec.PullRequestURL)
	require.Contains(t, comments[0], "3 turns")

	entries, err := transcript.Read(logs, rec.JobID, 1)
	require.NoError(t, err)
	var all strings.Builder
	transcript.Render(&all, entries)
	require.Contains(t, all.String(), "PI_JOB_ID=", "the job printed its environment")

	tokens := gh.Tokens()
	require.NotEmpty(t, tokens)
	secrettest.Absent(t, append(secrettest.Texts(t, f.spy, logs, f.db.Client), all.String()), tokens)
}

// A refused publish is a policy record with its reason, and nothing reaches
// the forge but the comments; a repository gone before the job fails it
// before any container starts.
func TestForgeJobRefusalsAreRecorded(t *testing.T) {
	f := startForgeWorker(t, workspace.Limits{MaxBytes: 5})
	rec := f.run(t, "gh-delivery-big", "JOB_WRITE_FILE=big.txt")
	require.Equal(t, jobs.OutcomePolicy, rec.Outcome)
	require.Equal(t, jobs.ReasonTooLarge, rec.Reason)
	require.Equal(t, f.base, rec.BaseCommit)
	require.Empty(t, rec.PushedCommit)
	require.Empty(t, rec.PullRequestURL)
	require.Empty(t, f.git.Head(t, forgeRepo, "pi/issue-5"))
	require.Empty(t, f.gh.Pulls(forgeRepo))
	comments := f.gh.Comments(forgeRepo, 5)
	require.Contains(t, comments[len(comments)-1], "too-large")

	f.gh.Vanish(forgeRepo)
	rec = f.run(t, "gh-delivery-gone", "JOB_WRITE_FILE=x.txt")
	require.Equal(t, jobs.OutcomeFailed, rec.Outcome)
	require.Equal(t, jobs.ReasonRepoGone, rec.Reason)
	require.Nil(t, rec.ExitCode, "no container started")
}

// The publish object of the host's own forge trigger reaches the pull
// request: a trigger with "draft": false opens it ready for review.
func TestForgeJobFollowsItsTriggersPublishPolicy(t *testing.T) {
	path := filepath.Join(t.TempDir(), "triggers.json")
	require.NoError(t, os.WriteFile(path, []byte(`{"triggers": [
  {"on": {"type": "label", "id": "fix-label", "repos": ["`+forgeRepo+`"], "any": ["pi"]}, "run": {"kind": "github", "flow": "fix"},
   "publish": {"draft": false}}]}`), 0o600))
	policies, err := stack.LoadForgePolicies(path, "forge-worker-1", nil)
	require.NoError(t, err)
	f := startForgeWorkerWith(t, workspace.Limits{}, policies.Policy)
	rec := f.run(t, "gh-delivery-ready", "JOB_WRITE_FILE=README.md")
	require.Equal(t, jobs.OutcomeCompleted, rec.Outcome, rec.Reason)
	pulls := f.gh.Pulls(forgeRepo)
	require.Len(t, pulls, 1)
	require.False(t, pulls[0].GetDraft(), "the trigger asked for a pull request ready for review")
}

// A forge job failing all three of its attempts leaves exactly one comment
// on its issue, its status comment, edited in place, whose last text is the
// failure; every token minted for it is revoked.
func TestForgeJobThreeFailedAttemptsOneStatusComment(t *testing.T) {
	f := startForgeWorker(t, workspace.Limits{})
	p, err := enqueue.NewProducer(f.db.Client, enqueue.ProducerConfig{UnsignedQueues: []string{fleet.EveryQueue}, Attempts: 3,
		Backoff: queue.Backoff{Type: queue.BackoffFixed, Delay: 10 * time.Millisecond}})
	require.NoError(t, err)
	e, err := enqueue.NewRouter(p, enqueue.RouterConfig{}).EnqueueForge(context.Background(), enqueue.ForgeDelivery{JobID: "gh-delivery-3x", Job: jobs.Job{
		Kind: jobs.KindForge, Repo: forgeRepo, Flow: "fix", Task: "JOB_EXIT_CODE=3",
		ForgeEvent: jobs.ForgeEvent{Forge: jobs.ForgeGitHub, Number: 5, DeliveryID: "gh-delivery-3x", Trigger: "fix-label"},
	}})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		recs, err := jobs.ReadRecords(f.logs, e.JobID)
		return err == nil && len(recs) == 3
	}, 3*time.Minute, 200*time.Millisecond, "three attempts of %s", e.JobID)
	// The last status is written right after the last record.
	require.Eventually(t, func() bool {
		c := f.gh.Comments(forgeRepo, 5)
		return len(c) == 1 && strings.Contains(c[0], "failed (`exit-other`) after 3 attempt(s)")
	}, 30*time.Second, 50*time.Millisecond, "comments: %q", f.gh.Comments(forgeRepo, 5))
	f.stop()
	require.Len(t, f.gh.Comments(forgeRepo, 5), 1, "exactly one comment for three attempts")
	recs, err := jobs.ReadRecords(f.logs, e.JobID)
	require.NoError(t, err)
	for _, r := range recs {
		require.Regexp(t, `/acme/web/issues/5#issuecomment-\d+$`, r.StatusCommentURL, "each attempt's record links the one status comment")
		require.Equal(t, recs[0].StatusCommentURL, r.StatusCommentURL)
	}
	require.Positive(t, f.gh.CommentEdits(), "edited in place")
	require.ElementsMatch(t, f.gh.Tokens(), f.gh.Revoked(), "every token minted for the job is revoked")
}

// A worker stopped mid-job (SIGTERM's path: its context ends) revokes the
// job's token at once, not at its expiry.
func TestForgeJobStoppedMidRunRevokesItsToken(t *testing.T) {
	f := startForgeWorker(t, workspace.Limits{})
	_, err := f.router.EnqueueForge(context.Background(), enqueue.ForgeDelivery{JobID: "gh-delivery-stop", Job: jobs.Job{
		Kind: jobs.KindForge, Repo: forgeRepo, Flow: "fix", Task: "JOB_SLEEP=5m",
		ForgeEvent: jobs.ForgeEvent{Forge: jobs.ForgeGitHub, Number: 5, DeliveryID: "gh-delivery-stop", Trigger: "fix-label"},
	}})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		c := f.gh.Comments(forgeRepo, 5)
		return len(c) == 1 && strings.Contains(c[0], "running")
	}, 90*time.Second, 50*time.Millisecond, "the job never ran")
	require.NotEmpty(t, f.gh.Tokens())
	f.stop()
	require.NotEmpty(t, f.gh.Revoked())
	require.ElementsMatch(t, f.gh.Tokens(), f.gh.Revoked(), "the stopped job's tokens are revoked")
}

// A forge job refused before it ran (here: an image the host does not
// allow) writes its status comment before its record, so the record links
// the comment as a job that ran does.
func TestForgeJobRefusedBeforeRunRecordsItsStatusComment(t *testing.T) {
	f := startForgeWorker(t, workspace.Limits{})
	e, err := f.router.EnqueueForge(context.Background(), enqueue.ForgeDelivery{JobID: "gh-delivery-image", Job: jobs.Job{
		Kind: jobs.KindForge, Repo: forgeRepo, Flow: "fix", Task: "JOB_WRITE_FILE=README.md", Image: "pidispatch-not-allowed:1",
		ForgeEvent: jobs.ForgeEvent{Forge: jobs.ForgeGitHub, Number: 5, DeliveryID: "gh-delivery-image", Trigger: "fix-label"},
	}})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		recs, err := jobs.ReadRecords(f.logs, e.JobID)
		return err == nil && len(recs) == 1
	}, 90*time.Second, 200*time.Millisecond, "no record of %s", e.JobID)
	recs, err := jobs.ReadRecords(f.logs, e.JobID)
	require.NoError(t, err)
	require.Equal(t, jobs.OutcomePolicy, recs[0].Outcome)
	require.Equal(t, jobs.ReasonImageNotAllowed, recs[0].Reason)
	comments := f.gh.Comments(forgeRepo, 5)
	require.Len(t, comments, 1, "one status comment")
	require.Contains(t, comments[0], "refused (`image-not-allowed`)")
	require.Regexp(t, `/acme/web/issues/5#issuecomment-\d+$`, recs[0].StatusCommentURL, "the refused job's record links its status comment")
}
