package receiver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pidispatch/pidispatch/cronsync"
	"github.com/pidispatch/pidispatch/fleetstate"
	"github.com/pidispatch/pidispatch/forge"
	"github.com/pidispatch/pidispatch/forge/forgetest"
	"github.com/pidispatch/pidispatch/forge/inbox"
	"github.com/pidispatch/pidispatch/forge/receiver"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/internal/testkit/logtest"
	"github.com/pidispatch/pidispatch/jobs"
)

// TestGiteaFollowsTheProjectsPullRequests runs a real Gitea whose webhook
// reaches a receiver with its inbox on Valkey. The service's user opens three
// pull requests from pi/issue-<n> branches: one is merged, one closed
// without merge, and a person pushes a commit to the third. A person's own
// pull request from a pi/ branch is merged too. Each of the service's
// outcomes is stored under the html_url the forge's API answers (the URL a
// run record names); the person's records nothing; no job is enqueued.
func TestGiteaFollowsTheProjectsPullRequests(t *testing.T) {
	g := forgetest.StartGitea(t)
	db := livetest.Valkey(t)
	store := fleetstate.NewPullRequests(db.Client)

	api := func(tok, method, path string, body any) map[string]any {
		t.Helper()
		var m map[string]any
		out := g.API(t, tok, method, path, body)
		if len(out) > 0 {
			require.NoError(t, json.Unmarshal(out, &m), "%s %s", method, path)
		}
		return m
	}
	bot := g.CreateUser(t, "pi-bot", false)
	alice := g.CreateUser(t, "alice", false)
	api("", http.MethodPost, "/orgs", map[string]any{"username": "acme", "visibility": "public"})
	api("", http.MethodPost, "/orgs/acme/repos", map[string]any{"name": "widgets", "auto_init": true, "default_branch": "main"})
	for _, u := range []string{bot.Login, alice.Login} {
		g.API(t, "", http.MethodPut, "/repos/acme/widgets/collaborators/"+u, map[string]any{"permission": "write"})
	}

	logs := &logtest.Buffer{}
	log := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	fts, err := cronsync.ParseForgeTriggers([]byte(triggersFile))
	require.NoError(t, err)
	router := &fakeRouter{}
	in, err := forge.NewIntake(forge.IntakeConfig{Enqueuer: router, Logger: log, Host: "h1",
		SelfIDs: map[jobs.Forge]int64{jobs.ForgeForgejo: bot.ID}, PullRequests: store,
		ForgeURLs: map[jobs.Forge]string{jobs.ForgeForgejo: g.URL}})
	require.NoError(t, err)
	in.SetTriggers(fts)
	ib, err := inbox.Open(inbox.Config{Valkey: db.Client, Handler: in, SpoolDir: filepath.Join(t.TempDir(), "spool"),
		Poll: 20 * time.Millisecond, Logger: log, Host: "h1"})
	require.NoError(t, err)
	t.Cleanup(ib.Close)
	r, err := receiver.New(receiver.Config{Intake: in, Inbox: ib, ForgejoSecret: fjSecret, Logger: log, Host: "h1"})
	require.NoError(t, err)
	srv := httptest.NewServer(r.Handler())
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = ib.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	api("", http.MethodPost, "/repos/acme/widgets/hooks", map[string]any{
		"type": "gitea", "active": true, "events": []string{"pull_request", "pull_request_sync"},
		"config": map[string]string{"url": srv.URL + "/forgejo", "content_type": "json", "secret": fjSecret},
	})

	open := func(u forgetest.GiteaUser, branch string) map[string]any {
		t.Helper()
		api(u.Token, http.MethodPost, "/repos/acme/widgets/contents/"+strings.ReplaceAll(branch, "/", "-")+".txt", map[string]any{
			"content": "d29yawo=", "message": "Work on " + branch, "branch": "main", "new_branch": branch,
		})
		return api(u.Token, http.MethodPost, "/repos/acme/widgets/pulls", map[string]any{
			"title": "Work on " + branch, "head": branch, "base": "main",
			"body": "Fixes it.\n\n---\n" + forge.OwnFooterMarker + "fj-1`",
		})
	}
	merged, closed, worked := open(bot, "pi/issue-1"), open(bot, "pi/issue-2"), open(bot, "pi/issue-3")
	theirs := open(alice, "pi/issue-9")
	num := func(pr map[string]any) int { return int(pr["number"].(float64)) }

	api(alice.Token, http.MethodPost, "/repos/acme/widgets/contents/by-alice.txt", map[string]any{
		"content": "YnkgYWxpY2UK", "message": "A person's follow-up", "branch": "pi/issue-3",
	})
	api(bot.Token, http.MethodPost, "/repos/acme/widgets/contents/by-bot.txt", map[string]any{
		"content": "YnkgYm90Cg==", "message": "The service's own follow-up", "branch": "pi/issue-1",
	})
	// Gitea checks a pull request's mergeability in the background: merge
	// once it answers it may.
	merge := func(pr map[string]any) {
		t.Helper()
		deadline := time.Now().Add(time.Minute)
		for {
			req, _ := http.NewRequest(http.MethodPost, fmt.Sprintf("%s/api/v1/repos/acme/widgets/pulls/%d/merge", g.URL, num(pr)),
				strings.NewReader(`{"Do":"merge"}`))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Authorization", "token "+g.AdminToken)
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusNoContent {
				return
			}
			require.True(t, time.Now().Before(deadline), "merge of #%d: %s", num(pr), resp.Status)
			time.Sleep(200 * time.Millisecond)
		}
	}
	merge(merged)
	merge(theirs)
	api("", http.MethodPatch, fmt.Sprintf("/repos/acme/widgets/pulls/%d", num(closed)), map[string]any{"state": "closed"})

	// The URL the forge's API answers for each pull request: what publish
	// records as the run's pullRequestUrl.
	htmlURL := func(pr map[string]any) string {
		return api("", http.MethodGet, fmt.Sprintf("/repos/acme/widgets/pulls/%d", num(pr)), nil)["html_url"].(string)
	}
	urls := []string{htmlURL(merged), htmlURL(closed), htmlURL(worked)}
	want := func(got map[string]jobs.PullRequestOutcome) bool {
		return got[urls[0]].State == jobs.PullRequestMerged && got[urls[1]].State == jobs.PullRequestClosed &&
			got[urls[2]].HumanCommits == 1 && strings.Contains(logs.String(), "forge_pull_request_not_own")
	}
	var got map[string]jobs.PullRequestOutcome
	deadline := time.Now().Add(2 * time.Minute)
	for {
		got, err = store.Outcomes(context.Background(), append(urls, htmlURL(theirs)))
		require.NoError(t, err)
		if want(got) || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	require.True(t, want(got), "outcomes %v; log:\n%s", got, logs.String())
	require.Equal(t, jobs.PullRequestOpen, got[urls[2]].State)
	require.Zero(t, got[urls[0]].HumanCommits, "the service's own push counts for no one")
	require.NotContains(t, got, htmlURL(theirs), "a person's pull request from a pi/ branch is not the project's")
	require.Zero(t, router.count(), "following enqueues nothing")
}
