package stack_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"code.gitea.io/sdk/gitea"
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
	"github.com/pidispatch/pidispatch/internal/testkit/stacktest"
	"github.com/pidispatch/pidispatch/jobs"
	"github.com/pidispatch/pidispatch/observe/transcript"
	"github.com/pidispatch/pidispatch/stack"
)

// The Forgejo/Gitea path end to end: a real Gitea on loopback, a real worker
// and the test job in Docker. The job's change is pushed to pi/<job id>, a
// WIP pull request references the issue, the record carries its URL, and
// Gitea's token is in none of the run's outputs.
func TestForgeJobOnGitea(t *testing.T) {
	db := livetest.Valkey(t)
	dc := livetest.Docker(t)
	g := forgetest.StartGitea(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	require.NoError(t, jobimage.Ensure(ctx, dc, jobimage.TestTag))

	admin, err := gitea.NewClient(g.URL, gitea.SetToken(g.AdminToken))
	require.NoError(t, err)
	_, _, err = admin.CreateRepo(gitea.CreateRepoOption{Name: "web", AutoInit: true, DefaultBranch: "main", Readme: "Default"})
	require.NoError(t, err)
	issue, _, err := admin.CreateIssue(g.AdminUser, "web", gitea.CreateIssueOption{Title: "fix it"})
	require.NoError(t, err)
	main, _, err := admin.GetRepoBranch(g.AdminUser, "web", "main")
	require.NoError(t, err)

	logs, name := t.TempDir(), "gitea-worker-1"
	env := map[string]string{
		"VALKEY_URL": db.URL, "PI_UNSIGNED_QUEUES": "*", "PI_WORKER_NAME": name, "PI_JOB_IMAGE": jobimage.TestTag,
		"PI_LOGS_DIR": logs, "PI_JOB_MEMORY": "256m", "PI_JOB_CPUS": "0.5", "PI_CONTAINER_USER": "65534:65534",
	}
	cfg, err := config.Load(func(k string) string { return env[k] })
	require.NoError(t, err)
	log := slog.New(slog.NewJSONHandler(io.Discard, nil))
	m, err := workspace.New(workspace.Config{
		Forges: map[jobs.Forge]workspace.Forge{jobs.ForgeForgejo: {
			Minter: token.Static{Token: token.New(g.AdminToken, time.Time{})},
			API:    &workspace.Gitea{URL: g.URL},
		}},
		StateDir: t.TempDir(), Host: name, Logger: log, Backoff: 10 * time.Millisecond,
	})
	require.NoError(t, err)
	s, err := stack.Build(context.Background(), cfg, log, dispatch.Tuning{JobsDir: t.TempDir()}, stack.WithForgeWorkspaces(m))
	require.NoError(t, err)
	stacktest.Run(t, s)

	p, err := enqueue.NewProducer(db.Client, enqueue.ProducerConfig{UnsignedQueues: []string{fleet.EveryQueue}, Attempts: 1})
	require.NoError(t, err)
	e, err := enqueue.NewRouter(p, enqueue.RouterConfig{}).EnqueueForge(ctx, enqueue.ForgeDelivery{JobID: "fj-delivery-1", Job: jobs.Job{
		Kind: jobs.KindForge, Repo: g.AdminUser + "/web", Flow: "fix",
		Task:       "JOB_WRITE_FILE=README.md\nJOB_SHOW_FILE=/proc/self/environ\nJOB_PRINT_EXIT_LINE=1",
		ForgeEvent: jobs.ForgeEvent{Forge: jobs.ForgeForgejo, Number: int(issue.Index), DeliveryID: "delivery-1", Trigger: "fix"},
	}})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		recs, err := jobs.ReadRecords(logs, e.JobID)
		return err == nil && len(recs) == 1
	}, 90*time.Second, 200*time.Millisecond, "no record of %s", e.JobID)
	recs, _ := jobs.ReadRecords(logs, e.JobID)
	rec := recs[0]
	require.Equal(t, jobs.OutcomeCompleted, rec.Outcome, rec.Reason)
	require.Equal(t, main.Commit.ID, rec.BaseCommit)

	branch, _, err := admin.GetRepoBranch(g.AdminUser, "web", fmt.Sprintf("pi/issue-%d", issue.Index))
	require.NoError(t, err)
	require.Equal(t, rec.PushedCommit, branch.Commit.ID)
	readme, _, err := admin.GetFile(g.AdminUser, "web", rec.PushedCommit, "README.md")
	require.NoError(t, err)
	require.Equal(t, "written by jobprog\n", string(readme))
	prs, _, err := admin.ListRepoPullRequests(g.AdminUser, "web", gitea.ListPullRequestsOptions{State: gitea.StateAll})
	require.NoError(t, err)
	require.Len(t, prs, 1)
	require.Equal(t, prs[0].HTMLURL, rec.PullRequestURL)
	require.True(t, strings.HasPrefix(prs[0].Title, "WIP: "))
	require.Contains(t, prs[0].Body, "Refs #")

	entries, err := transcript.Read(logs, rec.JobID, 1)
	require.NoError(t, err)
	var all strings.Builder
	transcript.Render(&all, entries)
	require.Contains(t, all.String(), "PI_JOB_ID=", "the job printed its environment")
	require.NotContains(t, all.String(), g.AdminToken)
	require.NoError(t, filepath.WalkDir(logs, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		require.NotContains(t, string(b), g.AdminToken, p)
		return err
	}))
	keys, err := db.Client.Keys(ctx, "*").Result()
	require.NoError(t, err)
	for _, k := range keys {
		dump, err := db.Client.Dump(ctx, k).Result()
		require.NoError(t, err)
		require.NotContains(t, dump, g.AdminToken, k)
	}
}
