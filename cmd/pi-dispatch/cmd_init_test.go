package main

import (
	"bytes"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pidispatch/pidispatch/config"
	"github.com/pidispatch/pidispatch/cronsync"
	"github.com/pidispatch/pidispatch/internal/envfile"
)

var updateGolden = flag.Bool("update-golden", false, "rewrite testdata/*.golden from the output of this run")

// checkGolden compares got with testdata/<name>.golden (or rewrites it with
// -update-golden).
func checkGolden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *updateGolden {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -run %s -update-golden to create it)", err, t.Name())
	}
	if got != string(want) {
		t.Errorf("output differs from %s\n--- got\n%s--- want\n%s", path, got, want)
	}
}

func TestEmbeddedEnvExampleIsTheRepositoryOne(t *testing.T) {
	repo, err := os.ReadFile("../../.env.example")
	if err != nil {
		t.Fatal(err)
	}
	if string(repo) != envExample {
		t.Fatal("cmd/pi-dispatch/env.example differs from .env.example: cp .env.example cmd/pi-dispatch/env.example")
	}
}

func TestInitScaffoldsADeployment(t *testing.T) {
	dir := t.TempDir()
	r := runCLI(t, nil, "init", "--dir", dir)
	if r.code != exitOK || r.stderr != "" {
		t.Fatalf("%+v", r)
	}
	checkGolden(t, "init", strings.ReplaceAll(r.stdout, dir, "$DIR"))

	envPath := filepath.Join(dir, ".env")
	fi, err := os.Stat(envPath)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf(".env mode %04o, want 0600", fi.Mode().Perm())
	}
	raw, err := os.ReadFile(envPath)
	if err != nil {
		t.Fatal(err)
	}
	content := string(raw)
	for _, v := range config.EnvVars {
		if !strings.Contains(content, v) {
			t.Errorf(".env does not mention %s", v)
		}
	}
	// systemd's EnvironmentFile takes all after '=' as the value: no comment
	// may trail an assignment.
	for _, line := range strings.Split(content, "\n") {
		if line != "" && !strings.HasPrefix(line, "#") && strings.Contains(line, "#") {
			t.Errorf("a comment trails an assignment: %q", line)
		}
	}

	// The scaffold is a valid configuration, with the limits file wired in
	// and cron left off.
	vars := map[string]string{}
	entries, err := envfile.ParseFile(envPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, en := range entries {
		vars[en.Key] = en.Value
	}
	if vars["PI_CONCURRENCY"] != "3" || vars["PI_JOB_IMAGE"] != "pi-job:latest" {
		t.Fatalf("defaults lost: %v", vars)
	}
	cfg, err := config.Load(func(k string) string { return vars[k] })
	if err != nil {
		t.Fatalf("scaffolded .env is invalid: %v", err)
	}
	// The fleet key is on: a fresh key of its own, 0600, that the .env names.
	if cfg.FleetKeyFile != filepath.Join(dir, "fleet.key") || !cfg.FleetKey.IsSet() || len(cfg.UnsignedQueues) != 0 {
		t.Fatalf("fleet key: file %q set %v unsigned %q", cfg.FleetKeyFile, cfg.FleetKey.IsSet(), cfg.UnsignedQueues)
	}
	if fi, err := os.Stat(cfg.FleetKeyFile); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("fleet.key: %v %v", fi, err)
	}
	other := t.TempDir()
	if r := runCLI(t, nil, "init", "--dir", other); r.code != exitOK {
		t.Fatalf("%+v", r)
	}
	a, _ := os.ReadFile(cfg.FleetKeyFile)
	b, _ := os.ReadFile(filepath.Join(other, "fleet.key"))
	if len(a) < 64 || bytes.Equal(a, b) {
		t.Fatalf("two inits wrote keys of %d and %d bytes, equal %v: each must be fresh", len(a), len(b), bytes.Equal(a, b))
	}
	if cfg.ScopedLimitsFile != "./scoped-limits.json" || cfg.TriggersFile != "" {
		t.Fatalf("files: limits %q triggers %q", cfg.ScopedLimitsFile, cfg.TriggersFile)
	}
	if limits, err := config.LoadScopedLimits(filepath.Join(dir, cfg.ScopedLimitsFile)); err != nil || limits.Len() != 1 {
		t.Fatalf("scoped-limits.json: %d rows, %v", limits.Len(), err)
	}
	cron, err := cronsync.Authored(filepath.Join(dir, "triggers.json"))
	if err != nil || cron == nil || len(cron) != 0 {
		t.Fatalf("triggers.json: %v %v", cron, err)
	}
	// The example printed in place of a comment is a valid cron trigger.
	tr, err := cronsync.ParseTriggers([]byte(`{"triggers": [` + triggersExample + `]}`))
	if err != nil || len(tr.Cron) != 1 {
		t.Fatalf("printed example: %v", err)
	}
	// The pause-windows example parses as it is, and nothing reads it.
	if cfg.PauseWindowsFile != "" {
		t.Fatalf("PI_PAUSE_WINDOWS_FILE=%q in the scaffold, want unset", cfg.PauseWindowsFile)
	}
	if w, err := config.LoadPauseWindows(filepath.Join(dir, initPauseWindowsFile)); err != nil || w.Len() != 3 {
		t.Fatalf("%s: %d windows, %v", initPauseWindowsFile, w.Len(), err)
	}
}

