package secretprofile

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Values that must never appear in any error string.
const (
	secretA = "sk-live-4f1c9e2b7a"
	secretB = "hunter2-pass"
)

// writeResolver writes an executable #!/bin/sh script into a fresh temp dir.
//
// The file is written by a child process, not by this one: a write descriptor open in
// the test process would be inherited by a resolver another parallel test forks at that
// moment, and exec of the script would then fail with ETXTBSY (golang/go#22315).
func writeResolver(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "resolve")
	cmd := exec.Command("/bin/sh", "-c", `cat > "$0" && chmod 700 "$0"`, p)
	cmd.Stdin = strings.NewReader("#!/bin/sh\n" + body)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	return p
}

func requireNoSecret(t *testing.T, err error) {
	t.Helper()
	require.Error(t, err)
	for _, s := range []string{secretA, secretB, "4f1c9e2b7a", "hunter2"} {
		require.NotContains(t, err.Error(), s)
	}
}

// Not parallel: it sets an env var to prove the resolver does not inherit it.
func TestResolve_Good(t *testing.T) {
	p := writeResolver(t, `
# comment line
printf 'API_KEY=`+secretA+`\n'
echo
echo "  # indented comment"
printf 'DB_PASSWORD=`+secretB+`=with=equals\r\n'
echo "EMPTY="
echo "_UNDERSCORE_1=x y z"
echo "PROFILE=$PI_SECRET_PROFILE"
echo "HAS_HOME=${HOME:+yes}"
echo "LEAKED=${VALKEY_PASSWORD:-none}"
echo "CWD=$(pwd)"
echo "STDIN=$(cat)"
echo "noise on stderr: `+secretA+`" >&2
`)
	t.Setenv("VALKEY_PASSWORD", "must-not-reach-the-resolver")
	got, err := Resolve(context.Background(), p, "prod", 5*time.Second)
	require.NoError(t, err)
	require.Equal(t, map[string]string{
		"API_KEY":       secretA,
		"DB_PASSWORD":   secretB + "=with=equals",
		"EMPTY":         "",
		"_UNDERSCORE_1": "x y z",
		"PROFILE":       "prod",
		"HAS_HOME":      "yes",
		"LEAKED":        "none",
		"CWD":           "/",
		"STDIN":         "",
	}, got)
}

func TestResolve_Failures(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		script string
		want   string // fragment of the reason
		code   int
	}{
		{"Malformed", "echo 'API_KEY=" + secretA + "'\necho '" + secretB + "'\n", "line 2: not a KEY=VALUE line", -1},
		{"LowercaseKey", "echo 'api_key=" + secretA + "'\n", "line 1: key must match", -1},
		{"SpaceInKey", "echo 'API KEY=" + secretA + "'\n", "line 1: key must match", -1},
		{"Export", "echo 'export API_KEY=" + secretA + "'\n", "line 1: key must match", -1},
		{"LeadingDigit", "echo '# ok'\necho '1KEY=" + secretB + "'\n", "line 2: key must match", -1},
		{"Duplicate", "echo 'A=" + secretA + "'\necho 'B=1'\necho 'A=" + secretB + "'\n", "line 3: key already set on line 1", -1},
		{"NulInValue", "printf 'A=" + secretA + "\\000" + secretB + "\\n'\n", "line 1: value contains a NUL byte", -1},
		{"NonZeroExit", "echo 'A=" + secretA + "'\necho '" + secretB + "' >&2\nexit 3\n", "exited with code 3", 3},
		{"ExitAfterGarbage", "echo '" + secretB + "'\nexit 1\n", "exited with code 1", 1},
		{"KilledBySignal", "echo 'A=" + secretA + "'\nkill -TERM $$\n", "killed by signal", -1},
		{"HugeOutput", "while :; do echo 'A_VERY_LONG_KEY_NAME=" + secretA + secretB + "'; done\n", "more than 65536 bytes", -1},
		{"TooManyKeys", "i=0; while [ $i -lt 300 ]; do echo \"K$i=" + secretA + "\"; i=$((i+1)); done\n", "line 257: more than 256 secrets", -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := writeResolver(t, tt.script)
			got, err := Resolve(context.Background(), p, "prod", 5*time.Second)
			require.Nil(t, got)
			requireNoSecret(t, err)
			var se *Error
			require.ErrorAs(t, err, &se)
			require.Equal(t, "prod", se.Profile)
			require.Equal(t, tt.code, se.ExitCode)
			require.Contains(t, se.Reason, tt.want)
			require.True(t, strings.HasPrefix(err.Error(), `secret profile "prod": `), err.Error())
		})
	}
}

func TestResolve_TimeoutKillsTheGroup(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "sleep.pid")
	p := writeResolver(t, "echo 'A="+secretA+"'\nsleep 5 &\necho $! > '"+pidFile+"'\nwait\n")
	start := time.Now()
	_, err := Resolve(context.Background(), p, "slow", 200*time.Millisecond)
	elapsed := time.Since(start)
	requireNoSecret(t, err)
	require.Less(t, elapsed, time.Second, "a timed-out resolver must not hold the job")
	var se *Error
	require.ErrorAs(t, err, &se)
	require.Contains(t, se.Reason, "timed out after 200ms")

	data, err := os.ReadFile(pidFile)
	require.NoError(t, err)
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return processGone(pid) }, 2*time.Second, 20*time.Millisecond,
		"the resolver's child (pid %d) outlived the timeout", pid)
}

