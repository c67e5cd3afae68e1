package workspace_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pidispatch/pidispatch/forge/workspace"
)

// fakeGit is a program that answers --version with said.
func fakeGit(t *testing.T, said string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "git")
	require.NoError(t, os.WriteFile(p, []byte("#!/bin/sh\nprintf '%s\\n' '"+said+"'\n"), 0o755))
	return p
}

func TestCheckGit(t *testing.T) {
	t.Parallel()
	require.NoError(t, workspace.CheckGit(context.Background(), ""), "this machine's git")

	for _, ok := range []string{"git version 2.32.0", "git version 2.39.5", "git version 2.45.2 (Apple Git-154)",
		"git version 2.47.1.windows.1", "git version 3.0", "git version 2.40"} {
		require.NoError(t, workspace.CheckGit(context.Background(), fakeGit(t, ok)), ok)
	}

	for _, old := range []string{"git version 2.31.8", "git version 2.25.1", "git version 1.9.9"} {
		err := workspace.CheckGit(context.Background(), fakeGit(t, old))
		require.ErrorIs(t, err, workspace.ErrGitTooOld, old)
		var ve *workspace.GitVersionError
		require.ErrorAs(t, err, &ve)
		require.Equal(t, workspace.MinGitVersion, ve.Required)
		require.Contains(t, err.Error(), "older than 2.32.0")
		require.Contains(t, err.Error(), "install git 2.32.0 or later")
	}

	for _, odd := range []string{"hub version 2.14.2", "", "git version x.y"} {
		err := workspace.CheckGit(context.Background(), fakeGit(t, odd))
		require.ErrorIs(t, err, workspace.ErrGitVersionUnknown, odd)
		require.Contains(t, err.Error(), "install git 2.32.0 or later")
	}

	err := workspace.CheckGit(context.Background(), filepath.Join(t.TempDir(), "no-git"))
	require.Error(t, err)
	require.NotErrorIs(t, err, workspace.ErrGitTooOld)
}
