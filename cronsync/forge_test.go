package cronsync

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pidispatch/pidispatch/internal/testkit/logtest"
	"github.com/pidispatch/pidispatch/jobs"
)

func TestForgeTriggersParse(t *testing.T) {
	fts, err := ParseForgeTriggers([]byte(`{"triggers": [
	  {"on": {"type": "cron", "id": "n", "pattern": "0 3 * * *"}, "run": {"kind": "local", "folder": "/srv/a", "command": "x"}},
	  {"on": {"type": "label", "repos": ["acme/api"], "any": ["pi"], "all": ["ready"], "none": ["hold"]},
	   "run": {"kind": "github", "flow": "fix", "replicas": 3, "maxCostUsd": "2.50", "secretsProfile": "gh"}},
	  {"on": {"type": "issue", "id": "retro", "repos": ["grp/sub/proj"], "number": 12, "once": true},
	   "run": {"kind": "gitlab", "command": "retro", "instructions": "Write a short retro."}},
	  {"on": {"type": "pull_request", "repos": ["acme/widgets"], "actions": ["opened", "synchronized"], "any": ["review-me"]},
	   "run": {"kind": "forgejo", "flow": "review", "task": "Review it"}}
	]}`))
	require.NoError(t, err)
	require.Len(t, fts, 3)
	assert.Equal(t, "label-1", fts[0].Name)
	assert.Equal(t, 3, fts[0].Replicas)
	assert.Equal(t, DefaultForgeTask, fts[0].Job.Task, "a flow without a task gets the default one")
	assert.Equal(t, "gh", fts[0].Job.SecretsProfile)
	assert.Empty(t, fts[0].Job.Repo, "the template carries no repository")
	assert.Equal(t, "retro", fts[1].Name)
	assert.Equal(t, jobs.ForgeGitLab, fts[1].Forge)
	assert.Equal(t, []string{"close"}, fts[1].Actions, "an issue trigger defaults to the forge's close word")
	assert.True(t, fts[1].Once)
	assert.Equal(t, "Write a short retro.", fts[1].Job.Instructions)
	assert.Equal(t, []string{"opened", "synchronized"}, fts[2].Actions)
}

func TestForgeTriggersPublish(t *testing.T) {
	fts, err := ParseForgeTriggers([]byte(`{"triggers": [
	  {"on": {"type": "comment", "id": "plain", "repos": ["a/b"], "phrase": "/pi"}, "run": {"kind": "github", "flow": "f"}},
	  {"on": {"type": "label", "id": "ci", "repos": ["a/b"], "any": ["ci"]}, "run": {"kind": "github", "flow": "f"},
	   "publish": {"allowCi": true, "draft": false}},
	  {"on": {"type": "label", "id": "ready", "repos": ["a/b"], "any": ["r"]}, "run": {"kind": "github", "flow": "f"},
	   "publish": {"draft": false}}
	]}`))
	require.NoError(t, err)
	require.Len(t, fts, 3)
	assert.Equal(t, DefaultForgePublish, fts[0].Publish, "no publish object: the safe default")
	assert.Equal(t, ForgePublish{AllowCI: false, Draft: true}, DefaultForgePublish)
	assert.Equal(t, ForgePublish{AllowCI: true, Draft: false}, fts[1].Publish)
	assert.Equal(t, ForgePublish{AllowCI: false, Draft: false}, fts[2].Publish)

	// A cron trigger has no publish object.
	_, err = ParseForgeTriggers([]byte(`{"triggers": [{"on": {"type": "cron", "pattern": "0 3 * * *"},
	  "run": {"kind": "local", "folder": "/srv/a", "command": "x"}, "publish": {"draft": false}}]}`))
	require.ErrorContains(t, err, "triggers[0]: publish: unknown key")
}

