package workspace_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pidispatch/pidispatch/forge/forgetest"
	"github.com/pidispatch/pidispatch/forge/token"
	"github.com/pidispatch/pidispatch/forge/workspace"
	"github.com/pidispatch/pidispatch/jobs"
)

const repo = "acme/web"

var (
	keyOnce sync.Once
	appKey  *rsa.PrivateKey
)

func key(t *testing.T) *rsa.PrivateKey {
	keyOnce.Do(func() {
		k, err := rsa.GenerateKey(rand.Reader, 2048)
		require.NoError(t, err)
		appKey = k
	})
	return appKey
}

type bundle struct {
	git  *forgetest.GitServer
	gh   *forgetest.GitHub
	m    *workspace.Manager
	dir  string
	base string
	job  workspace.Job
	// state is the Manager's StateDir, where the host-only copies live.
	state string
}

func setup(t *testing.T, policy workspace.PublishPolicy, limits workspace.Limits) *bundle {
	t.Helper()
	return setupWith(t, policy, limits, nil)
}

// setupWith is setup with the Manager's configuration changed by edit first.
func setupWith(t *testing.T, policy workspace.PublishPolicy, limits workspace.Limits, edit func(*workspace.Config)) *bundle {
	t.Helper()
	b := &bundle{dir: t.TempDir(), state: t.TempDir()}
	b.git = forgetest.StartGitServer(t, nil)
	b.base = b.git.CreateRepo(t, repo, "main", map[string]string{"README.md": "hello\n", "src/app.go": "package app\n"})
	b.gh = forgetest.StartGitHub(t, b.git, 42, &key(t).PublicKey, time.Hour)
	b.gh.AddRepo(repo, "main")
	cfg := workspace.Config{
		Forges: map[jobs.Forge]workspace.Forge{jobs.ForgeGitHub: {
			Minter: &token.GitHubApp{AppID: 42, InstallationID: 7, Key: key(t), APIURL: b.gh.URL},
			API:    &workspace.GitHub{APIURL: b.gh.URL},
		}},
		Policy:   func(jobs.Job) workspace.PublishPolicy { return policy },
		Limits:   limits,
		StateDir: b.state,
		Host:     "h1",
		Backoff:  time.Millisecond,
	}
	if edit != nil {
		edit(&cfg)
	}
	m, err := workspace.New(cfg)
	require.NoError(t, err)
	b.m = m
	b.job = workspace.Job{ID: "job-1", Job: jobs.Job{Kind: jobs.KindForge, Repo: repo, Flow: "fix", Task: "t",
		ForgeEvent: jobs.ForgeEvent{Forge: jobs.ForgeGitHub, Number: 5, Trigger: "fix-label"}}}
	return b
}

func (b *bundle) prepare(t *testing.T) *workspace.Checkout {
	t.Helper()
	c, err := b.m.Prepare(context.Background(), b.job, b.dir)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	if os.Geteuid() == 0 {
		// The job runs as another user: the workspace is handed to it.
		require.NoError(t, filepath.WalkDir(b.dir, func(p string, _ os.DirEntry, err error) error {
			if err != nil {
				return err
			}
			return os.Lchown(p, 65534, 65534)
		}))
	}
	require.Equal(t, b.base, c.Base())
	return c
}

func (b *bundle) write(t *testing.T, name, body string) {
	t.Helper()
	p := filepath.Join(b.dir, filepath.FromSlash(name))
	require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
	require.NoError(t, os.WriteFile(p, []byte(body), 0o644))
}

var completed = workspace.Result{Outcome: jobs.OutcomeCompleted, Reason: jobs.ReasonCompleted, Turns: 3, Dollars: 0.25}

// requireRefused checks a refusal with reason, and that nothing reached the forge.
func requireRefused(t *testing.T, b *bundle, err error, reason jobs.Reason) {
	t.Helper()
	var refusal *workspace.RefusalError
	require.ErrorAs(t, err, &refusal)
	require.Equal(t, reason, refusal.Reason)
	require.Empty(t, b.git.Head(t, repo, "pi/issue-5"), "no branch pushed")
	require.Empty(t, b.gh.Pulls(repo), "no pull request")
	require.Equal(t, b.base, b.git.Head(t, repo, "main"))
	require.Empty(t, b.gh.Comments(repo, 5), "no comment: the status comment is the worker's to write")
}

