package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// connRecorder is a TCP or unix listener that counts the clients that
// connected to it.
type connRecorder struct {
	ln       net.Listener
	accepted atomic.Int32
	done     chan struct{}
}

func listenRecorder(t *testing.T, network, addr string) *connRecorder {
	t.Helper()
	ln, err := net.Listen(network, addr)
	if err != nil {
		t.Fatal(err)
	}
	r := &connRecorder{ln: ln, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			r.accepted.Add(1)
			_ = c.Close()
		}
	}()
	t.Cleanup(r.close)
	return r
}

// close stops listening after a moment for connections still in flight,
// and returns how many clients connected.
func (r *connRecorder) close() {
	time.Sleep(50 * time.Millisecond)
	_ = r.ln.Close()
	<-r.done
}

// assertEmpty fails when dir holds anything.
func assertEmpty(t *testing.T, what, dir string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatalf("%s %s: %v", what, dir, err)
	}
	for _, e := range entries {
		t.Errorf("%s %s: %s was created", what, dir, e.Name())
	}
}

// argsGuard is how long an argument-only run may take before it counts as a
// worker that started: far above the ~0.3 s it takes, so load cannot fail it.
const argsGuard = 10 * time.Second

// worker --help, -h, help and --version print and exit 0 at once,
// and any other argument exits 2; none of them connects to Valkey or Docker
// or creates anything on disk. The built binary is run, so its environment,
// working directory and home are the test's own temporary folders.
func TestArgumentsStartNothing(t *testing.T) {
	t.Parallel()
	bin := workerBinary(t)
	for _, tc := range []struct {
		args       []string
		code       int
		out, inErr string
	}{
		{[]string{"--help"}, exitOK, "usage: worker", ""},
		{[]string{"-h"}, exitOK, "docs/configuration.md", ""},
		{[]string{"help"}, exitOK, "VALKEY_URL", ""},
		{[]string{"--version"}, exitOK, "worker ", ""},
		{[]string{"--frobnicate"}, exitConfig, "", `unexpected argument "--frobnicate"`},
		{[]string{"run"}, exitConfig, "", "nothing started"},
		{[]string{"--help", "extra"}, exitConfig, "", "takes no arguments"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			valkey := listenRecorder(t, "tcp", "127.0.0.1:0")
			docker := listenRecorder(t, "unix", filepath.Join(t.TempDir(), "docker.sock"))
			cwd, home, tmp, state := t.TempDir(), t.TempDir(), t.TempDir(), t.TempDir()
			logs := filepath.Join(t.TempDir(), "records") // must not be created
			cmd := exec.Command(bin, tc.args...)
			cmd.Dir = cwd
			cmd.Env = []string{
				"PATH=" + os.Getenv("PATH"), "HOME=" + home, "TMPDIR=" + tmp, "XDG_STATE_HOME=" + state,
				"VALKEY_URL=redis://" + valkey.ln.Addr().String() + "/0",
				"DOCKER_HOST=unix://" + docker.ln.Addr().String(),
				"PI_LOGS_DIR=" + logs, "PI_WORKER_NAME=args-test",
			}
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			// A worker that boots never exits by itself, and it connects (the
			// recorders below fail that), so the guard only has to outlast a
			// slow start on a loaded machine; the time taken is logged.
			start := time.Now()
			exited := make(chan error, 1)
			go func() { exited <- cmd.Wait() }()
			select {
			case <-exited:
				t.Logf("worker %v exited after %s", tc.args, time.Since(start).Round(time.Millisecond))
			case <-time.After(argsGuard):
				_ = cmd.Process.Kill()
				<-exited
				t.Fatalf("worker %v still running after %s:\n%s", tc.args, argsGuard, stderr.String())
			}
			if code := cmd.ProcessState.ExitCode(); code != tc.code {
				t.Fatalf("exit %d, want %d\nstdout %s\nstderr %s", code, tc.code, stdout.String(), stderr.String())
			}
			if !strings.Contains(stdout.String(), tc.out) || !strings.Contains(stderr.String(), tc.inErr) {
				t.Fatalf("stdout %q (want %q)\nstderr %q (want %q)", stdout.String(), tc.out, stderr.String(), tc.inErr)
			}
			if tc.code == exitOK && stderr.Len() > 0 {
				t.Errorf("stderr not empty: %s", stderr.String())
			}
			valkey.close()
			docker.close()
			if n := valkey.accepted.Load(); n != 0 {
				t.Errorf("%d Valkey connection(s)", n)
			}
			if n := docker.accepted.Load(); n != 0 {
				t.Errorf("%d Docker connection(s)", n)
			}
			for what, dir := range map[string]string{"cwd": cwd, "HOME": home, "TMPDIR": tmp, "XDG_STATE_HOME": state} {
				assertEmpty(t, what, dir)
			}
			if _, err := os.Stat(logs); !os.IsNotExist(err) {
				t.Errorf("PI_LOGS_DIR %s: %v, want it not created", logs, err)
			}
		})
	}
}

// The in-process run takes the same arguments.
func TestRunHelpAndVersion(t *testing.T) {
	t.Parallel()
	never := func(k string) string { t.Errorf("read %s from the environment", k); return "" }
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"--help"}, never, &out, &errOut); code != exitOK || !strings.Contains(out.String(), "PI_WORKER_NAME") {
		t.Fatalf("--help: exit %d, %q %q", code, out.String(), errOut.String())
	}
	out.Reset()
	if code := run(context.Background(), []string{"--version"}, never, &out, &errOut); code != exitOK || !strings.HasPrefix(out.String(), "worker ") {
		t.Fatalf("--version: exit %d, %q", code, out.String())
	}
	if code := run(context.Background(), []string{"-x"}, never, &out, &errOut); code != exitConfig {
		t.Fatalf("-x: exit %d", code)
	}
}

// A logs folder the worker cannot create or write refuses boot with exit 2
// and the fix, before anything connects: systemd's RestartPreventExitStatus=2
// then stops restarting it.
func TestUnwritableLogsDirRefusesBoot(t *testing.T) {
	t.Parallel()
	valkey := listenRecorder(t, "tcp", "127.0.0.1:0")
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{
		"VALKEY_URL": "redis://" + valkey.ln.Addr().String() + "/0", "PI_UNSIGNED_QUEUES": "*",
		"PI_LOGS_DIR": filepath.Join(file, "runs"),
	}
	var stderr bytes.Buffer
	code := run(context.Background(), nil, func(k string) string { return env[k] }, io.Discard, &stderr)
	if code != exitConfig || !strings.Contains(stderr.String(), "PI_LOGS_DIR") || !strings.Contains(stderr.String(), "install -d") {
		t.Fatalf("exit %d, stderr %q; want 2 naming PI_LOGS_DIR and the fix", code, stderr.String())
	}
	valkey.close()
	if n := valkey.accepted.Load(); n != 0 {
		t.Errorf("%d Valkey connection(s) before the refusal", n)
	}
}