func TestForgeTriggersRefuseWithClearErrors(t *testing.T) {
	for _, c := range []struct {
		name, trigger, want string
	}{
		{"no repos", `{"on": {"type": "label", "any": ["a"]}, "run": {"kind": "github", "flow": "f"}}`, `triggers[0]: on.repos: required`},
		{"bad repo", `{"on": {"type": "label", "repos": ["nope"], "any": ["a"]}, "run": {"kind": "github", "flow": "f"}}`, `on.repos[0]: must be owner/name`},
		{"label without selector", `{"on": {"type": "label", "repos": ["a/b"]}, "run": {"kind": "github", "flow": "f"}}`, `on.any: a label trigger needs any or all`},
		{"wrong forge word", `{"on": {"type": "pull_request", "repos": ["a/b"], "actions": ["open"]}, "run": {"kind": "github", "flow": "f"}}`, `on.actions[0]: "open" is not a github pull_request action`},
		{"local kind", `{"on": {"type": "comment", "repos": ["a/b"], "phrase": "/pi"}, "run": {"kind": "local", "flow": "f"}}`, `run.kind: "local" is not a forge`},
		{"replicas", `{"on": {"type": "comment", "repos": ["a/b"], "phrase": "/pi"}, "run": {"kind": "github", "flow": "f", "replicas": 4}}`, `run.replicas: must be 2 to 3`},
		{"once needs number", `{"on": {"type": "issue", "repos": ["a/b"], "once": true}, "run": {"kind": "github", "flow": "f"}}`, `on.once: needs on.number`},
		{"misspelt on key", `{"on": {"type": "comment", "repos": ["a/b"], "phrse": "/pi"}, "run": {"kind": "github", "flow": "f"}}`, `on.phrse`},
		{"unknown run field", `{"on": {"type": "comment", "repos": ["a/b"], "phrase": "/pi"}, "run": {"kind": "github", "flow": "f", "folder": "/x"}}`, `run: `},
		{"job validator", `{"on": {"type": "comment", "repos": ["a/b"], "phrase": "/pi"}, "run": {"kind": "github", "flow": "f", "maxTurns": -1}}`, `run.maxTurns: must be between 1`},
		{"both flow and command", `{"on": {"type": "comment", "repos": ["a/b"], "phrase": "/pi"}, "run": {"kind": "github", "flow": "f", "command": "c"}}`, `run.flow: exactly one of flow and command`},
		{"review state without review", `{"on": {"type": "pull_request", "repos": ["a/b"], "actions": ["opened"], "reviewState": "approved"}, "run": {"kind": "github", "flow": "f"}}`, `on.reviewState: only with the review_submitted action`},
		{"unknown type", `{"on": {"type": "push", "repos": ["a/b"]}, "run": {"kind": "github", "flow": "f"}}`, `on.type: unknown type "push"`},
		{"publish misspelt", `{"on": {"type": "comment", "repos": ["a/b"], "phrase": "/pi"}, "run": {"kind": "github", "flow": "f"}, "publish": {"allowWorkflows": true}}`, `triggers[0]: publish: `},
		{"publish not bool", `{"on": {"type": "comment", "repos": ["a/b"], "phrase": "/pi"}, "run": {"kind": "github", "flow": "f"}, "publish": {"draft": "no"}}`, `triggers[0]: publish: `},
		{"publish null", `{"on": {"type": "comment", "repos": ["a/b"], "phrase": "/pi"}, "run": {"kind": "github", "flow": "f"}, "publish": null}`, `triggers[0]: publish: must be an object`},
		{"publish key misspelt", `{"on": {"type": "comment", "repos": ["a/b"], "phrase": "/pi"}, "run": {"kind": "github", "flow": "f"}, "pubilsh": {}}`, `triggers[0]: pubilsh: unknown key (did you mean "publish"?)`},
		{"instructions too long", `{"on": {"type": "comment", "repos": ["a/b"], "phrase": "/pi"}, "run": {"kind": "github", "flow": "f", "instructions": "` + strings.Repeat("x", 2001) + `"}}`, `run.instructions: longer than 2000 bytes`},
	} {
		_, err := ParseForgeTriggers([]byte(`{"triggers": [` + c.trigger + `]}`))
		require.Error(t, err, c.name)
		assert.ErrorIs(t, err, ErrInvalidTriggers, c.name)
		assert.Contains(t, err.Error(), c.want, c.name)
	}
}

