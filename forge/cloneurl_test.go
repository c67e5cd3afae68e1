package forge_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pidispatch/pidispatch/forge"
	fixtures "github.com/pidispatch/pidispatch/internal/testkit/forgefixtures"
	"github.com/pidispatch/pidispatch/jobs"
)

// withCloneURL is a real published payload with its clone URL replaced, as
// an attacker holding the webhook secret (or a forge's look-alike) sends it.
func withCloneURL(t *testing.T, f jobs.Forge, body []byte, clone string) []byte {
	return fixtures.Edit(t, body, func(m map[string]any) {
		switch f {
		case jobs.ForgeGitLab:
			m["project"].(map[string]any)["git_http_url"] = clone
		default:
			m["repository"].(map[string]any)["clone_url"] = clone
		}
	})
}

func parse(f jobs.Forge, event string, body []byte) (forge.Event, error) {
	switch f {
	case jobs.ForgeGitLab:
		return forge.ParseGitLab(event, "d-clone", body)
	case jobs.ForgeForgejo:
		return forge.ParseForgejo(event, "d-clone", body)
	}
	return forge.ParseGitHub(event, "d-clone", body)
}

// A clone URL no forge serves its tokens over is malformed whatever the
// forge: another scheme (ssh, git, file, git's ext:: helper, scp-like),
// or credentials in it.
func TestParseRefusesACloneURLOfAnotherKind(t *testing.T) {
	payloads := []struct {
		forge jobs.Forge
		event string
		body  []byte
	}{
		{jobs.ForgeGitHub, "issue_comment", fixtures.GitHub(t, "issue_comment", "created", 0)},
		{jobs.ForgeGitHub, "pull_request", fixtures.GitHub(t, "pull_request", "opened", 0)},
		{jobs.ForgeGitLab, "Note Hook", fixtures.File(t, "gitlab", "note_issue.json")},
		{jobs.ForgeGitLab, "Merge Request Hook", fixtures.File(t, "gitlab", "merge_request.json")},
		{jobs.ForgeForgejo, "issue_comment", fixtures.File(t, "forgejo", "issue_comment_created.json")},
	}
	for _, p := range payloads {
		ev, err := parse(p.forge, p.event, p.body)
		require.NoError(t, err, "%s %s as published", p.forge, p.event)
		require.NotEmpty(t, ev.CloneURL, "%s %s: the payload's clone URL is read", p.forge, p.event)
		for _, clone := range []string{
			"ssh://git@github.com/Codertocat/Hello-World.git",
			"git://github.com/Codertocat/Hello-World.git",
			"file:///etc/passwd",
			"ext::sh -c touch% /tmp/pwned",
			"git@github.com:Codertocat/Hello-World.git",
			"https://x-access-token:ghp_stolen@github.com/Codertocat/Hello-World.git",
			"https://attacker@example.com/gitlabhq/gitlab-test.git",
			"https:opaque",
			"https:///no-host.git",
		} {
			_, err := parse(p.forge, p.event, withCloneURL(t, p.forge, p.body, clone))
			require.ErrorIs(t, err, forge.ErrMalformed, "%s %s with clone URL %q", p.forge, p.event, clone)
			require.ErrorIs(t, err, forge.ErrCloneURL, "%s %s with clone URL %q", p.forge, p.event, clone)
		}
	}
}

// cloneIntake serves the GitHub triggers with a permission double that says
// yes: whatever the intake refuses, it refuses before asking.
func cloneIntake(t *testing.T, cfg forge.IntakeConfig) (*forge.Intake, *fakeRouter, *bytes.Buffer) {
	t.Helper()
	r, logs := &fakeRouter{}, &bytes.Buffer{}
	cfg.Enqueuer, cfg.Logger, cfg.Host = r, slog.New(slog.NewJSONHandler(logs, nil)), "h1"
	if cfg.Permissions == nil {
		allow := &fakePerms{allow: true}
		cfg.Permissions = map[jobs.Forge]forge.Permissions{jobs.ForgeGitHub: allow, jobs.ForgeGitLab: allow, jobs.ForgeForgejo: allow}
	}
	in, err := forge.NewIntake(cfg)
	require.NoError(t, err)
	in.SetTriggers(triggers(t, triggersFile))
	return in, r, logs
}