// A resolver whose background child keeps stdout open cannot finish: it times out, and
// the child dies with it.
func TestResolve_ChildHoldingStdout(t *testing.T) {
	t.Parallel()
	pidFile := filepath.Join(t.TempDir(), "bg.pid")
	p := writeResolver(t, "sleep 5 &\necho $! > '"+pidFile+"'\necho 'A="+secretA+"'\nexit 0\n")
	start := time.Now()
	_, err := Resolve(context.Background(), p, "bg", 300*time.Millisecond)
	requireNoSecret(t, err)
	require.Contains(t, err.Error(), "timed out")
	require.Less(t, time.Since(start), 1500*time.Millisecond)
	data, err := os.ReadFile(pidFile)
	require.NoError(t, err)
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return processGone(pid) }, 2*time.Second, 20*time.Millisecond)
}

// A resolver that exits cleanly but leaves a background child holding nothing open
// still leaves no process behind.
func TestResolve_NoStragglerAfterCleanExit(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "bg.pid")
	p := writeResolver(t, "sleep 5 >/dev/null 2>&1 &\necho $! > '"+pidFile+"'\necho 'A=1'\n")
	got, err := Resolve(context.Background(), p, "bg", 2*time.Second)
	require.NoError(t, err)
	require.Equal(t, map[string]string{"A": "1"}, got)
	data, err := os.ReadFile(pidFile)
	require.NoError(t, err)
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return processGone(pid) }, 2*time.Second, 20*time.Millisecond)
}

// processGone: no such process, or a zombie waiting for a reaper that is not us.
func processGone(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return true
	}
	if runtime.GOOS != "linux" {
		return false
	}
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	// pid (comm) S ...: the state follows the last ')'.
	s := string(stat)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] == 'Z'
}

func TestResolve_ContextCancel(t *testing.T) {
	t.Parallel()
	p := writeResolver(t, "sleep 5\n")
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	start := time.Now()
	_, err := Resolve(ctx, p, "prod", 10*time.Second)
	require.ErrorIs(t, err, context.Canceled)
	require.Less(t, time.Since(start), time.Second)

	_, err = Resolve(ctx, p, "prod", time.Second) // already cancelled: never started
	require.ErrorIs(t, err, context.Canceled)
}

func TestResolve_RefusesBadInput(t *testing.T) {
	t.Parallel()
	good := writeResolver(t, "echo A=1\n")
	notExec := filepath.Join(t.TempDir(), "plain")
	require.NoError(t, os.WriteFile(notExec, []byte("#!/bin/sh\necho A=1\n"), 0o600))
	tests := []struct {
		name, path, profile string
		timeout             time.Duration
		want                string
	}{
		{"RelativePath", "resolve", "prod", time.Second, "absolute path"},
		{"UncleanPath", filepath.Dir(good) + "/./resolve", "prod", time.Second, "clean path"},
		{"BadProfile", good, "a,b", time.Second, "profile name must match"},
		{"ZeroTimeout", good, "prod", 0, "timeout must be positive"},
		{"Missing", filepath.Join(t.TempDir(), "absent"), "prod", time.Second, "cannot start resolver"},
		{"NotExecutable", notExec, "prod", time.Second, "cannot start resolver"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := Resolve(context.Background(), tt.path, tt.profile, tt.timeout)
			var se *Error
			require.ErrorAs(t, err, &se)
			require.Contains(t, se.Reason, tt.want)
		})
	}
}

func TestParseSecretLines(t *testing.T) {
	t.Parallel()
	got, n, rule := parseSecretLines([]byte("A=1\r\n\n# c\nB==\nC=a b\n"))
	require.Empty(t, rule)
	require.Zero(t, n)
	require.Equal(t, map[string]string{"A": "1", "B": "=", "C": "a b"}, got)

	got, _, rule = parseSecretLines(nil)
	require.Empty(t, rule)
	require.NotNil(t, got)
	require.Empty(t, got)
}

func FuzzParseSecretLines(f *testing.F) {
	f.Add([]byte("A=" + secretA + "\nB=" + secretB + "\n"))
	f.Add([]byte(secretA + "\n"))
	f.Add([]byte("a=" + secretB))
	f.Add([]byte("A=1\nA=" + secretA))
	f.Add([]byte("A=\x00" + secretA))
	f.Fuzz(func(t *testing.T, out []byte) {
		_, n, rule := parseSecretLines(out)
		if rule == "" {
			return
		}
		if n < 0 || n > strings.Count(string(out), "\n")+1 {
			t.Fatalf("line number %d out of range", n)
		}
		// The rule is fixed text plus numbers: no byte of the input reaches it.
		for _, r := range rule {
			if r >= '0' && r <= '9' {
				continue
			}
			if !strings.ContainsRune("abcdefghijklmnopqrstuvwxyzAKEYVLUZNU^[]_*$=- ", r) {
				t.Fatalf("unexpected character %q in rule %q", r, rule)
			}
		}
	})
}

// Not parallel, so the goroutine count is this test's own: every path of
// Resolve returns with the exec machinery finished.
func TestResolve_NoGoroutineLeak(t *testing.T) {
	before := runtime.NumGoroutine()
	ok := writeResolver(t, "echo A=1\n")
	slow := writeResolver(t, "sleep 5\n")
	held := writeResolver(t, "sleep 5 &\necho A=1\n")
	loud := writeResolver(t, "while :; do echo A=1; done\n")
	for _, p := range []string{ok, slow, held, loud} {
		_, _ = Resolve(context.Background(), p, "prod", 150*time.Millisecond)
	}
	// Polled by hand: require.Eventually runs its condition on a goroutine of its own.
	deadline := time.Now().Add(2 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	require.LessOrEqual(t, runtime.NumGoroutine(), before, "a goroutine outlived Resolve")
}