func TestForgeTriggersReportEveryProblemAtOnce(t *testing.T) {
	_, err := ParseForgeTriggers([]byte(`{"triggers": [
	  {"on": {"type": "comment", "repos": ["a/b"], "phrase": "/pi"}, "run": {"kind": "github", "flow": "f"}},
	  {"on": {"type": "comment", "repos": ["a/b"], "phrase": "/ai"}, "run": {"kind": "github", "flow": "g"}},
	  {"on": {"type": "label", "id": "x", "repos": ["a/b"], "any": ["l"]}, "run": {"kind": "github", "flow": "f"}},
	  {"on": {"type": "label", "id": "x", "repos": ["a/b"], "any": ["m"]}, "run": {"kind": "github", "flow": "f"}}
	]}`))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "triggers[1]: on.type: one comment trigger per forge")
	assert.Contains(t, err.Error(), `triggers[3] (id "x"): on.id: duplicate of triggers[2]`)
}

func TestDisarmRefusesAMovedTrigger(t *testing.T) {
	path := filepath.Join(t.TempDir(), "triggers.json")
	require.NoError(t, os.WriteFile(path, []byte(`{"triggers": [
	  {"on": {"type": "issue", "id": "a", "repos": ["a/b"], "number": 1, "once": true}, "run": {"kind": "github", "flow": "f"}}]}`), 0o600))
	err := Disarm(path, 0, "other", time.Now(), "gh-1")
	assert.ErrorContains(t, err, "no longer that trigger")
	require.NoError(t, Disarm(path, 0, "a", time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), "gh-1"))
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Contains(t, string(data), `"at": "2026-01-02T03:04:05Z"`)
	// Disarming twice is a no-op, the first mark stays.
	require.NoError(t, Disarm(path, 0, "a", time.Now(), "gh-2"))
	again, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, string(data), string(again))
}

func TestDisarmThroughASymlinkReplacesTheTarget(t *testing.T) {
	dir := t.TempDir()
	real := filepath.Join(dir, "real.json")
	link := filepath.Join(dir, "triggers.json")
	require.NoError(t, os.WriteFile(real, []byte(`{"triggers": [
	  {"on": {"type": "issue", "id": "a", "repos": ["a/b"], "number": 1, "once": true}, "run": {"kind": "github", "flow": "f"}}]}`), 0o600))
	require.NoError(t, os.Symlink(real, link))
	require.NoError(t, Disarm(link, 0, "a", time.Now(), "gh-1"))
	fi, err := os.Lstat(link)
	require.NoError(t, err)
	assert.NotZero(t, fi.Mode()&os.ModeSymlink, "the link stays a link")
	data, err := os.ReadFile(real)
	require.NoError(t, err)
	assert.Contains(t, string(data), "disarmed")
}

func TestWatchForgeReloadsAndKeepsTheLastGoodSet(t *testing.T) {
	path := filepath.Join(t.TempDir(), "triggers.json")
	write := func(s string) {
		t.Helper()
		tmp := path + ".tmp"
		require.NoError(t, os.WriteFile(tmp, []byte(s), 0o600))
		require.NoError(t, os.Rename(tmp, path))
	}
	write(`{"triggers": []}`)
	var mu sync.Mutex
	var got [][]ForgeTrigger
	var logs logtest.Buffer
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- WatchForge(ctx, path, ForgeWatchConfig{Poll: 10 * time.Millisecond, Debounce: 20 * time.Millisecond,
			Logger: logs.Logger(), Host: "h1"}, func(fts []ForgeTrigger) {
			mu.Lock()
			got = append(got, fts)
			mu.Unlock()
		})
	}()
	defer func() {
		cancel()
		require.NoError(t, <-done)
	}()
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(got)
	}
	time.Sleep(50 * time.Millisecond)
	write(`{"triggers": [{"on": {"type": "comment", "repos": ["a/b"], "phrase": "/pi"}, "run": {"kind": "github", "flow": "f"}}]}`)
	require.Eventually(t, func() bool { return count() == 1 }, 5*time.Second, 10*time.Millisecond)
	write(`{"triggers": [{"on": {"type": "comment", "repos": ["a/b"]}, "run": {"kind": "github", "flow": "f"}}]}`)
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "triggers_reload_invalid") }, 5*time.Second, 10*time.Millisecond)
	assert.Equal(t, 1, count(), "an invalid file is not applied")
	assert.Contains(t, logs.String(), `"kept":true`)
	assert.Contains(t, logs.String(), `"host":"h1"`)
	mu.Lock()
	assert.Equal(t, "/pi", got[0][0].Phrase)
	mu.Unlock()
}