// On an https forge, a payload whose clone URL is http, or on another host
// or port, is refused malformed with the reason in the log line, before a
// permission is asked or a job enqueued. The payload as GitHub publishes it
// is enqueued.
func TestIntakeRefusesACloneURLNotTheForges(t *testing.T) {
	body := fixtures.GitHub(t, "issue_comment", "created", 0)
	body = fixtures.Edit(t, body, func(m map[string]any) {
		m["comment"].(map[string]any)["body"] = "fixed"
	})
	cfg := forge.IntakeConfig{ForgeURLs: map[jobs.Forge]string{jobs.ForgeGitHub: "https://github.com"}}

	in, r, _ := cloneIntake(t, cfg)
	ev, err := forge.ParseGitHub("issue_comment", "d-ok", body)
	require.NoError(t, err)
	require.Equal(t, "https://github.com/Codertocat/Hello-World.git", ev.CloneURL)
	out, err := in.Handle(context.Background(), ev)
	require.NoError(t, err)
	require.Equal(t, forge.StatusEnqueued, out.Status, "the published payload is the forge's own")
	require.Len(t, r.got, 1)

	for clone, why := range map[string]string{
		"http://github.com/Codertocat/Hello-World.git":               "http while the forge is https",
		"HTTP://GitHub.com/Codertocat/Hello-World.git":               "http while the forge is https",
		"https://evil.example/Codertocat/Hello-World.git":            `host \"evil.example\" is not the forge's`,
		"https://github.com.evil.example/Codertocat/Hello-World.git": `host \"github.com.evil.example\" is not the forge's`,
		"https://github.com:8443/Codertocat/Hello-World.git":         `host \"github.com:8443\" is not the forge's`,
		"https://127.0.0.1/Codertocat/Hello-World.git":               `host \"127.0.0.1\" is not the forge's`,
	} {
		in, r, logs := cloneIntake(t, cfg)
		ev, err := forge.ParseGitHub("issue_comment", "d-bad", withCloneURL(t, jobs.ForgeGitHub, body, clone))
		require.NoError(t, err, "%s is http(s) without credentials: the parser alone cannot tell", clone)
		out, err := in.Handle(context.Background(), ev)
		require.NoError(t, err)
		assert.Equal(t, forge.StatusRefused, out.Status, clone)
		assert.Equal(t, forge.ReasonMalformed, out.Reason, clone)
		assert.Empty(t, r.got, clone)
		assert.Contains(t, logs.String(), `"msg":"forge_refused"`, clone)
		assert.Contains(t, logs.String(), `"reason":"malformed"`, clone)
		assert.Contains(t, logs.String(), why, clone)
	}
}

// A forge configured on http (a self-hosted Gitea on a private network) may
// name http clone URLs on its own host; the same payload is refused when the
// forge is configured on https. The recorded Gitea delivery names
// http://127.0.0.1:39217.
func TestIntakeCloneURLOnAnHTTPForge(t *testing.T) {
	body := fixtures.File(t, "forgejo", "issue_comment_created.json")
	ev, err := forge.ParseForgejo("issue_comment", "d-fj", body)
	require.NoError(t, err)
	require.Equal(t, "http://127.0.0.1:39217/acme/widgets.git", ev.CloneURL)
	for forgeURL, refused := range map[string]bool{
		"http://127.0.0.1:39217":   false,
		"http://127.0.0.1:39217/":  false,
		"https://127.0.0.1:39217":  true, // http while the forge is https
		"http://127.0.0.1:3000":    true, // another port
		"http://gitea.example:80/": true, // another host
	} {
		in, _, logs := cloneIntake(t, forge.IntakeConfig{ForgeURLs: map[jobs.Forge]string{jobs.ForgeForgejo: forgeURL}})
		out, err := in.Handle(context.Background(), ev)
		require.NoError(t, err)
		if refused {
			assert.Equal(t, forge.ReasonMalformed, out.Reason, forgeURL)
			assert.Contains(t, logs.String(), `"reason":"malformed"`, forgeURL)
		} else {
			assert.NotEqual(t, forge.ReasonMalformed, out.Reason, forgeURL)
		}
	}
}

