package main

import (
	"context"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/internal/livetest"
	"github.com/pidispatch/pidispatch/queue"
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

var queuedRE = regexp.MustCompile(`^queued (local-[0-9a-f]{16})( \(already queued this minute\))?\n$`)

// queuedJob reads the job `run` printed from queueName and checks what it holds.
func queuedJob(t *testing.T, db *livetest.ValkeyDB, queueName, stdout, folder string) string {
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
	job, err := dispatch.ParseJob(j.Data)
	if err != nil {
		t.Fatal(err)
	}
	if job.Kind != dispatch.KindLocal || job.Folder != folder || job.Flow != "fix" || job.Task != "fix the tests" {
		t.Fatalf("queued job %+v", job)
	}
	return m[1]
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
	vars := map[string]string{"VALKEY_URL": db.URL, "PI_WORKER_NAME": "web"}
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
	folder := t.TempDir() // not a git repository: allowed, nothing said
	r := runCLI(t, map[string]string{"VALKEY_URL": db.URL}, "run", folder, "--task", "fix the tests", "--flow", "fix", "--env-file", "")
	if r.code != exitOK || r.stderr != "queue pi-jobs, folder "+folder+"\n" {
		t.Fatalf("%+v", r)
	}
	queuedJob(t, db, queue.SharedQueue, r.stdout, folder)
}

func TestRunRefusesADirtyFolderUnlessForced(t *testing.T) {
	db := livetest.Valkey(t)
	folder := gitRepo(t, true)
	vars := map[string]string{"VALKEY_URL": db.URL, "PI_WORKER_NAME": "web"}
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
	folder := t.TempDir()
	start := time.Now()
	r := runCLI(t, map[string]string{"VALKEY_URL": "redis://127.0.0.1:1/0"}, "run", folder, "--task", "t", "--flow", "fix", "--env-file", "")
	if elapsed := time.Since(start); elapsed > 6*time.Second {
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
	vars := map[string]string{"VALKEY_URL": "redis://127.0.0.1:1/0"}
	for _, tc := range []struct {
		vars map[string]string
		args []string
		want string
	}{
		{vars, []string{folder, "--task", "t"}, "exactly one of --flow NAME and --command CMD"},
		{vars, []string{folder, "--task", "t", "--flow", "a", "--command", "b"}, "exactly one of --flow"},
		{vars, []string{folder, "--flow", "a"}, "--task is required"},
		{vars, []string{"--flow", "a", "--task", "t"}, "exactly one folder"},
		{vars, []string{folder, folder, "--flow", "a", "--task", "t"}, "exactly one folder"},
		{vars, []string{filepath.Join(folder, "absent"), "--flow", "a", "--task", "t"}, "does not exist"},
		{vars, []string{file, "--flow", "a", "--task", "t"}, "is not a directory"},
		{vars, []string{folder, "--flow", "bad flow", "--task", "t"}, "flow"},
		{vars, []string{folder, "--flow", "a", "--task", "t", "--image", "NOT A REF"}, "image"},
		{vars, []string{folder, "--flow", "a", "--task", "t", "--bogus"}, "bogus"},
		{map[string]string{"VALKEY_URL": "redis://127.0.0.1:1/0", "PI_CONCURRENCY": "lots"}, []string{folder, "--flow", "a", "--task", "t"}, "PI_CONCURRENCY=\"lots\""},
		{map[string]string{"VALKEY_URL": "redis://127.0.0.1:1/0", "PI_WORKER_NAME": "bad name"}, []string{folder, "--flow", "a", "--task", "t"}, "PI_WORKER_NAME"},
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

func TestRunWithoutGitWarnsAndQueues(t *testing.T) {
	db := livetest.Valkey(t)
	folder := gitRepo(t, true)
	t.Setenv("PATH", t.TempDir())
	r := runCLI(t, map[string]string{"VALKEY_URL": db.URL}, "run", folder, "--task", "fix the tests", "--flow", "fix", "--env-file", "")
	if r.code != exitOK || !strings.Contains(r.stderr, "git is not installed") {
		t.Fatalf("%+v", r)
	}
	queuedJob(t, db, queue.SharedQueue, r.stdout, folder)
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
