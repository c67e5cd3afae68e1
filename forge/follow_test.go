package forge_test

import (
	"bytes"
	"context"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pidispatch/pidispatch/fleetstate"
	"github.com/pidispatch/pidispatch/forge"
	fixtures "github.com/pidispatch/pidispatch/internal/testkit/forgefixtures"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/jobs"
)

// codertocat is the user that opens pull request 2 in GitHub's published
// examples: here, the service's own user.
const codertocat = 21031067

// ownPull edits a published pull_request example into one the project
// opened: its head branch is the thread's, in the repository itself.
func ownPull(m map[string]any) {
	m["pull_request"].(map[string]any)["head"].(map[string]any)["ref"] = "pi/issue-1"
}

// bySomeone makes the example's sender a person other than the service.
func bySomeone(m map[string]any) {
	m["sender"] = map[string]any{"id": 4242, "login": "octo-human", "type": "User"}
}

func followIntake(t *testing.T, store forge.PullRequestRecorder, r *fakeRouter, logs *bytes.Buffer) *forge.Intake {
	t.Helper()
	in, err := forge.NewIntake(forge.IntakeConfig{
		Enqueuer:     r,
		Permissions:  map[jobs.Forge]forge.Permissions{jobs.ForgeGitHub: &fakePerms{allow: true}},
		SelfIDs:      map[jobs.Forge]int64{jobs.ForgeGitHub: codertocat},
		PullRequests: store,
		Logger:       slog.New(slog.NewJSONHandler(logs, nil)),
		Host:         "h1",
		Now:          func() time.Time { return time.Date(2026, 12, 7, 4, 0, 0, 0, time.UTC) },
	})
	require.NoError(t, err)
	in.SetTriggers(triggers(t, triggersFile))
	return in
}

func handleGitHub(t *testing.T, in *forge.Intake, delivery, action string, edits ...func(map[string]any)) forge.Outcome {
	t.Helper()
	body := fixtures.Edit(t, fixtures.GitHub(t, "pull_request", action, 0), func(m map[string]any) {
		for _, e := range edits {
			e(m)
		}
	})
	ev, err := forge.ParseGitHub("pull_request", delivery, body)
	require.NoError(t, err)
	out, err := in.Handle(context.Background(), ev)
	require.NoError(t, err)
	return out
}

// TestFollowGitHubPullRequests replays GitHub's published pull_request
// payloads (closed merged, closed unmerged, synchronize by a person) about
// the project's own pull requests through the intake into the Valkey store:
// each outcome is stored under the pull request's html_url, the URL publish
// records as pullRequestUrl, and no event starts a job no trigger asks for.
func TestFollowGitHubPullRequests(t *testing.T) {
	store := fleetstate.NewPullRequests(livetest.Valkey(t).Client)
	r, logs := &fakeRouter{}, &bytes.Buffer{}
	in := followIntake(t, store, r, logs)
	url := func(n int) string { return "https://github.com/Codertocat/Hello-World/pull/" + string(rune('0'+n)) }
	number := func(n int) func(map[string]any) {
		return func(m map[string]any) {
			pr := m["pull_request"].(map[string]any)
			pr["number"], pr["html_url"] = n, url(n)
			m["number"] = n
		}
	}
	merged := func(m map[string]any) {
		pr := m["pull_request"].(map[string]any)
		pr["merged"], pr["merged_at"] = true, pr["closed_at"]
	}

	out := handleGitHub(t, in, "d-merged", "closed", ownPull, number(2), merged)
	assert.Equal(t, forge.StatusDropped, out.Status, "a close no trigger names starts no job")
	handleGitHub(t, in, "d-closed", "closed", ownPull, number(3))
	out = handleGitHub(t, in, "d-pushed", "synchronize", ownPull, number(4), bySomeone)
	assert.Equal(t, forge.StatusEnqueued, out.Status, "the synchronize trigger still fires as before")
	assert.Len(t, r.got, 1)
	handleGitHub(t, in, "d-self-push", "synchronize", ownPull, number(5))

	got, err := store.Outcomes(context.Background(), []string{url(2), url(3), url(4), url(5)})
	require.NoError(t, err)
	assert.Equal(t, jobs.PullRequestMerged, got[url(2)].State)
	assert.Equal(t, jobs.PullRequestClosed, got[url(3)].State)
	assert.Equal(t, jobs.PullRequestOpen, got[url(4)].State)
	assert.Equal(t, 1, got[url(4)].HumanCommits, "a person's push counts")
	assert.NotContains(t, got, url(5), "the service's own push is no one else's work")
	assert.Equal(t, time.Date(2019, 5, 15, 15, 21, 18, 0, time.UTC), got[url(3)].UpdatedAt.UTC(), "the forge's own time of the change")
	assert.Contains(t, logs.String(), `"msg":"forge_pull_request_followed"`)
}