// Without ForgeURLs, the forge's URL is the one its permission lookup asks:
// stack wires GitLabPermissions with the GitLab URL, GitHubPermissions with
// the API URL. The lookups are never reached: the refusal comes first.
func TestIntakeCloneURLReadsTheForgeFromItsPermissions(t *testing.T) {
	ctx := context.Background()
	gl := fixtures.File(t, "gitlab", "note_issue.json") // names http://example.com/gitlabhq/gitlab-test.git
	in, _, logs := cloneIntake(t, forge.IntakeConfig{Permissions: map[jobs.Forge]forge.Permissions{
		jobs.ForgeGitLab: &forge.CachedPermissions{Inner: forge.GitLabPermissions{BaseURL: "https://example.com", Tokens: forge.StaticToken("t")}},
		jobs.ForgeGitHub: forge.GitHubPermissions{BaseURL: "https://api.github.com", Tokens: forge.StaticToken("t")},
	}})
	ev, err := forge.ParseGitLab("Note Hook", "d-gl", gl)
	require.NoError(t, err)
	out, err := in.Handle(ctx, ev)
	require.NoError(t, err)
	assert.Equal(t, forge.ReasonMalformed, out.Reason, "http://example.com while GitLab is https://example.com")
	assert.Contains(t, logs.String(), "http while the forge is https")

	gh := withCloneURL(t, jobs.ForgeGitHub, fixtures.GitHub(t, "issue_comment", "created", 0), "https://api.github.com/Codertocat/Hello-World.git")
	ev, err = forge.ParseGitHub("issue_comment", "d-gh", gh)
	require.NoError(t, err)
	out, err = in.Handle(ctx, ev)
	require.NoError(t, err)
	assert.Equal(t, forge.ReasonMalformed, out.Reason, "GitHub's API host is not its git host")
	assert.Contains(t, logs.String(), `is not the forge's \"github.com\"`)
}

func TestCheckCloneURL(t *testing.T) {
	for _, tc := range []struct {
		clone, forge string
		ok           bool
	}{
		{"https://github.com/a/b.git", "https://github.com", true},
		{"https://GITHUB.com/a/b.git", "https://github.com", true},
		{"https://github.com:443/a/b.git", "https://github.com", true},
		{"https://ghe.example/a/b.git", "https://ghe.example", true},
		{"http://gitea.lan:3000/a/b.git", "http://gitea.lan:3000", true},
		{"https://gitea.lan:3000/a/b.git", "http://gitea.lan:3000", true},
		{"http://gitea.lan/a/b.git", "", true},
		{"http://github.com/a/b.git", "https://github.com", false},
		{"https://github.com/a/b.git", "https://gitlab.com", false},
		{"https://github.com:444/a/b.git", "https://github.com", false},
		{"https://u:p@github.com/a/b.git", "https://github.com", false},
		{"https://u@github.com/a/b.git", "", false},
		{"ssh://github.com/a/b.git", "", false},
		{"ftp://github.com/a/b.git", "", false},
		{"", "", false},
		{"https://github.com/a/b.git", "not a url", false},
	} {
		err := forge.CheckCloneURL(tc.clone, tc.forge)
		if tc.ok {
			assert.NoError(t, err, "%q on %q", tc.clone, tc.forge)
		} else {
			assert.True(t, errors.Is(err, forge.ErrCloneURL) && errors.Is(err, forge.ErrMalformed), "%q on %q: %v", tc.clone, tc.forge, err)
		}
	}
}
