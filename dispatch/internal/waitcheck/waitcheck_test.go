package waitcheck

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func writeScript(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "check")
	require.NoError(t, os.WriteFile(p, []byte("#!/bin/sh\n"+body), 0o700))
	return p
}

func TestRun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for code, want := range map[int]Result{0: Met, 1: NotYet, 2: Fault, 3: Fault, 127: Fault} {
		res, why, err := Run(ctx, writeScript(t, "exit "+strconv.Itoa(code)+"\n"), "jira", nil, 5*time.Second)
		require.NoError(t, err)
		require.Equal(t, want, res, "exit %d", code)
		if want == Fault {
			require.Equal(t, "exited with code "+strconv.Itoa(code), why)
		}
	}

	// Args verbatim (no shell), a minimal environment, stdin closed, cwd /.
	out := filepath.Join(t.TempDir(), "seen")
	script := writeScript(t, `{ for a in "$@"; do printf '[%s]' "$a"; done; echo; env | sort; pwd; cat; } > "`+out+`"`+"\n")
	res, why, err := Run(ctx, script, "ci.v2", []string{"$(touch /tmp/pwned)", "a b", "-x", ""}, 5*time.Second)
	require.NoError(t, err)
	require.Equal(t, Met, res, why)
	seen, err := os.ReadFile(out)
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(string(seen)), "\n")
	require.Equal(t, "[$(touch /tmp/pwned)][a b][-x][]", lines[0])
	var env []string
	for _, l := range lines[1 : len(lines)-1] {
		k, _, _ := strings.Cut(l, "=")
		env = append(env, k)
	}
	require.Subset(t, []string{"HOME", "PATH", "PI_WAIT_PROFILE", "PWD", "SHLVL", "_"}, env, "only PATH, HOME and the profile (and what sh adds)")
	require.Contains(t, string(seen), "PI_WAIT_PROFILE=ci.v2")
	require.NotContains(t, string(seen), "VALKEY_TEST_URL", "nothing of the worker's own environment")
	require.Equal(t, "/", lines[len(lines)-1])

	// A timeout is a fault, and the whole process group is killed.
	pidFile := filepath.Join(t.TempDir(), "pid")
	start := time.Now()
	res, why, err = Run(ctx, writeScript(t, "sleep 30 &\necho $! > "+pidFile+"\nwait\n"), "jira", nil, 300*time.Millisecond)
	require.NoError(t, err)
	require.Equal(t, Fault, res)
	require.Contains(t, why, "timed out after 300ms")
	require.Less(t, time.Since(start), 5*time.Second)
	pidText, err := os.ReadFile(pidFile)
	require.NoError(t, err)
	pid, err := strconv.Atoi(strings.TrimSpace(string(pidText)))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return syscall.Kill(pid, 0) == syscall.ESRCH || isZombie(pid) }, 5*time.Second, 20*time.Millisecond, "the check's child outlived it")

	// Bad setups are faults, never panics.
	for _, tt := range []struct{ path, profile, why string }{
		{"relative/check", "jira", "check path"},
		{"/nonexistent/check", "jira", "cannot start"},
		{script, "bad name", "invalid profile"},
	} {
		res, why, err := Run(ctx, tt.path, tt.profile, nil, time.Second)
		require.NoError(t, err)
		require.Equal(t, Fault, res)
		require.Contains(t, why, tt.why)
	}
	_, _, err = Run(ctx, script, "jira", []string{"a\x00b"}, time.Second)
	require.NoError(t, err, "a NUL in an arg cannot start: a fault, not an error")

	// The caller's ctx ending is an error: nothing was learned.
	cctx, cancel := context.WithCancel(ctx)
	go func() { time.Sleep(100 * time.Millisecond); cancel() }()
	_, _, err = Run(cctx, writeScript(t, "sleep 30\n"), "jira", nil, 10*time.Second)
	require.ErrorIs(t, err, context.Canceled)
}

// isZombie reports whether pid is a zombie (killed, not yet reaped by init).
func isZombie(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	f := strings.Fields(string(b))
	return len(f) > 2 && f[2] == "Z"
}