// TestFollowRecordsNothingForOthersPullRequests is the attacker's side: a
// pull request the project did not open (another author on a pi/ branch,
// the service's own on another branch, a fork's branch named pi/..., a
// repository no trigger serves) is merged, and nothing is recorded.
func TestFollowRecordsNothingForOthersPullRequests(t *testing.T) {
	store := fleetstate.NewMemoryPullRequests()
	in := followIntake(t, store, &fakeRouter{}, &bytes.Buffer{})
	merged := func(m map[string]any) {
		pr := m["pull_request"].(map[string]any)
		pr["merged"], pr["merged_at"] = true, pr["closed_at"]
	}
	i := 0
	for name, edit := range map[string]func(map[string]any){
		"another author on pi/": func(m map[string]any) {
			ownPull(m)
			m["pull_request"].(map[string]any)["user"] = map[string]any{"id": 4242, "login": "octo-human"}
		},
		"own author, another branch": func(map[string]any) {},
		"a fork's pi/ branch": func(m map[string]any) {
			ownPull(m)
			head := m["pull_request"].(map[string]any)["head"].(map[string]any)
			head["repo"].(map[string]any)["id"] = 999
		},
		"a repository no trigger serves": func(m map[string]any) {
			ownPull(m)
			m["repository"].(map[string]any)["full_name"] = "Codertocat/Elsewhere"
		},
	} {
		i++
		t.Log(name)
		handleGitHub(t, in, "d-attack-"+strconv.Itoa(i), "closed", edit, merged)
	}
	got, err := store.Outcomes(context.Background(), []string{"https://github.com/Codertocat/Hello-World/pull/2"})
	require.NoError(t, err)
	assert.Empty(t, got, "no outcome recorded for a pull request the project did not open")
}

// TestFollowGitLabMergeRequests reads GitLab's documented merge request
// payload: the project's own (its footer, a pi/ branch) merged and pushed
// to, and one without the footer, which records nothing.
func TestFollowGitLabMergeRequests(t *testing.T) {
	store := fleetstate.NewMemoryPullRequests()
	in, err := forge.NewIntake(forge.IntakeConfig{Enqueuer: &fakeRouter{}, PullRequests: store,
		ForgeURLs: map[jobs.Forge]string{jobs.ForgeGitLab: "http://example.com"}})
	require.NoError(t, err)
	in.SetTriggers(triggers(t, `{"triggers": [{"on": {"type": "pull_request", "repos": ["gitlabhq/gitlab-test"], "actions": ["open"]},
	  "run": {"kind": "gitlab", "flow": "review"}}]}`))
	send := func(delivery, action, oldrev, desc, user string) {
		body := fixtures.Edit(t, fixtures.File(t, "gitlab", "merge_request.json"), func(m map[string]any) {
			a := m["object_attributes"].(map[string]any)
			a["action"], a["oldrev"], a["source_branch"], a["description"] = action, oldrev, "pi/issue-1", desc
			m["user"].(map[string]any)["username"] = user
		})
		ev, err := forge.ParseGitLab("Merge Request Hook", delivery, body)
		require.NoError(t, err)
		_, err = in.Handle(context.Background(), ev)
		require.NoError(t, err)
	}
	footer := "Fixes the widget.\n\n---\n" + forge.OwnFooterMarker + "gl-1`"
	send("d-1", "update", "abc123", footer, "project_14_bot_0123abcd")
	send("d-2", "update", "abc124", footer, "user1")
	send("d-3", "merge", "", footer, "user1")
	const url = "http://example.com/diaspora/merge_requests/1"
	got, err := store.Outcomes(context.Background(), []string{url})
	require.NoError(t, err)
	require.Contains(t, got, url)
	assert.Equal(t, jobs.PullRequestMerged, got[url].State)
	assert.Equal(t, 1, got[url].HumanCommits, "the token bot's push is the service's own; the person's counts")

	store2 := fleetstate.NewMemoryPullRequests()
	in2, err := forge.NewIntake(forge.IntakeConfig{Enqueuer: &fakeRouter{}, PullRequests: store2,
		ForgeURLs: map[jobs.Forge]string{jobs.ForgeGitLab: "http://example.com"}})
	require.NoError(t, err)
	in2.SetTriggers(triggers(t, `{"triggers": [{"on": {"type": "pull_request", "repos": ["gitlabhq/gitlab-test"], "actions": ["open"]},
	  "run": {"kind": "gitlab", "flow": "review"}}]}`))
	in = in2
	send("d-4", "merge", "", "A person's merge request on a pi/ branch.", "user1")
	got, err = store2.Outcomes(context.Background(), []string{url})
	require.NoError(t, err)
	assert.Empty(t, got, "a merge request without the host's footer is not the project's")
}
