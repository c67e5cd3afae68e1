package stack_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pidispatch/pidispatch/config"
	"github.com/pidispatch/pidispatch/forge/token"
	"github.com/pidispatch/pidispatch/forge/workspace"
	"github.com/pidispatch/pidispatch/jobs"
	"github.com/pidispatch/pidispatch/stack"
)

// fakeGit writes an executable that answers --version with said.
func fakeGit(t *testing.T, said string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "git")
	require.NoError(t, os.WriteFile(p, []byte("#!/bin/sh\nprintf '%s\\n' '"+said+"'\n"), 0o755))
	return p
}

func forgeManager(t *testing.T, git string) *workspace.Manager {
	t.Helper()
	m, err := workspace.New(workspace.Config{
		Forges: map[jobs.Forge]workspace.Forge{jobs.ForgeForgejo: {
			API: &workspace.Gitea{URL: "https://forgejo.example"}, Minter: token.Static{Token: token.New("t", time.Time{})},
		}},
		StateDir: t.TempDir(), Git: git,
	})
	require.NoError(t, err)
	return m
}

// A host with forge credentials and a git older than 2.32.0 is refused at
// boot (a *config.ConfigError, exit 2), naming the program, the version
// found, the one required and the fix; one whose git answers no version
// too. A host without forge credentials runs no git and is not asked.
func TestCheckForgeGitRefusesOldGit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	old := fakeGit(t, "git version 2.20.0")
	err := stack.CheckForgeGit(ctx, forgeManager(t, old))
	var ce *config.ConfigError
	require.ErrorAs(t, err, &ce)
	require.ErrorIs(t, err, workspace.ErrGitTooOld)
	for _, want := range []string{old, "2.20.0", "2.32.0", "install git 2.32.0 or later", "remove this host's forge credentials"} {
		require.Contains(t, err.Error(), want)
	}

	odd := fakeGit(t, "hello")
	err = stack.CheckForgeGit(ctx, forgeManager(t, odd))
	require.ErrorAs(t, err, &ce)
	require.ErrorIs(t, err, workspace.ErrGitVersionUnknown)
	require.Contains(t, err.Error(), `"hello"`)
	require.Contains(t, err.Error(), "2.32.0")

	missing := filepath.Join(t.TempDir(), "no-git")
	err = stack.CheckForgeGit(ctx, forgeManager(t, missing))
	require.ErrorAs(t, err, &ce)
	require.Contains(t, err.Error(), "could not be run")

	require.NoError(t, stack.CheckForgeGit(ctx, nil), "no forge credential: no git needed")
}

// The host's real git (2.32.0 or later where the tests run) boots.
func TestCheckForgeGitAcceptsRealGit(t *testing.T) {
	t.Parallel()
	require.NoError(t, stack.CheckForgeGit(context.Background(), forgeManager(t, "")))
}