// requireNoToken checks no minted token is anywhere in dir.
func requireNoToken(t *testing.T, b *bundle, dir string) {
	t.Helper()
	tokens := b.gh.Tokens()
	require.NotEmpty(t, tokens)
	require.NoError(t, filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Type()&os.ModeSymlink != 0 {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for _, tok := range tokens {
			require.NotContains(t, string(data), tok, p)
		}
		require.NotContains(t, string(data), "extraHeader", p)
		require.NotContains(t, string(data), "Authorization", p)
		return nil
	}))
}

func TestPublish(t *testing.T) {
	t.Parallel()

	t.Run("ChangesBecomeDraftPullRequest", func(t *testing.T) {
		t.Parallel()
		b := setup(t, workspace.PublishPolicy{}, workspace.Limits{})
		c := b.prepare(t)
		requireNoToken(t, b, b.dir)
		data, err := os.ReadFile(filepath.Join(b.dir, "README.md"))
		require.NoError(t, err)
		require.Equal(t, "hello\n", string(data))
		remote := forgetest.Git(t, b.dir, "remote", "get-url", "origin")
		require.Equal(t, b.gh.CloneURL(repo), remote, "origin is the public URL")
		// The job: one commit, one uncommitted change.
		b.write(t, "src/app.go", "package app\n\nfunc Fixed() {}\n")
		forgetest.Git(t, b.dir, "commit", "-qam", "fix")
		b.write(t, "NOTES.md", "notes\n")

		pub, err := c.Publish(context.Background(), completed)
		require.NoError(t, err)
		require.Equal(t, b.base, pub.BaseCommit)
		require.Equal(t, "pi/issue-5", pub.Branch)
		require.Equal(t, pub.PushedCommit, b.git.Head(t, repo, "pi/issue-5"))
		require.Equal(t, b.base, b.git.Head(t, repo, "main"), "the default branch is untouched")
		// One host commit on the base, holding both changes.
		parent := forgetest.Git(t, b.git.Dir(repo), "rev-parse", pub.PushedCommit+"^")
		require.Equal(t, b.base, parent)
		require.Contains(t, forgetest.Git(t, b.git.Dir(repo), "show", pub.PushedCommit+":src/app.go"), "Fixed")
		require.Equal(t, "notes", forgetest.Git(t, b.git.Dir(repo), "show", pub.PushedCommit+":NOTES.md"))
		require.Contains(t, forgetest.Git(t, b.git.Dir(repo), "log", "-1", "--format=%an %ae", pub.PushedCommit), "pidispatch@h1")

		pulls := b.gh.Pulls(repo)
		require.Len(t, pulls, 1)
		require.True(t, pulls[0].GetDraft())
		require.Equal(t, "main", pulls[0].GetBase().GetRef())
		require.Contains(t, pulls[0].GetBody(), "Refs #5")
		require.Equal(t, pulls[0].GetHTMLURL(), pub.PullRequestURL)

		require.Empty(t, b.gh.Comments(repo, 5), "the outcome is the status comment's to say (Manager.Status)")

		mints := b.gh.Mints()
		require.NotEmpty(t, mints)
		require.Equal(t, []string{"web"}, mints[0].Repositories, "restricted to the one repository")
		require.Equal(t, "write", mints[0].Permissions.GetContents())
		require.Equal(t, "write", mints[0].Permissions.GetPullRequests())
		require.Nil(t, mints[0].Permissions.Administration, "no more than publishing needs")
		requireNoToken(t, b, b.dir)
		require.ElementsMatch(t, b.gh.Tokens(), b.gh.Revoked(), "every token of the job is revoked once it is done")
	})

	t.Run("CommitOnDefaultBranchIsPublishedOnItsOwnBranch", func(t *testing.T) {
		t.Parallel()
		b := setup(t, workspace.PublishPolicy{}, workspace.Limits{})
		c := b.prepare(t)
		require.Equal(t, "main", forgetest.Git(t, b.dir, "branch", "--show-current"))
		b.write(t, "README.md", "changed\n")
		forgetest.Git(t, b.dir, "commit", "-qam", "on main")
		pub, err := c.Publish(context.Background(), completed)
		require.NoError(t, err)
		require.Equal(t, b.base, b.git.Head(t, repo, "main"), "never pushed to the default branch")
		require.Equal(t, pub.PushedCommit, b.git.Head(t, repo, "pi/issue-5"))
	})

	t.Run("HistoryRewriteRefused", func(t *testing.T) {
		t.Parallel()
		b := setup(t, workspace.PublishPolicy{}, workspace.Limits{})
		c := b.prepare(t)
		forgetest.Git(t, b.dir, "checkout", "-q", "--orphan", "rewritten")
		b.write(t, "README.md", "rewritten\n")
		forgetest.Git(t, b.dir, "add", "-A")
		forgetest.Git(t, b.dir, "commit", "-qm", "new root")
		_, err := c.Publish(context.Background(), completed)
		requireRefused(t, b, err, jobs.ReasonHistoryRewritten)
	})

	t.Run("AmendedBaseRefused", func(t *testing.T) {
		t.Parallel()
		b := setup(t, workspace.PublishPolicy{}, workspace.Limits{})
		c := b.prepare(t)
		b.write(t, "README.md", "amended\n")
		forgetest.Git(t, b.dir, "commit", "-q", "--amend", "-am", "amended")
		_, err := c.Publish(context.Background(), completed)
		requireRefused(t, b, err, jobs.ReasonHistoryRewritten)
	})

	t.Run("GitDirRemovedRefused", func(t *testing.T) {
		t.Parallel()
		b := setup(t, workspace.PublishPolicy{}, workspace.Limits{})
		c := b.prepare(t)
		require.NoError(t, os.RemoveAll(filepath.Join(b.dir, ".git")))
		_, err := c.Publish(context.Background(), completed)
		requireRefused(t, b, err, jobs.ReasonHistoryRewritten)
	})

	t.Run("WorkflowFileRefused", func(t *testing.T) {
		t.Parallel()
		for _, p := range []string{".github/workflows/x.yml", ".gitlab-ci.yml", ".forgejo/workflows/a.yaml", ".GitHub/Workflows/y.yml"} {
			b := setup(t, workspace.PublishPolicy{}, workspace.Limits{})
			c := b.prepare(t)
			b.write(t, p, "on: push\n")
			_, err := c.Publish(context.Background(), completed)
			requireRefused(t, b, err, jobs.ReasonCIChange)
		}
	})

	t.Run("WorkflowFileAllowedByTrigger", func(t *testing.T) {
		t.Parallel()
		b := setup(t, workspace.PublishPolicy{AllowCI: true, Ready: true}, workspace.Limits{})
		c := b.prepare(t)
		b.write(t, ".github/workflows/ci.yml", "on: push\n")
		pub, err := c.Publish(context.Background(), completed)
		require.NoError(t, err)
		require.NotEmpty(t, pub.PullRequestURL)
		require.False(t, b.gh.Pulls(repo)[0].GetDraft(), "the trigger asked for a ready pull request")
	})

	t.Run("TooManyFilesRefused", func(t *testing.T) {
		t.Parallel()
		b := setup(t, workspace.PublishPolicy{}, workspace.Limits{MaxFiles: 3})
		c := b.prepare(t)
		for i := range 4 {
			b.write(t, "f"+string(rune('a'+i)), "x\n")
		}
		_, err := c.Publish(context.Background(), completed)
		requireRefused(t, b, err, jobs.ReasonTooManyFiles)
	})

	t.Run("TooLargeRefused", func(t *testing.T) {
		t.Parallel()
		b := setup(t, workspace.PublishPolicy{}, workspace.Limits{MaxBytes: 1000})
		c := b.prepare(t)
		b.write(t, "big.bin", strings.Repeat("x", 1001))
		_, err := c.Publish(context.Background(), completed)
		requireRefused(t, b, err, jobs.ReasonTooLarge)
	})

	t.Run("EscapingSymlinkRefused", func(t *testing.T) {
		t.Parallel()
		b := setup(t, workspace.PublishPolicy{}, workspace.Limits{})
		c := b.prepare(t)
		require.NoError(t, os.Symlink("../../etc/passwd", filepath.Join(b.dir, "src", "passwd")))
		_, err := c.Publish(context.Background(), completed)
		requireRefused(t, b, err, jobs.ReasonUnsafePath)
	})

	// Each link of a chain stays inside, lexically, but the chain leads out
	// (or into .git): resolved whole, it is refused.
	for name, links := range map[string][][2]string{
		// Lexically sub/etc/passwd; sub/up is the root, so ../etc/passwd.
		"ChainOutOfTheRepository": {{"sub/up", ".."}, {"x", "sub/up/../etc/passwd"}},
		// Lexically sub/.git/config; resolved, the repository's own.
		"ChainIntoDotGit":   {{"sub/up", ".."}, {"y", "sub/up/.git/config"}},
		"ChainOfThreeLinks": {{"a/b/c", "../.."}, {"p", "a/b/c"}, {"q", "p/../../home"}},
		"EndlessChain":      {{"l1", "l2"}, {"l2", "l1"}},
	} {
		t.Run("SymlinkChain"+name+"Refused", func(t *testing.T) {
			t.Parallel()
			b := setup(t, workspace.PublishPolicy{}, workspace.Limits{})
			c := b.prepare(t)
			for _, l := range links {
				p := filepath.Join(b.dir, filepath.FromSlash(l[0]))
				require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
				require.NoError(t, os.Symlink(l[1], p))
			}
			_, err := c.Publish(context.Background(), completed)
			requireRefused(t, b, err, jobs.ReasonUnsafePath)
		})
	}

	t.Run("InnerSymlinkChainPublished", func(t *testing.T) {
		t.Parallel()
		b := setup(t, workspace.PublishPolicy{}, workspace.Limits{})
		c := b.prepare(t)
		require.NoError(t, os.Symlink("src", filepath.Join(b.dir, "code")))
		require.NoError(t, os.Symlink("../code/app.go", filepath.Join(b.dir, "src", "main.go")))
		_, err := c.Publish(context.Background(), completed)
		require.NoError(t, err)
	})

	t.Run("InnerSymlinkPublished", func(t *testing.T) {
		t.Parallel()
		b := setup(t, workspace.PublishPolicy{}, workspace.Limits{})
		c := b.prepare(t)
		require.NoError(t, os.Symlink("../README.md", filepath.Join(b.dir, "src", "readme")))
		_, err := c.Publish(context.Background(), completed)
		require.NoError(t, err)
	})

	t.Run("SubmoduleRefused", func(t *testing.T) {
		t.Parallel()
		b := setup(t, workspace.PublishPolicy{}, workspace.Limits{})
		c := b.prepare(t)
		inner := filepath.Join(b.dir, "vendor", "evil")
		require.NoError(t, os.MkdirAll(inner, 0o755))
		forgetest.Git(t, inner, "init", "-q", ".")
		b.write(t, "vendor/evil/x", "x\n")
		forgetest.Git(t, inner, "add", "-A")
		forgetest.Git(t, inner, "commit", "-qm", "inner")
		_, err := c.Publish(context.Background(), completed)
		requireRefused(t, b, err, jobs.ReasonUnsafePath)
	})

	t.Run("ProtectedBranchRefused", func(t *testing.T) {
		t.Parallel()
		b := setup(t, workspace.PublishPolicy{}, workspace.Limits{})
		b.gh.Protect(repo, "pi/issue-5")
		c := b.prepare(t)
		b.write(t, "README.md", "x\n")
		_, err := c.Publish(context.Background(), completed)
		requireRefused(t, b, err, jobs.ReasonProtectedBranch)
	})

	t.Run("NothingChanged", func(t *testing.T) {
		t.Parallel()
		b := setup(t, workspace.PublishPolicy{}, workspace.Limits{})
		c := b.prepare(t)
		pub, err := c.Publish(context.Background(), completed)
		require.NoError(t, err)
		require.Empty(t, pub.PullRequestURL)
		require.Empty(t, b.gh.Pulls(repo))
		require.Empty(t, b.gh.Comments(repo, 5))
	})

	t.Run("FailurePublishesNothing", func(t *testing.T) {
		t.Parallel()
		b := setup(t, workspace.PublishPolicy{}, workspace.Limits{})
		c := b.prepare(t)
		b.write(t, "README.md", "x\n")
		pub, err := c.Publish(context.Background(), workspace.Result{Outcome: jobs.OutcomePolicy, Reason: jobs.ReasonCostCap, Dollars: 2})
		require.NoError(t, err)
		require.Empty(t, pub.PushedCommit, "a job that did not complete publishes nothing")
		require.Empty(t, b.git.Head(t, repo, "pi/issue-5"))
		require.Empty(t, b.gh.Comments(repo, 5), "nor writes a comment: the status comment says it")
		require.ElementsMatch(t, b.gh.Tokens(), b.gh.Revoked())
	})

	t.Run("TokenExpiredMidJob", func(t *testing.T) {
		t.Parallel()
		b := setup(t, workspace.PublishPolicy{}, workspace.Limits{})
		c := b.prepare(t)
		b.write(t, "README.md", "x\n")
		b.gh.ExpireTokens() // the forge says so before the token's own expiry
		pub, err := c.Publish(context.Background(), completed)
		require.NoError(t, err)
		require.NotEmpty(t, pub.PullRequestURL)
		require.GreaterOrEqual(t, len(b.gh.Mints()), 2, "a new token was minted")
	})

	t.Run("TokenExpiredByClock", func(t *testing.T) {
		t.Parallel()
		b := setup(t, workspace.PublishPolicy{}, workspace.Limits{})
		var mu sync.Mutex
		now := time.Now()
		clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
		b.gh.SetClock(clock)
		m, err := workspace.New(workspace.Config{
			Forges: map[jobs.Forge]workspace.Forge{jobs.ForgeGitHub: {
				Minter: &token.GitHubApp{AppID: 42, InstallationID: 7, Key: key(t), APIURL: b.gh.URL, Now: clock},
				API:    &workspace.GitHub{APIURL: b.gh.URL},
			}},
			StateDir: t.TempDir(), Host: "h1", Backoff: time.Millisecond, Now: clock,
		})
		require.NoError(t, err)
		b.m = m
		c := b.prepare(t)
		b.write(t, "README.md", "x\n")
		mu.Lock()
		now = now.Add(2 * time.Hour) // a long job: the token's hour is over
		mu.Unlock()
		pub, err := c.Publish(context.Background(), completed)
		require.NoError(t, err)
		require.NotEmpty(t, pub.PullRequestURL)
		require.Len(t, b.gh.Mints(), 2, "minted again before use, not after a refusal")
	})

	t.Run("RepositoryVanished", func(t *testing.T) {
		t.Parallel()
		b := setup(t, workspace.PublishPolicy{}, workspace.Limits{})
		c := b.prepare(t)
		b.write(t, "README.md", "x\n")
		b.gh.Vanish(repo)
		require.NoError(t, os.RemoveAll(b.git.Dir(repo)))
		_, err := c.Publish(context.Background(), completed)
		require.ErrorIs(t, err, token.ErrNoRepository)
		require.Empty(t, b.gh.Pulls(repo))
	})

	t.Run("VanishedBeforePrepare", func(t *testing.T) {
		t.Parallel()
		b := setup(t, workspace.PublishPolicy{}, workspace.Limits{})
		b.gh.Vanish(repo)
		_, err := b.m.Prepare(context.Background(), b.job, b.dir)
		require.ErrorIs(t, err, token.ErrNoRepository)
	})

	t.Run("ServerErrorAfterCreateNoDoublePullRequest", func(t *testing.T) {
		t.Parallel()
		b := setup(t, workspace.PublishPolicy{}, workspace.Limits{})
		c := b.prepare(t)
		b.write(t, "README.md", "x\n")
		b.gh.Fail("POST", "/repos/acme/web/pulls", 500, 1, true) // created, then 500
		b.gh.Fail("GET", "/repos/acme/web/pulls", 429, 1, false)
		pub, err := c.Publish(context.Background(), completed)
		require.NoError(t, err)
		require.Len(t, b.gh.Pulls(repo), 1)
		require.Equal(t, b.gh.Pulls(repo)[0].GetHTMLURL(), pub.PullRequestURL)
		require.Equal(t, 1, b.gh.Calls("POST /repos/acme/web/pulls"))
	})

	t.Run("RetriedJobReusesPullRequest", func(t *testing.T) {
		t.Parallel()
		b := setup(t, workspace.PublishPolicy{}, workspace.Limits{})
		for range 2 {
			dir := t.TempDir()
			c, err := b.m.Prepare(context.Background(), b.job, dir)
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(filepath.Join(dir, "README.md"), []byte("x\n"), 0o644))
			_, err = c.Publish(context.Background(), completed)
			require.NoError(t, err)
			require.NoError(t, c.Close())
		}
		require.Len(t, b.gh.Pulls(repo), 1)
	})

	t.Run("PullRequestHead", func(t *testing.T) {
		t.Parallel()
		b := setup(t, workspace.PublishPolicy{}, workspace.Limits{})
		head := b.git.Commit(t, repo, "main", "feature", map[string]string{"feature.txt": "wip\n"})
		n := b.gh.OpenPull(t, repo, "feature", "main")
		b.job.Job.Number, b.job.Job.PullRequest = n, true
		b.base = head
		c := b.prepare(t)
		require.Equal(t, "feature", forgetest.Git(t, b.dir, "branch", "--show-current"))
		data, err := os.ReadFile(filepath.Join(b.dir, "feature.txt"))
		require.NoError(t, err)
		require.Equal(t, "wip\n", string(data))
		b.write(t, "feature.txt", "done\n")
		pub, err := c.Publish(context.Background(), completed)
		require.NoError(t, err)
		require.Equal(t, head, b.git.Head(t, repo, "feature"), "the pull request's branch is untouched")
		require.Equal(t, head, forgetest.Git(t, b.git.Dir(repo), "rev-parse", pub.PushedCommit+"^"))
		pulls := b.gh.Pulls(repo)
		require.Len(t, pulls, 2)
		require.Equal(t, "feature", pulls[1].GetBase().GetRef(), "proposed onto the pull request's branch")
		require.Empty(t, b.gh.Comments(repo, n))
	})

	t.Run("MintUnavailableRetried", func(t *testing.T) {
		t.Parallel()
		b := setup(t, workspace.PublishPolicy{}, workspace.Limits{})
		b.gh.Fail("POST", "/app/installations/", 502, 2, false)
		b.prepare(t)
		require.Len(t, b.gh.Mints(), 1)
		require.Equal(t, 3, b.gh.Calls("POST /app/installations/7/access_tokens"))
	})

	t.Run("ForgeDownGivesUp", func(t *testing.T) {
		t.Parallel()
		b := setup(t, workspace.PublishPolicy{}, workspace.Limits{})
		c := b.prepare(t)
		b.write(t, "README.md", "x\n")
		b.gh.Fail("GET", "/repos/acme/web/pulls", 503, 100, false)
		_, err := c.Publish(context.Background(), completed)
		require.ErrorIs(t, err, token.ErrUnavailable)
		require.Empty(t, b.gh.Pulls(repo))
		var refusal *workspace.RefusalError
		require.False(t, errors.As(err, &refusal))
	})
}

func TestIsCIPath(t *testing.T) {
	t.Parallel()
	for _, p := range []string{".github/workflows/ci.yml", ".github/dependabot.yml", ".GitHub/CODEOWNERS", "CODEOWNERS", "docs/CODEOWNERS",
		".gitlab-ci.yml", ".gitlab/ci/x.yml", ".circleci/config.yml", "Jenkinsfile", "ci/Jenkinsfile.release", ".travis.yml",
		"azure-pipelines.yml", ".buildkite/pipeline.yml", "tools/deploy/action.yml", "action.yaml", ".forgejo/workflows/a.yml",
		".gitea/actions/x", ".woodpecker.yml", ".woodpecker/build.yml", ".drone.yml", "bitbucket-pipelines.yml"} {
		require.True(t, workspace.IsCIPath(p), p)
	}
	for _, p := range []string{"src/app.go", "README.md", "docs/github.md", "github/x", "actions.yml", "ci.go", ".gitignore"} {
		require.False(t, workspace.IsCIPath(p), p)
	}
}
