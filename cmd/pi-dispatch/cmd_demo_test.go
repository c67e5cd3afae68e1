package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/fleetstate"
	"github.com/pidispatch/pidispatch/internal/image/jobimage"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/jobs"
	"github.com/pidispatch/pidispatch/registry"
)

var (
	demoWorkspaceRE = regexp.MustCompile(`(?m)^workspace: (.+)$`)
	demoWorkerRE    = regexp.MustCompile(`(?m)^started worker (\S+) `)
	demoRecordRE    = regexp.MustCompile(`(?s)\nrun record \([^)]*\):\n(\{.*?\n\})\n`)
)

// demoOutcome checks what a successful demo printed and left behind: the run
// record of a completed job with telemetry, the file it wrote, the folders
// removed, and no container of the demo's worker.
func demoOutcome(t *testing.T, docker *client.Client, r result) {
	t.Helper()
	if r.code != exitOK {
		t.Fatalf("demo exited %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	m := demoRecordRE.FindStringSubmatch(r.stdout)
	if m == nil {
		t.Fatalf("no run record in stdout:\n%s", r.stdout)
	}
	var rec jobs.Record
	if err := json.Unmarshal([]byte(m[1]), &rec); err != nil {
		t.Fatalf("record %q: %v", m[1], err)
	}
	if rec.Outcome != jobs.OutcomeCompleted || rec.Reason != jobs.ReasonCompleted || rec.ExitCode == nil || *rec.ExitCode != 0 {
		t.Fatalf("record is not a completed run: %+v", rec)
	}
	var tele struct{ Tokens int }
	if err := json.Unmarshal(rec.Telemetry, &tele); err != nil || rec.Kind != jobs.KindLocal || rec.Flow != demoFlow || tele.Tokens != 1234 {
		t.Fatalf("record does not describe the demo job: %+v telemetry %s", rec, rec.Telemetry)
	}
	if !strings.Contains(r.stdout, `"outcome": "completed"`) {
		t.Fatalf("record is not printed indented:\n%s", r.stdout)
	}
	if !strings.Contains(r.stdout, "the job wrote hello.txt in the workspace:\n  written by jobprog") {
		t.Fatalf("stdout does not show the file the job wrote:\n%s", r.stdout)
	}
	for _, want := range []string{"what to try next", "is kept for next time"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("stdout lacks %q", want)
		}
	}

	ws := demoWorkspaceRE.FindStringSubmatch(r.stdout)
	if ws == nil {
		t.Fatalf("stdout names no workspace:\n%s", r.stdout)
	}
	root := filepath.Dir(ws[1])
	if !strings.HasPrefix(filepath.Base(root), "pidispatch-demo-") {
		t.Fatalf("workspace %s is not in a demo folder", ws[1])
	}
	if _, err := os.Stat(root); !os.IsNotExist(err) {
		t.Errorf("demo folder %s is still there (err %v)", root, err)
	}

	wm := demoWorkerRE.FindStringSubmatch(r.stdout)
	if wm == nil {
		t.Fatalf("stdout names no worker:\n%s", r.stdout)
	}
	if rec.Host != wm[1] {
		t.Errorf("record host %q, worker %q", rec.Host, wm[1])
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	list, err := docker.ContainerList(ctx, client.ContainerListOptions{
		All: true, Filters: make(client.Filters).Add("label", "dev.pidispatch.worker="+wm[1]),
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 0 {
		t.Errorf("%d container(s) of worker %s left behind", len(list.Items), wm[1])
	}
}

// goroutinesSettle fails the test when more goroutines run than before, once
// a few seconds have passed for connections to wind down.
func goroutinesSettle(t *testing.T, before int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		buf := make([]byte, 1<<20)
		t.Fatalf("%d goroutines after the demo, %d before:\n%s", n, before, buf[:runtime.Stack(buf, true)])
	}
}

func TestDemo_EmbeddedStore(t *testing.T) {
	docker := livetest.Docker(t)
	before := runtime.NumGoroutine()
	r := runCLI(t, nil, "demo")
	demoOutcome(t, docker, r)
	if !strings.Contains(r.stdout, "EMBEDDED IN-MEMORY store") || !strings.Contains(r.stdout, "never a worker in production") ||
		!strings.Contains(r.stdout, "VALKEY_URL=redis://") {
		t.Fatalf("no embedded-store banner:\n%s", r.stdout)
	}
	goroutinesSettle(t, before)
}

func TestDemo_GivenValkey(t *testing.T) {
	docker := livetest.Docker(t)
	db := livetest.Valkey(t)
	// A key of another application is no reason to refuse, and is left alone.
	ctx := context.Background()
	if err := db.Client.Set(ctx, "someapp:counter", "7", 0).Err(); err != nil {
		t.Fatal(err)
	}
	before := runtime.NumGoroutine()
	r := runCLI(t, map[string]string{"VALKEY_URL": db.URL, "PI_UNSIGNED_QUEUES": "*"}, "demo")
	demoOutcome(t, docker, r)
	goroutinesSettle(t, before)
	if strings.Contains(r.stdout, "EMBEDDED") {
		t.Errorf("the banner of the embedded store shows with VALKEY_URL set:\n%s", r.stdout)
	}
	if !strings.Contains(r.stdout, "using database ") {
		t.Errorf("stdout does not say which database it used:\n%s", r.stdout)
	}
	// The demo removed every key it created, and only those.
	keys, err := db.Client.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 1 || keys[0] != "someapp:counter" {
		t.Fatalf("keys left in the database: %v", keys)
	}
	// A second demo on the same database is accepted: nothing was left behind.
	if r2 := runCLI(t, map[string]string{"VALKEY_URL": db.URL, "PI_UNSIGNED_QUEUES": "*"}, "demo"); r2.code != exitOK {
		t.Fatalf("second demo exited %d: %s", r2.code, r2.stderr)
	}
}

func TestDemo_KeepLeavesTheFolders(t *testing.T) {
	livetest.Docker(t)
	db := livetest.Valkey(t)
	r := runCLI(t, map[string]string{"VALKEY_URL": db.URL, "PI_UNSIGNED_QUEUES": "*"}, "demo", "--keep")
	if r.code != exitOK {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	m := regexp.MustCompile(`(?m)^kept the demo's folders \(--keep\): (\S+)$`).FindStringSubmatch(r.stdout)
	if m == nil {
		t.Fatalf("stdout does not say where the folders are:\n%s", r.stdout)
	}
	t.Cleanup(func() { _ = os.RemoveAll(m[1]) })
	records, _ := filepath.Glob(filepath.Join(m[1], "logs", "*+local-*.json"))
	if len(records) != 1 {
		t.Fatalf("run records kept: %v", records)
	}
	if _, err := os.Stat(filepath.Join(m[1], "workspace", demoFile)); err != nil {
		t.Fatal(err)
	}
}

// A job that does not complete makes the demo exit 1 and say why.
func TestDemo_FailedJobExits1(t *testing.T) {
	livetest.Docker(t)
	db := livetest.Valkey(t)
	var out, errOut bytes.Buffer
	vars := map[string]string{"VALKEY_URL": db.URL}
	d := &demo{e: env{getenv: func(k string) string { return vars[k] }, stdout: &out, stderr: &errOut},
		timeout: time.Minute, task: "Refuse.\nJOB_EXIT_CODE=2"}
	if code := d.run(context.Background()); code != exitFailure {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out.String(), errOut.String())
	}
	if !strings.Contains(errOut.String(), "the job did not complete: outcome policy, reason policy") {
		t.Fatalf("stderr: %s", errOut.String())
	}
	if !strings.Contains(out.String(), `"outcome": "policy"`) || strings.Contains(out.String(), "what to try next") {
		t.Fatalf("stdout:\n%s", out.String())
	}
}

func TestDemo_RefusesADeploymentsDatabase(t *testing.T) {
	for _, key := range []string{"bull:pi-jobs:meta", registry.LiveKey, "bull:pi-jobs@web-1:id", fleetstate.PausedKey} {
		t.Run(key, func(t *testing.T) {
			db := livetest.Valkey(t)
			ctx := context.Background()
			if err := db.Client.Set(ctx, key, "x", 0).Err(); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			r := runCLI(t, map[string]string{"VALKEY_URL": db.URL, "PI_UNSIGNED_QUEUES": "*"}, "demo")
			if r.code != exitUsage {
				t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", r.code, exitUsage, r.stdout, r.stderr)
			}
			for _, want := range []string{"refusing database", key, "point VALKEY_URL at an empty database, e.g. redis://host:6379/15"} {
				if !strings.Contains(r.stderr, want) {
					t.Errorf("stderr lacks %q:\n%s", want, r.stderr)
				}
			}
			if strings.Contains(r.stdout, "building") || strings.Contains(r.stdout, "workspace:") {
				t.Errorf("the demo went on after refusing:\n%s", r.stdout)
			}
			if d := time.Since(start); d > 20*time.Second { // before any build: a hang-catching bound
				t.Errorf("refusal took %s", d)
			}
			keys, err := db.Client.Keys(ctx, "*").Result()
			if err != nil {
				t.Fatal(err)
			}
			if len(keys) != 1 || keys[0] != key {
				t.Fatalf("the refused database was changed: %v", keys)
			}
		})
	}
}

func TestDemo_BadInvocations(t *testing.T) {
	tests := []struct {
		name string
		vars map[string]string
		args []string
		code int
		want string
	}{
		{"ExtraArgument", nil, []string{"demo", "now"}, exitUsage, `unexpected argument "now"`},
		{"BadTimeout", nil, []string{"demo", "--timeout", "0s"}, exitUsage, "--timeout must be positive"},
		{"UnknownFlag", nil, []string{"demo", "--fast"}, exitUsage, "flag provided but not defined"},
		{"NotAURL", map[string]string{"VALKEY_URL": "http://u:hunter2@example.com", "PI_UNSIGNED_QUEUES": "*"}, []string{"demo"}, exitUsage, "is not a redis://, rediss:// or unix:// URL"},
		{"Unreachable", map[string]string{"VALKEY_URL": "redis://127.0.0.1:1/15", "PI_UNSIGNED_QUEUES": "*"}, []string{"demo"}, exitFailure, "could not check database 15"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := runCLI(t, tt.vars, tt.args...)
			if r.code != tt.code || !strings.Contains(r.stderr, tt.want) {
				t.Fatalf("exit %d (want %d), stderr %q (want %q)", r.code, tt.code, r.stderr, tt.want)
			}
			if strings.Contains(r.stderr, "hunter2") || strings.Contains(r.stdout, "hunter2") {
				t.Fatal("the password was printed")
			}
		})
	}
}

// The first demo on a machine builds the image: it says so, says nothing is
// pulled, and reports how long the build took. A tag of its own keeps the
// shared test image untouched.
func TestDemo_BuildsAMissingImage(t *testing.T) {
	docker := livetest.Docker(t)
	tag := fmt.Sprintf("pidispatch-demo-build-test:%d", time.Now().UnixNano())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = docker.ImageRemove(ctx, tag, client.ImageRemoveOptions{Force: true})
	})
	var out, errOut bytes.Buffer
	d := &demo{e: env{getenv: func(string) string { return "" }, stdout: &out, stderr: &errOut}, timeout: time.Minute}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := d.ensureImage(ctx, docker, tag); err != nil {
		t.Fatalf("ensureImage: %v\n%s", err, errOut.String())
	}
	if !regexp.MustCompile(`(?s)^building the demo job image \S+ \(nothing is pulled\)\.\.\.\n.*built \S+ in \d+s\n$`).MatchString(out.String()) {
		t.Fatalf("build progress:\n%s", out.String())
	}
	img, err := docker.ImageInspect(ctx, tag)
	if err != nil {
		t.Fatal(err)
	}
	if img.Config == nil || img.Config.Labels[jobimage.SourceLabel] != jobimage.SourceDigest() {
		t.Fatalf("image labels %v", img.Config)
	}
	// The second time, nothing is built.
	out.Reset()
	if err := d.ensureImage(ctx, docker, tag); err != nil {
		t.Fatal(err)
	}
	if got := out.String(); got != "job image "+tag+" is ready (built earlier)\n" {
		t.Fatalf("second ensure printed %q", got)
	}
}

