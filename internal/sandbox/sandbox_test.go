package sandbox

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// writeScript writes an executable #!/bin/sh script into a fresh temp dir. A
// child process writes it, so no write descriptor of this process is inherited
// by a script another parallel test starts (ETXTBSY, golang/go#22315).
func writeScript(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "helper")
	cmd := exec.Command("/bin/sh", "-c", `cat > "$0" && chmod 700 "$0"`, p)
	cmd.Stdin = strings.NewReader("#!/bin/sh\n" + body)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("write script: %v: %s", err, out)
	}
	return p
}

func run(t *testing.T, body string, spec Spec) Result {
	t.Helper()
	spec.Path = writeScript(t, body)
	if spec.Timeout == 0 {
		spec.Timeout = 5 * time.Second
	}
	return Run(context.Background(), spec)
}

// gone: no such process, or a zombie waiting for a reaper that is not us.
func gone(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return true
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] == 'Z'
}

func requireGone(t *testing.T, pidFile string) {
	t.Helper()
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(3 * time.Second)
	for !gone(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("the helper's child (pid %d) outlived it", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestRun_ExitCodesAndOutput(t *testing.T) {
	t.Parallel()
	res := run(t, "echo out\necho err >&2\n", Spec{MaxOutput: 100})
	if res.Outcome != Exited || res.ExitCode != 0 || string(res.Stdout) != "out\n" {
		t.Fatalf("clean exit: %+v", res)
	}
	res = run(t, "echo secret\nexit 3\n", Spec{MaxOutput: 100})
	if res.Outcome != Exited || res.ExitCode != 3 || res.Stdout != nil {
		t.Fatalf("exit 3: %+v (output is kept only on exit 0)", res)
	}
	res = run(t, "echo discarded\n", Spec{})
	if res.Outcome != Exited || res.ExitCode != 0 || res.Stdout != nil {
		t.Fatalf("MaxOutput 0 discards stdout: %+v", res)
	}
	res = run(t, "kill -TERM $$\n", Spec{})
	if res.Outcome != Signaled || res.Signal != syscall.SIGTERM || res.ExitCode != -1 {
		t.Fatalf("signal: %+v", res)
	}
}

// Not parallel: it sets a variable of its own to prove the helper does not
// inherit it.
func TestRun_MinimalEnvironmentArgsStdinCwd(t *testing.T) {
	t.Setenv("SANDBOX_LEAK_PROBE", "leaked")
	out := filepath.Join(t.TempDir(), "seen")
	res := run(t, `{ for a in "$@"; do printf '[%s]' "$a"; done; echo; env | sort; pwd; cat; } > "`+out+`"`+"\n",
		Spec{Args: []string{"$(touch /tmp/pwned)", "a b", ""}, Env: []string{"PI_PROFILE=ci"}})
	if res.Outcome != Exited || res.ExitCode != 0 {
		t.Fatalf("%+v", res)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if lines[0] != "[$(touch /tmp/pwned)][a b][]" {
		t.Errorf("args: %s", lines[0])
	}
	if lines[len(lines)-1] != "/" {
		t.Errorf("cwd: %s", lines[len(lines)-1])
	}
	allowed := map[string]bool{"HOME": true, "PATH": true, "PI_PROFILE": true, "PWD": true, "SHLVL": true, "_": true}
	for _, l := range lines[1 : len(lines)-1] {
		if k, _, _ := strings.Cut(l, "="); !allowed[k] {
			t.Errorf("unexpected variable %s", l)
		}
	}
	if !strings.Contains(string(b), "PI_PROFILE=ci\n") {
		t.Errorf("caller's variable missing:\n%s", b)
	}
}

func TestRun_OutputBound(t *testing.T) {
	t.Parallel()
	start := time.Now()
	res := run(t, "while :; do echo 0123456789; done\n", Spec{MaxOutput: 1000})
	if res.Outcome != TooMuchOutput || res.Stdout != nil {
		t.Fatalf("%+v", res)
	}
	if time.Since(start) > 3*time.Second {
		t.Errorf("a chatty helper was not killed at once (%s)", time.Since(start))
	}
	res = run(t, "printf 0123456789\n", Spec{MaxOutput: 10})
	if res.Outcome != Exited || string(res.Stdout) != "0123456789" {
		t.Fatalf("exactly MaxOutput bytes is fine: %+v", res)
	}
}

func TestRun_TimeoutKillsTheGroup(t *testing.T) {
	t.Parallel()
	pidFile := filepath.Join(t.TempDir(), "pid")
	start := time.Now()
	res := run(t, "sleep 30 &\necho $! > "+pidFile+"\nwait\n", Spec{Timeout: 300 * time.Millisecond})
	if res.Outcome != TimedOut {
		t.Fatalf("%+v", res)
	}
	if time.Since(start) > 2*time.Second {
		t.Errorf("took %s", time.Since(start))
	}
	requireGone(t, pidFile)
}

// A child that keeps stdout open cannot hold the run past its timeout.
func TestRun_ChildHoldingStdout(t *testing.T) {
	t.Parallel()
	pidFile := filepath.Join(t.TempDir(), "pid")
	res := run(t, "sleep 30 &\necho $! > "+pidFile+"\necho A=1\nexit 0\n", Spec{MaxOutput: 100, Timeout: 300 * time.Millisecond})
	if res.Outcome != TimedOut || res.Stdout != nil {
		t.Fatalf("%+v", res)
	}
	requireGone(t, pidFile)
}

func TestRun_NoStragglerAfterCleanExit(t *testing.T) {
	t.Parallel()
	pidFile := filepath.Join(t.TempDir(), "pid")
	res := run(t, "sleep 30 >/dev/null 2>&1 &\necho $! > "+pidFile+"\n", Spec{})
	if res.Outcome != Exited || res.ExitCode != 0 {
		t.Fatalf("%+v", res)
	}
	requireGone(t, pidFile)
}

func TestRun_Cancel(t *testing.T) {
	t.Parallel()
	p := writeScript(t, "sleep 30\n")
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	res := Run(ctx, Spec{Path: p, Timeout: 10 * time.Second})
	if res.Outcome != Cancelled || !errors.Is(res.Err, context.Canceled) {
		t.Fatalf("during: %+v", res)
	}
	res = Run(ctx, Spec{Path: p, Timeout: time.Second})
	if res.Outcome != Cancelled || !errors.Is(res.Err, context.Canceled) {
		t.Fatalf("before: %+v", res)
	}
}

func TestRun_Refusals(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	if res := Run(ctx, Spec{Path: "relative/x", Timeout: time.Second}); res.Outcome != BadPath || res.Rule != "must be an absolute path" {
		t.Errorf("relative: %+v", res)
	}
	if res := Run(ctx, Spec{Path: "/bin/../bin/true", Timeout: time.Second}); res.Outcome != BadPath {
		t.Errorf("unclean: %+v", res)
	}
	if res := Run(ctx, Spec{Path: "/bin/true"}); res.Outcome != BadTimeout {
		t.Errorf("no timeout: %+v", res)
	}
	if res := Run(ctx, Spec{Path: "/nonexistent/x", Timeout: time.Second}); res.Outcome != StartFailed || res.Err == nil {
		t.Errorf("missing: %+v", res)
	}
	if res := Run(ctx, Spec{Path: "/bin/true", Args: []string{"a\x00b"}, Timeout: time.Second}); res.Outcome != StartFailed {
		t.Errorf("NUL arg: %+v", res)
	}
}
