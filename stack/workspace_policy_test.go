package stack_test

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pidispatch/pidispatch/config"
	"github.com/pidispatch/pidispatch/forge/workspace"
	"github.com/pidispatch/pidispatch/jobs"
	"github.com/pidispatch/pidispatch/stack"
)

const policyTriggers = `{"triggers": [
  {"on": {"type": "comment", "id": "plain", "repos": ["acme/api"], "phrase": "/pi"}, "run": {"kind": "github", "flow": "fix"}},
  {"on": {"type": "label", "id": "ci", "repos": ["acme/api"], "any": ["ci"]}, "run": {"kind": "github", "flow": "fix"},
   "publish": {"allowCi": true, "draft": false}}
]}`

func forgeJob(trigger, repo string, f jobs.Forge) jobs.Job {
	j := jobs.Job{Kind: jobs.KindForge, Repo: repo}
	j.Trigger, j.Forge = trigger, f
	return j
}

func TestForgePolicies(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "triggers.json")
	require.NoError(t, os.WriteFile(path, []byte(policyTriggers), 0o600))
	p, err := stack.LoadForgePolicies(path, "h1", nil)
	require.NoError(t, err)

	require.Equal(t, workspace.PublishPolicy{AllowCI: true, Ready: true}, p.Policy(forgeJob("ci", "acme/api", jobs.ForgeGitHub)))
	require.Equal(t, workspace.PublishPolicy{}, p.Policy(forgeJob("plain", "acme/api", jobs.ForgeGitHub)), "no publish object: draft, no CI")
	require.Equal(t, workspace.PublishPolicy{}, p.Policy(forgeJob("nope", "acme/api", jobs.ForgeGitHub)), "unknown trigger: the safe default")
	require.Equal(t, workspace.PublishPolicy{}, p.Policy(forgeJob("ci", "acme/other", jobs.ForgeGitHub)), "a repository the trigger does not cover")
	require.Equal(t, workspace.PublishPolicy{}, p.Policy(forgeJob("ci", "acme/api", jobs.ForgeGitLab)), "another forge")

	// The file changes: the watch replaces the set; a broken file keeps it.
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	time.Sleep(200 * time.Millisecond) // the watch's baseline is the file at its start
	require.NoError(t, os.WriteFile(path, []byte(`{"triggers": [
  {"on": {"type": "label", "id": "ci", "repos": ["acme/api"], "any": ["ci"]}, "run": {"kind": "github", "flow": "fix"}}]}`), 0o600))
	require.Eventually(t, func() bool {
		return reflect.DeepEqual(p.Policy(forgeJob("ci", "acme/api", jobs.ForgeGitHub)), workspace.PublishPolicy{})
	}, 10*time.Second, 50*time.Millisecond, "the reload was not applied")
	cancel()
	require.NoError(t, <-done)
}

func TestLoadForgePoliciesRefusals(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p, err := stack.LoadForgePolicies(filepath.Join(dir, "absent.json"), "h1", nil)
	require.NoError(t, err, "a missing file waits, as cron does")
	require.Equal(t, workspace.PublishPolicy{}, p.Policy(forgeJob("ci", "acme/api", jobs.ForgeGitHub)))

	bad := filepath.Join(dir, "bad.json")
	require.NoError(t, os.WriteFile(bad, []byte(`{"triggers": [
  {"on": {"type": "label", "repos": ["acme/api"], "any": ["ci"]}, "run": {"kind": "github", "flow": "fix"}, "publish": {"draft": 1}}]}`), 0o600))
	_, err = stack.LoadForgePolicies(bad, "h1", nil)
	var ce *config.ConfigError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, "PI_TRIGGERS_FILE", ce.Var)
	require.Equal(t, bad, ce.Value)
	require.Contains(t, ce.Rule, "triggers[0]: publish")
}

// Admit lets through only a forge job the host's own triggers cover, with
// the fields its trigger's event gives it: what a raw Valkey writer puts
// in a job's data never decides where the host clones or comments.
func TestForgePoliciesAdmit(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "triggers.json")
	require.NoError(t, os.WriteFile(path, []byte(policyTriggers), 0o600))
	p, err := stack.LoadForgePolicies(path, "h1", nil)
	require.NoError(t, err)
	comment := func() jobs.Job {
		j := forgeJob("plain", "acme/api", jobs.ForgeGitHub)
		j.Flow, j.Number, j.CommentID = "fix", 3, 77
		return j
	}
	label := func(l string) jobs.Job {
		j := forgeJob("ci", "acme/api", jobs.ForgeGitHub)
		j.Flow, j.Number, j.Label = "fix", 3, l
		return j
	}
	require.NoError(t, p.Admit(comment()))
	require.NoError(t, p.Admit(label("ci")))
	for name, j := range map[string]jobs.Job{
		"unknown trigger":         forgeJob("nope", "acme/api", jobs.ForgeGitHub),
		"another repository":      func() jobs.Job { j := comment(); j.Repo = "acme/secrets"; return j }(),
		"another forge":           func() jobs.Job { j := comment(); j.Forge = jobs.ForgeGitLab; return j }(),
		"another flow":            func() jobs.Job { j := comment(); j.Flow = "review"; return j }(),
		"comment job, no comment": func() jobs.Job { j := comment(); j.CommentID = 0; return j }(),
		"label not the trigger's": label("deploy"),
		"label job, no label":     label(""),
	} {
		require.Error(t, p.Admit(j), name)
	}
}

// A host with forge credentials and no triggers file admits no forge job.
func TestForgeWorkspacesWithoutTriggersAdmitNone(t *testing.T) {
	t.Parallel()
	env := map[string]string{"GITHUB_PAT": "ghp_x", "PI_LOGS_DIR": t.TempDir()}
	m, err := stack.ForgeWorkspacesFromEnv(func(k string) string { return env[k] }, "h1", nil, nil)
	require.NoError(t, err)
	require.NotNil(t, m)
	j := forgeJob("plain", "acme/api", jobs.ForgeGitHub)
	require.ErrorIs(t, m.Admit(j), workspace.ErrNotAgreed)
}