func TestDemo_Timeout(t *testing.T) {
	livetest.Docker(t)
	r := runCLI(t, nil, "demo", "--timeout", "1ms")
	if r.code != exitFailure || !strings.Contains(r.stderr, "gave up after 1ms (--timeout)") {
		t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
	}
}

func TestDemoWorkerName(t *testing.T) {
	tests := []struct {
		host string
		pid  int
		want string
	}{
		{"vm", 42, "demo-vm-42"},
		{"build-box.example.com", 7, "demo-build-box.example.com-7"},
		{strings.Repeat("a", 64), 1234567, "demo-" + strings.Repeat("a", 51) + "-1234567"},
		{strings.Repeat("a", 50) + "-.b", 1234567, "demo-" + strings.Repeat("a", 50) + "-1234567"},
		{"", 9, "demo-9"},
		{"-.-", 9, "demo-9"},
	}
	for _, tt := range tests {
		got := demoWorkerName(tt.host, tt.pid)
		if got != tt.want {
			t.Errorf("demoWorkerName(%q, %d) = %q, want %q", tt.host, tt.pid, got, tt.want)
		}
		if err := fleet.ValidateName(got); err != nil || len(got) > 64 {
			t.Errorf("demoWorkerName(%q, %d) = %q is not a valid name: %v", tt.host, tt.pid, got, err)
		}
	}
}