// init in the root of a git repository, or in a folder of one, leaves
// nothing git would commit: what it wrote is in .git/info/exclude, and its
// output says so. A second run adds nothing twice.
func TestInitInAGitRepositoryLeavesNothingToCommit(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not installed")
	}
	repo := t.TempDir()
	if out, err := exec.Command("git", "init", "-q", repo).CombinedOutput(); err != nil {
		t.Fatalf("git init: %v %s", err, out)
	}
	sub := filepath.Join(repo, "deploy", "host a")
	if err := os.MkdirAll(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{repo, sub} {
		r := runCLI(t, nil, "init", "--dir", dir)
		if r.code != exitOK || r.stderr != "" || !strings.Contains(r.stdout, "info/exclude, so git does not offer to commit them") {
			t.Fatalf("init in %s: %+v", dir, r)
		}
		if r := runCLI(t, nil, "init", "--dir", dir); r.code != exitOK || strings.Contains(r.stdout, "exclude") {
			t.Fatalf("second init in %s: %+v", dir, r)
		}
	}
	out, err := exec.Command("git", "-C", repo, "status", "--porcelain", "--untracked-files=all").Output()
	if err != nil || len(out) != 0 {
		t.Fatalf("git status after init: %q %v", out, err)
	}
	exclude, err := os.ReadFile(filepath.Join(repo, ".git", "info", "exclude"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(exclude), "\n/.env\n"); n != 1 || !strings.Contains(string(exclude), "/deploy/host\\ a/.env\n") {
		t.Fatalf("exclude file:\n%s", exclude)
	}
}

func TestInitNeverOverwrites(t *testing.T) {
	dir := t.TempDir()
	mine := "VALKEY_URL=redis://mine:6379\n"
	if err := os.WriteFile(filepath.Join(dir, ".env"), []byte(mine), 0o644); err != nil {
		t.Fatal(err)
	}
	// A symlink is kept too, never followed into a write.
	target := filepath.Join(t.TempDir(), "elsewhere.json")
	if err := os.Symlink(target, filepath.Join(dir, "triggers.json")); err != nil {
		t.Fatal(err)
	}
	r := runCLI(t, nil, "init", "--dir", dir)
	if r.code != exitOK {
		t.Fatalf("%+v", r)
	}
	checkGolden(t, "init-kept", strings.ReplaceAll(r.stdout, dir, "$DIR"))
	if !strings.Contains(r.stderr, "readable by others (mode 0644)") {
		t.Errorf("no warning about a world-readable .env: %q", r.stderr)
	}
	if got, _ := os.ReadFile(filepath.Join(dir, ".env")); string(got) != mine {
		t.Fatalf(".env overwritten: %q", got)
	}
	if _, err := os.Stat(target); !os.IsNotExist(err) {
		t.Fatalf("init wrote through a symlink: %v", err)
	}

	// A second run keeps everything.
	r = runCLI(t, nil, "init", "--dir", dir)
	if r.code != exitOK || strings.Contains(r.stdout, "created") || strings.Count(r.stdout, "kept ") != 5 || strings.Contains(r.stdout, "in "+dir) {
		t.Fatalf("%+v", r)
	}
}

func TestInitRefusesBadDir(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"init", "--dir", file},
		{"init", "--dir", filepath.Join(t.TempDir(), "absent")},
		{"init", "stray"},
	} {
		if r := runCLI(t, nil, args...); r.code != exitUsage || r.stderr == "" {
			t.Errorf("%v: %+v", args, r)
		}
	}
}

func TestScaffoldEnvMovesTrailingComments(t *testing.T) {
	got := scaffoldEnv("# head\nA=1   # one\n   # more on A\n# B=2   # two\n\n# PI_SCOPED_LIMITS_FILE=./scoped-limits.json  # limits\n# PI_PAUSE_WINDOWS_FILE=./p.json\n", "")
	want := "# Written by pi-dispatch init from .env.example. Read by the worker's\n" +
		"# EnvironmentFile (systemd) or env_file (docker compose): no comment may\n" +
		"# follow a value on its line.\n" +
		"# head\n# one\n#   more on A\nA=1\n# B=2   # two\n\n# limits\nPI_SCOPED_LIMITS_FILE=./scoped-limits.json\n# PI_PAUSE_WINDOWS_FILE=./p.json\n"
	if got != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
}

// init sets PI_FOLDER_ROOTS to the folder it runs in (without it no folder
// job runs); a folder the env file cannot hold plainly stays commented.
func TestScaffoldEnvSetsFolderRoots(t *testing.T) {
	example := "# PI_FOLDER_ROOTS=/home/me/projects:/srv/checkouts\n"
	if got := scaffoldEnv(example, "/srv/deploy"); !strings.Contains(got, "\nPI_FOLDER_ROOTS=/srv/deploy\n") {
		t.Fatalf("got\n%s", got)
	}
	for _, bad := range []string{"", "/", "/a b", "/a:b", "rel"} {
		if got := scaffoldEnv(example, bad); !strings.Contains(got, "# PI_FOLDER_ROOTS=/home/me/projects") {
			t.Fatalf("%q: got\n%s", bad, got)
		}
	}
	if !strings.Contains(envExample, "# PI_FOLDER_ROOTS=") {
		t.Fatal("env.example lost PI_FOLDER_ROOTS")
	}
}
