package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/pidispatch/pidispatch/enqueue"
	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/fleetstate"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/jobs"
	"github.com/pidispatch/pidispatch/queue"
	"github.com/pidispatch/pidispatch/registry"
)

// gitRepo makes a git work tree with one committed file; dirty adds an
// untracked file.
func gitRepo(t *testing.T, dirty bool) string {
	t.Helper()
	dir := t.TempDir()
	git := func(args ...string) {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-C", dir, "-c", "user.name=test", "-c", "user.email=test@example.invalid", "-c", "commit.gpgsign=false"}, args...)...)
		cmd.Env = gitEnv(os.Environ())
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	git("init", "-q")
	if err := os.WriteFile(filepath.Join(dir, "README"), []byte("hello\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	git("add", "README")
	git("commit", "-q", "-m", "init")
	if dirty {
		if err := os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("wip\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

var queuedRE = regexp.MustCompile(`^queued (local-[0-9a-f]{16})( \(already queued this minute[^)]*\))?\n$`)

// queuedJob reads the job `run` printed from queueName and checks what it
// holds: the flow fix and the task "fix the tests".
func queuedJob(t *testing.T, db *livetest.ValkeyDB, queueName, stdout, folder string) string {
	t.Helper()
	id, job := queuedAny(t, db, queueName, stdout, folder)
	if job.Flow != "fix" || job.Task != "fix the tests" {
		t.Fatalf("queued job %+v", job)
	}
	return id
}

// queuedAny reads the job `run` printed from queueName: a local job of folder.
func queuedAny(t *testing.T, db *livetest.ValkeyDB, queueName, stdout, folder string) (string, jobs.Job) {
	t.Helper()
	m := queuedRE.FindStringSubmatch(stdout)
	if m == nil {
		t.Fatalf("stdout %q is not `queued <jobId>`", stdout)
	}
	q, err := queue.New(db.Client, queueName, queue.Config{})
	if err != nil {
		t.Fatal(err)
	}
	j, err := q.Get(context.Background(), m[1])
	if err != nil {
		t.Fatalf("job %s on %s: %v", m[1], queueName, err)
	}
	job, err := jobs.ParseJob(j.Data)
	if err != nil {
		t.Fatal(err)
	}
	if job.Kind != jobs.KindLocal || job.Folder != folder {
		t.Fatalf("queued job %+v", job)
	}
	return m[1], job
}

func dbEmpty(t *testing.T, db *livetest.ValkeyDB) {
	t.Helper()
	n, err := db.Client.DBSize(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		keys, _ := db.Client.Keys(context.Background(), "*").Result()
		t.Fatalf("something was written: %v", keys)
	}
}

func TestRunQueuesACleanFolderOnThisHostsQueue(t *testing.T) {
	db := livetest.Valkey(t)
	folder := gitRepo(t, false)
	vars := map[string]string{"VALKEY_URL": db.URL, "PI_UNSIGNED_QUEUES": "*", "PI_WORKER_NAME": "web", "PI_FOLDER_ROOTS": os.TempDir()}
	// Flags after the folder, and a relative spelling of it.
	rel, err := filepath.Rel(mustGetwd(t), folder)
	if err != nil {
		t.Fatal(err)
	}
	r := runCLI(t, vars, "run", rel+"/.", "--task", "fix the tests", "--flow", "fix", "--env-file", "")
	if r.code != exitOK {
		t.Fatalf("%+v", r)
	}
	id := queuedJob(t, db, "pi-jobs@web", r.stdout, folder)
	checkGolden(t, "run", strings.NewReplacer(id, "$ID", folder, "$DIR").Replace(r.stdout+r.stderr))

	// The same request again within the minute is the same job, not a new
	// one. A minute boundary between the two runs makes a new id: try again.
	for attempt := 0; ; attempt++ {
		first := runCLI(t, vars, "run", "--task", "fix the tests", "--flow", "fix", "--env-file", "", folder)
		again := runCLI(t, vars, "run", "--task", "fix the tests", "--flow", "fix", "--env-file", "", folder)
		if first.code != exitOK || again.code != exitOK {
			t.Fatalf("%+v %+v", first, again)
		}
		a, b := queuedRE.FindStringSubmatch(first.stdout), queuedRE.FindStringSubmatch(again.stdout)
		if a == nil || b == nil {
			t.Fatalf("%q %q", first.stdout, again.stdout)
		}
		if a[1] == b[1] {
			if b[2] == "" {
				t.Fatalf("a duplicate was not said: %q", again.stdout)
			}
			break
		}
		if attempt == 2 {
			t.Fatal("ids kept changing")
		}
	}
}

func TestRunUndeclaredGoesToTheSharedQueue(t *testing.T) {
	db := livetest.Valkey(t)
	folder := gitRepo(t, false)
	r := runCLI(t, map[string]string{"VALKEY_URL": db.URL, "PI_UNSIGNED_QUEUES": "*", "PI_FOLDER_ROOTS": os.TempDir()}, "run", folder, "--task", "fix the tests", "--flow", "fix", "--env-file", "")
	if r.code != exitOK || !strings.HasPrefix(r.stderr, "queue pi-jobs, folder "+folder+"\n") ||
		!strings.Contains(r.stderr, "warning: no worker has a live registry row: nothing takes jobs from pi-jobs (start a worker)") {
		t.Fatalf("%+v", r)
	}
	queuedJob(t, db, fleet.SharedQueue, r.stdout, folder)
}

func TestRunRefusesADirtyFolderUnlessForced(t *testing.T) {
	db := livetest.Valkey(t)
	folder := gitRepo(t, true)
	vars := map[string]string{"VALKEY_URL": db.URL, "PI_UNSIGNED_QUEUES": "*", "PI_WORKER_NAME": "web"}
	r := runCLI(t, vars, "run", folder, "--task", "fix the tests", "--flow", "fix", "--env-file", "")
	if r.code != exitFailure || r.stdout != "" ||
		!strings.Contains(r.stderr, folder+" has uncommitted changes (?? notes.txt)") ||
		!strings.Contains(r.stderr, "Commit or stash them, or pass --force") {
		t.Fatalf("%+v", r)
	}
	dbEmpty(t, db)

	r = runCLI(t, vars, "run", folder, "--force", "--task", "fix the tests", "--flow", "fix", "--env-file", "")
	if r.code != exitOK || !strings.Contains(r.stderr, "queued anyway (--force)") {
		t.Fatalf("%+v", r)
	}
	queuedJob(t, db, "pi-jobs@web", r.stdout, folder)
}

func TestRunValkeyDownFailsFast(t *testing.T) {
	folder := gitRepo(t, false)
	start := time.Now()
	r := runCLI(t, map[string]string{"VALKEY_URL": "redis://127.0.0.1:1/0", "PI_UNSIGNED_QUEUES": "*", "PI_FOLDER_ROOTS": os.TempDir()}, "run", folder, "--task", "t", "--flow", "fix", "--env-file", "")
	if elapsed := time.Since(start); elapsed > 20*time.Second { // a hang-catching bound
		t.Fatalf("took %s", elapsed)
	}
	if r.code != exitFailure || r.stdout != "" ||
		!strings.Contains(r.stderr, "could not reach Valkey at redis://127.0.0.1:1/0") ||
		!strings.Contains(r.stderr, "VALKEY_URL") || !strings.Contains(r.stderr, "docker compose") {
		t.Fatalf("%+v", r)
	}
}

func TestRunRefusesBadInput(t *testing.T) {
	folder := t.TempDir()
	file := filepath.Join(folder, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	// Valkey is never reached for these: a dead URL proves it (exit 2, not 1).
	vars := map[string]string{"VALKEY_URL": "redis://127.0.0.1:1/0", "PI_UNSIGNED_QUEUES": "*"}
	for _, tc := range []struct {
		vars map[string]string
		args []string
		want string
	}{
		{vars, []string{folder, "--task", "t", "--flow", "a", "--command", "b"}, "only one of --flow NAME and --command CMD"},
		{vars, []string{folder, "--task", "t", "--command", "b", "--flow", "default"}, "only one of --flow"},
		{vars, []string{folder, "--task", "t", "--flow", ""}, `--flow needs a flow name (leave it out for the default flow "default")`},
		{vars, []string{folder, "--flow", "a"}, "--task is required"},
		{vars, []string{folder}, "--task is required with a flow (or --task-file PATH, or --task - to read it from stdin)"},
		{vars, []string{"--flow", "a", "--task", "t"}, "exactly one folder"},
		{vars, []string{folder, folder, "--flow", "a", "--task", "t"}, "exactly one folder"},
		{vars, []string{filepath.Join(folder, "absent"), "--flow", "a", "--task", "t"}, "does not exist"},
		{vars, []string{file, "--flow", "a", "--task", "t"}, "is not a directory"},
		{vars, []string{folder, "--flow", "bad flow", "--task", "t"}, "flow"},
		{vars, []string{folder, "--flow", "a", "--task", "t", "--image", "NOT A REF"}, "image"},
		{vars, []string{folder, "--flow", "a", "--task", "t", "--bogus"}, "bogus"},
		{map[string]string{"VALKEY_URL": "redis://127.0.0.1:1/0", "PI_UNSIGNED_QUEUES": "*", "PI_CONCURRENCY": "lots"}, []string{folder, "--flow", "a", "--task", "t"}, "PI_CONCURRENCY=\"lots\""},
		{map[string]string{"VALKEY_URL": "redis://127.0.0.1:1/0", "PI_UNSIGNED_QUEUES": "*", "PI_WORKER_NAME": "bad name"}, []string{folder, "--flow", "a", "--task", "t"}, "PI_WORKER_NAME"},
	} {
		args := append([]string{"run", "--env-file", ""}, tc.args...)
		r := runCLI(t, tc.vars, args...)
		if r.code != exitUsage || r.stdout != "" || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%v: %+v", tc.args, r)
		}
	}
}

func TestGitStatus(t *testing.T) {
	ctx := context.Background()
	if s, _ := gitStatus(ctx, gitRepo(t, false)); s != gitClean {
		t.Errorf("clean repo: %v", s)
	}
	dirty := gitRepo(t, true)
	if s, detail := gitStatus(ctx, dirty); s != gitDirty || detail != "?? notes.txt" {
		t.Errorf("dirty repo: %v %q", s, detail)
	}
	// A change in a committed file is dirty too, seen from a subfolder.
	if err := os.WriteFile(filepath.Join(dirty, "README"), []byte("changed\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	sub := filepath.Join(dirty, "sub")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	if s, detail := gitStatus(ctx, sub); s != gitDirty || !strings.Contains(detail, "README") {
		t.Errorf("subfolder of a dirty repo: %v %q", s, detail)
	}
	if s, _ := gitStatus(ctx, t.TempDir()); s != gitNotRepo {
		t.Errorf("plain folder: %v", s)
	}
	// A repository git cannot read.
	broken := t.TempDir()
	if err := os.WriteFile(filepath.Join(broken, ".git"), []byte("gitdir: /nonexistent/x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if s, detail := gitStatus(ctx, broken); s != gitBroken || detail == "" {
		t.Errorf("broken repo: %v %q", s, detail)
	}
	// No git at all.
	t.Setenv("PATH", t.TempDir())
	if s, _ := gitStatus(ctx, dirty); s != gitMissing {
		t.Errorf("no git: %v", s)
	}
}

// Written as a job that left its folder's .git/config behind: an fsmonitor,
// a clean filter (status runs it on a changed file), an include of another
// file. run's check reads the configuration as data and runs no git
// command there that would execute it: the marker is never written, and
// the check refuses naming the key.
func TestGitStatusRunsNothingAJobConfigured(t *testing.T) {
	ctx := context.Background()
	marker := filepath.Join(t.TempDir(), "pwned")
	script := filepath.Join(t.TempDir(), "evil.sh")
	if err := os.WriteFile(script, []byte("#!/bin/sh\ntouch "+marker+"\ncat\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	included := filepath.Join(t.TempDir(), "included.config")
	if err := os.WriteFile(included, []byte("[core]\n\tfsmonitor = "+script+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for key, value := range map[string]string{
		"core.fsmonitor":             script,
		"filter.evil.clean":          script,
		"include.path":               included,
		"diff.evil.textconv":         script,
		"core.hooksPath":             filepath.Dir(script),
		"uploadpack.packObjectsHook": script,
	} {
		repo := gitRepo(t, false)
		cfg := filepath.Join(repo, ".git", "config")
		f, err := os.OpenFile(cfg, os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		section, name, _ := strings.Cut(key, ".")
		if sub, leaf, ok := strings.Cut(name, "."); ok {
			fmt.Fprintf(f, "[%s %q]\n\t%s = %s\n", section, sub, leaf, value)
		} else {
			fmt.Fprintf(f, "[%s]\n\t%s = %s\n", section, name, value)
		}
		f.Close()
		if err := os.WriteFile(filepath.Join(repo, ".gitattributes"), []byte("* filter=evil diff=evil\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(repo, "README"), []byte("changed\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		s, detail := gitStatus(ctx, repo)
		if s != gitUnsafe || !strings.EqualFold(detail, key) {
			t.Errorf("%s: %v %q, want unsafe naming it", key, s, detail)
		}
		if _, err := os.Stat(marker); err == nil {
			t.Fatalf("%s: the job's program ran", key)
		}
	}
}

func TestRunWithoutGitWarnsAndQueues(t *testing.T) {
	db := livetest.Valkey(t)
	folder := gitRepo(t, true)
	t.Setenv("PATH", t.TempDir())
	r := runCLI(t, map[string]string{"VALKEY_URL": db.URL, "PI_UNSIGNED_QUEUES": "*"}, "run", folder, "--task", "fix the tests", "--flow", "fix", "--env-file", "")
	if r.code != exitOK || !strings.Contains(r.stderr, "git is not installed") {
		t.Fatalf("%+v", r)
	}
	queuedJob(t, db, fleet.SharedQueue, r.stdout, folder)
}

func TestParseInterleaved(t *testing.T) {
	for _, tc := range []struct {
		args []string
		pos  string
		task string
		b    bool
	}{
		{[]string{"a", "--task", "t", "-b"}, "a", "t", true},
		{[]string{"--task", "t", "a", "c"}, "a,c", "t", false},
		{[]string{"a", "-b", "c", "--task=t"}, "a,c", "t", true},
		{[]string{"--task", "t", "--", "-b", "x"}, "-b,x", "t", false},
		{[]string{"a", "--", "--task"}, "a,--task", "", false},
		{nil, "", "", false},
	} {
		fset := flag.NewFlagSet("x", flag.ContinueOnError)
		task := fset.String("task", "", "")
		b := fset.Bool("b", false, "")
		pos, err := parseInterleaved(fset, tc.args)
		if err != nil || strings.Join(pos, ",") != tc.pos || *task != tc.task || *b != tc.b {
			t.Errorf("%v: %v %q %v %v", tc.args, pos, *task, *b, err)
		}
	}
}

func mustGetwd(t *testing.T) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	return wd
}

// The README's example names no flow: it runs the default flow.
func TestRunWithoutAFlowRunsTheDefaultFlow(t *testing.T) {
	db := livetest.Valkey(t)
	folder := gitRepo(t, false)
	r := runCLI(t, map[string]string{"VALKEY_URL": db.URL, "PI_UNSIGNED_QUEUES": "*"}, "run", folder, "--task", "fix the tests", "--env-file", "")
	if r.code != exitOK {
		t.Fatalf("%+v", r)
	}
	if _, job := queuedAny(t, db, fleet.SharedQueue, r.stdout, folder); job.Flow != "default" || job.Command != "" || job.Task != "fix the tests" {
		t.Fatalf("queued %+v, want the default flow", job)
	}
	// A command replaces the default flow, and needs no task.
	r = runCLI(t, map[string]string{"VALKEY_URL": db.URL, "PI_UNSIGNED_QUEUES": "*"}, "run", folder, "--command", "lint", "--env-file", "")
	if r.code != exitOK {
		t.Fatalf("%+v", r)
	}
	if _, job := queuedAny(t, db, fleet.SharedQueue, r.stdout, folder); job.Flow != "" || job.Command != "lint" {
		t.Fatalf("queued %+v, want the command alone", job)
	}
}

func TestRunRefusesAFolderOutsideGitUnlessForced(t *testing.T) {
	db := livetest.Valkey(t)
	folder := t.TempDir()
	vars := map[string]string{"VALKEY_URL": db.URL, "PI_UNSIGNED_QUEUES": "*"}
	r := runCLI(t, vars, "run", folder, "--task", "fix the tests", "--flow", "fix", "--env-file", "")
	if r.code != exitFailure || r.stdout != "" ||
		!strings.Contains(r.stderr, folder+" is not in a git repository") ||
		!strings.Contains(r.stderr, "git init") || !strings.Contains(r.stderr, "or pass --force") {
		t.Fatalf("%+v", r)
	}
	dbEmpty(t, db)

	r = runCLI(t, vars, "run", folder, "--force", "--task", "fix the tests", "--flow", "fix", "--env-file", "")
	if r.code != exitOK || !strings.Contains(r.stderr, "not in a git repository; queued anyway (--force)") {
		t.Fatalf("%+v", r)
	}
	queuedJob(t, db, fleet.SharedQueue, r.stdout, folder)
}

// runSameMinute runs each argument list in turn, retrying the whole list when
// a minute boundary fell between the first and the last run (the ids of one
// run change with the minute).
func runSameMinute(t *testing.T, vars map[string]string, runs ...[]string) []result {
	t.Helper()
	for attempt := 0; attempt < 3; attempt++ {
		start := time.Now().UTC().Truncate(time.Minute)
		out := make([]result, len(runs))
		for i, args := range runs {
			out[i] = runCLI(t, vars, append([]string{"run", "--env-file", ""}, args...)...)
		}
		if time.Now().UTC().Truncate(time.Minute).Equal(start) {
			return out
		}
	}
	t.Fatal("three minute boundaries in a row")
	return nil
}

func TestRunDuplicateNamesTheJobAndItsState(t *testing.T) {
	db := livetest.Valkey(t)
	folder := gitRepo(t, false)
	vars := map[string]string{"VALKEY_URL": db.URL, "PI_UNSIGNED_QUEUES": "*"}
	base := []string{folder, "--task", "fix the tests", "--flow", "fix"}
	rs := runSameMinute(t, vars,
		base,
		base,
		append(append([]string{}, base...), "--image", "pi-job:other"),
		append(append([]string{}, base...), "--new"),
	)
	first, again, otherImage, fresh := rs[0], rs[1], rs[2], rs[3]
	for _, r := range rs {
		if r.code != exitOK {
			t.Fatalf("%+v", r)
		}
	}
	id := queuedJob(t, db, fleet.SharedQueue, first.stdout, folder)
	// The same run again is the same job, said with its state.
	if again.stdout != "queued "+id+" (already queued this minute, waiting)\n" ||
		!strings.Contains(again.stderr, "already queued this minute as "+id+" (waiting); pass --new") {
		t.Fatalf("duplicate: %+v", again)
	}
	// Another image is another run.
	otherID, job := queuedAny(t, db, fleet.SharedQueue, otherImage.stdout, folder)
	if otherID == id || job.Image != "pi-job:other" || strings.Contains(otherImage.stdout, "already") {
		t.Fatalf("another image was taken for a duplicate: %+v", otherImage)
	}
	// --new forces a fresh job.
	if freshID := queuedJob(t, db, fleet.SharedQueue, fresh.stdout, folder); freshID == id || freshID == otherID || strings.Contains(fresh.stdout, "already") {
		t.Fatalf("--new: %+v", fresh)
	}

	// Once the first job has finished, the same run again says so and fails:
	// nothing would run.
	finishJob(t, db, fleet.SharedQueue, id)
	rs = runSameMinute(t, vars, base)
	if rs[0].code == exitOK && strings.Contains(rs[0].stdout, "queued "+id+" ") {
		t.Fatalf("a finished duplicate passed for queued: %+v", rs[0])
	}
	if !strings.Contains(rs[0].stdout, id) && !strings.Contains(rs[0].stderr, id) {
		// A minute passed since the first run: a new job was queued, which
		// is right. The finished case is pinned by TestReportQueued.
		t.Logf("the minute changed: %+v", rs[0])
		return
	}
	if rs[0].code != exitFailure || rs[0].stdout != "" ||
		!strings.Contains(rs[0].stderr, "already queued this minute as "+id+", which is completed; nothing new was queued") ||
		!strings.Contains(rs[0].stderr, "Pass --new to run it again") {
		t.Fatalf("finished duplicate: %+v", rs[0])
	}
}

// finishJob takes the queue's next job, which must be id, and completes it.
func finishJob(t *testing.T, db *livetest.ValkeyDB, queueName, id string) {
	t.Helper()
	q, err := queue.New(db.Client, queueName, queue.Config{})
	if err != nil {
		t.Fatal(err)
	}
	j, err := q.Fetch(context.Background(), "test-token")
	if err != nil || j == nil || j.ID != id {
		t.Fatalf("fetch: %+v %v, want %s", j, err, id)
	}
	if err := q.Complete(context.Background(), id, "test-token", nil); err != nil {
		t.Fatal(err)
	}
}

func TestReportQueued(t *testing.T) {
	for _, tc := range []struct {
		got          enqueue.Enqueued
		code         int
		stdout, errs string
	}{
		{enqueue.Enqueued{JobID: "local-1", Added: true}, exitOK, "queued local-1\n", ""},
		{enqueue.Enqueued{JobID: "local-1"}, exitOK, "queued local-1 (already queued this minute)\n", ""},
		{enqueue.Enqueued{JobID: "local-1", State: queue.StateActive}, exitOK, "queued local-1 (already queued this minute, active)\n", "(active); pass --new for another run"},
		{enqueue.Enqueued{JobID: "local-1", State: queue.StateCompleted}, exitFailure, "", "as local-1, which is completed; nothing new was queued"},
		{enqueue.Enqueued{JobID: "local-1", State: queue.StateFailed}, exitFailure, "", "as local-1, which is failed; nothing new was queued.\n  Pass --new to run it again."},
	} {
		var out, errOut strings.Builder
		code := reportQueued(env{stdout: &out, stderr: &errOut}, tc.got)
		if code != tc.code || out.String() != tc.stdout || !strings.Contains(errOut.String(), tc.errs) {
			t.Errorf("%+v: %d %q %q", tc.got, code, out.String(), errOut.String())
		}
	}
}

// runWithStdin runs `pi-dispatch run` in-process with stdin.
func runWithStdin(t *testing.T, vars map[string]string, stdin string, args ...string) result {
	t.Helper()
	var out, errOut strings.Builder
	e := env{getenv: func(k string) string { return vars[k] }, stdout: &out, stderr: &errOut, stdin: strings.NewReader(stdin)}
	code := cmdRun(context.Background(), e, args)
	return result{code: code, stdout: out.String(), stderr: errOut.String()}
}

func TestRunTaskFromAFileOrStdin(t *testing.T) {
	db := livetest.Valkey(t)
	folder := gitRepo(t, false)
	vars := map[string]string{"VALKEY_URL": db.URL, "PI_UNSIGNED_QUEUES": "*"}
	long := strings.Repeat("Step one of a long task.\n", 200) + "Last line.\n"
	file := filepath.Join(t.TempDir(), "task.md")
	if err := os.WriteFile(file, []byte(long), 0o600); err != nil {
		t.Fatal(err)
	}
	want := strings.TrimRight(long, "\n")
	r := runCLI(t, vars, "run", folder, "--task-file", file, "--env-file", "")
	if r.code != exitOK {
		t.Fatalf("%+v", r)
	}
	if _, job := queuedAny(t, db, fleet.SharedQueue, r.stdout, folder); job.Task != want {
		t.Fatalf("task from file: %q", job.Task)
	}
	r = runWithStdin(t, vars, "from stdin\r\n", folder, "--task", "-", "--env-file", "")
	if r.code != exitOK {
		t.Fatalf("%+v", r)
	}
	if _, job := queuedAny(t, db, fleet.SharedQueue, r.stdout, folder); job.Task != "from stdin" {
		t.Fatalf("task from stdin: %q", job.Task)
	}
}

func TestRunRefusesBadTaskInput(t *testing.T) {
	folder := t.TempDir()
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	empty := write("empty", "\n\n")
	tooLong := write("long", strings.Repeat("x", jobs.MaxTaskBytes+1))
	atLimit := write("limit", strings.Repeat("x", jobs.MaxTaskBytes))
	vars := map[string]string{"VALKEY_URL": "redis://127.0.0.1:1/0", "PI_UNSIGNED_QUEUES": "*"}
	for _, tc := range []struct {
		stdin string
		args  []string
		code  int
		want  string
	}{
		{"", []string{"--task", "t", "--task-file", atLimit}, exitUsage, "give only one of --task and --task-file"},
		{"", []string{"--task-file", empty}, exitUsage, "the task in " + empty + " is empty"},
		{"", []string{"--task-file", tooLong}, exitUsage, "the task in " + tooLong + " is longer than 65536 bytes, the limit of a job's task; shorten it"},
		{"", []string{"--task-file", filepath.Join(dir, "absent")}, exitUsage, "--task-file: open " + filepath.Join(dir, "absent")},
		{"  \n", []string{"--task", "-"}, exitUsage, "the task in stdin is empty"},
		{strings.Repeat("y", jobs.MaxTaskBytes+5), []string{"--task", "-"}, exitUsage, "the task in stdin is longer than 65536 bytes"},
		// At the limit the task is accepted: the run goes on to the folder
		// check (not a git repository).
		{"", []string{"--task-file", atLimit}, exitFailure, "is not in a git repository"},
	} {
		r := runWithStdin(t, vars, tc.stdin, append([]string{folder, "--env-file", ""}, tc.args...)...)
		if r.code != tc.code || r.stdout != "" || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%v: %+v", tc.args, r)
		}
	}
}

// run tells the truth before money is spent: a full count window means the
// job will be refused, and on an unnamed host in a named fleet the job sits
// on the shared queue other hosts drain.
func TestRunWarnsWhenTheJobCannotStart(t *testing.T) {
	db := livetest.Valkey(t)
	ctx := context.Background()
	b := fleetstate.NewBudget(db.Client, fleetstate.BudgetConfig{DailyCap: 1})
	if res, err := b.Reserve(ctx, "", nil); err != nil || !res.Granted {
		t.Fatalf("reserve: %+v %v", res, err)
	}
	reg := publish(t, db.Client, "alpha", registry.Facts{Routes: registry.Value(true)})
	defer reg.Close(ctx)
	folder := gitRepo(t, false)
	r := runCLI(t, map[string]string{"VALKEY_URL": db.URL, "PI_UNSIGNED_QUEUES": "*", "PI_DAILY_CAP": "1"}, "run", folder, "--task", "fix the tests", "--flow", "fix", "--env-file", "")
	if r.code != exitOK {
		t.Fatalf("%+v", r)
	}
	for _, want := range []string{"warning: budget window day is full (1 of 1 starts)", "named hosts (alpha) drain too", "Set PI_WORKER_NAME"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("run's stderr lacks %q:\n%s", want, r.stderr)
		}
	}
}

// run warns, before anything is queued, of a folder no worker of this
// configuration would run, and says how to set PI_FOLDER_ROOTS.
func TestRunRefusesFolderOutsideRoots(t *testing.T) {
	folder := gitRepo(t, false)
	r := runCLI(t, map[string]string{"VALKEY_URL": "redis://127.0.0.1:1/0", "PI_UNSIGNED_QUEUES": "*"}, "run", folder, "--task", "t", "--flow", "fix", "--env-file", "")
	if !strings.Contains(r.stderr, "warning: a worker of this configuration refuses this job (folder-not-allowed)") ||
		!strings.Contains(r.stderr, "PI_FOLDER_ROOTS is not set") || !strings.Contains(r.stderr, "pi-dispatch init") {
		t.Fatalf("unset: %+v", r)
	}
	r = runCLI(t, map[string]string{"VALKEY_URL": "redis://127.0.0.1:1/0", "PI_UNSIGNED_QUEUES": "*", "PI_FOLDER_ROOTS": t.TempDir()}, "run", folder, "--task", "t", "--flow", "fix", "--env-file", "")
	if !strings.Contains(r.stderr, "outside every PI_FOLDER_ROOTS folder") {
		t.Fatalf("outside: %+v", r)
	}
}

// Without a fleet key, run queues nothing a worker would refuse: it stops
// with exit 2 naming the key and the opt-in, and the queue stays empty.
// With the key, the job it queues carries the key's signature.
func TestRunWithoutAFleetKeyQueuesNothing(t *testing.T) {
	db := livetest.Valkey(t)
	folder := gitRepo(t, false)
	vars := map[string]string{"VALKEY_URL": db.URL, "PI_WORKER_NAME": "web", "PI_FOLDER_ROOTS": os.TempDir()}
	r := runCLI(t, vars, "run", folder, "--task", "t", "--flow", "fix", "--env-file", "")
	if r.code != exitUsage || !strings.Contains(r.stderr, "PI_FLEET_KEY_FILE") || !strings.Contains(r.stderr, "PI_UNSIGNED_QUEUES") {
		t.Fatalf("%+v", r)
	}
	if keys, _ := db.Client.Keys(context.Background(), "bull:*").Result(); len(keys) != 0 {
		t.Fatalf("queued anyway: %v", keys)
	}

	keyFile := filepath.Join(t.TempDir(), "fleet.key")
	if err := os.WriteFile(keyFile, []byte("the run command's fleet key, 32 bytes+"), 0o600); err != nil {
		t.Fatal(err)
	}
	vars["PI_FLEET_KEY_FILE"] = keyFile
	r = runCLI(t, vars, "run", folder, "--task", "t", "--flow", "fix", "--env-file", "")
	if r.code != exitOK {
		t.Fatalf("%+v", r)
	}
	id, _ := queuedAny(t, db, "pi-jobs@web", r.stdout, folder)
	q, err := queue.New(db.Client, "pi-jobs@web", queue.Config{})
	if err != nil {
		t.Fatal(err)
	}
	j, err := q.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	key, err := fleet.LoadKey(keyFile)
	if err != nil || !key.VerifyJob(q.Name(), j.ID, j.Data, j.Signature) {
		t.Fatalf("the queued job is not signed with the key: %q %v", j.Signature, err)
	}
}
