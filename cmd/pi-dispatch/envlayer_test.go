package main

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/fleetstate"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/internal/testkit/logtest"
)

// writeDotEnv makes a folder holding .env with content and moves the test
// into it, as an operator runs pi-dispatch from the deployment folder.
func writeDotEnv(t *testing.T, content string) string {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, ".env")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)
	return path
}

// The whole ./.env applies, not only PI_WORKER_NAME: the job goes to the
// Valkey and the queue the file names, as the worker started from it.
func TestRunReadsTheWholeEnvFile(t *testing.T) {
	db := livetest.Valkey(t)
	folder := gitRepo(t, false)
	path := writeDotEnv(t, "# deployment\nVALKEY_URL="+db.URL+"\nPI_WORKER_NAME=from-file\nPI_UNSIGNED_QUEUES=*\n")
	r := runCLI(t, nil, "run", folder, "--task", "fix the tests", "--flow", "fix")
	if r.code != exitOK || !strings.Contains(r.stderr, "queue pi-jobs@from-file, folder "+folder+
		" (PI_WORKER_NAME from .env file "+path+":3, VALKEY_URL from .env file "+path+":2)") {
		t.Fatalf("%+v", r)
	}
	queuedJob(t, db, "pi-jobs@from-file", r.stdout, folder)

	// The shell wins, and the note says it overrode the file.
	db2 := livetest.Valkey(t)
	r = runCLI(t, map[string]string{"VALKEY_URL": db2.URL, "PI_UNSIGNED_QUEUES": "*", "PI_WORKER_NAME": "other"}, "run", folder, "--task", "fix the tests", "--flow", "fix")
	if r.code != exitOK || !strings.Contains(r.stderr, "PI_WORKER_NAME from shell (overrides "+path+":3)") {
		t.Fatalf("%+v", r)
	}
	queuedJob(t, db2, "pi-jobs@other", r.stdout, folder)

	// --env-file "" reads none; --env-file PATH reads that one instead.
	folder2 := gitRepo(t, false)
	r = runCLI(t, map[string]string{"VALKEY_URL": db.URL, "PI_UNSIGNED_QUEUES": "*"}, "run", folder2, "--task", "fix the tests", "--flow", "fix", "--env-file", "")
	if r.code != exitOK || strings.Contains(r.stderr, "from-file") {
		t.Fatalf("--env-file \"\" still read ./.env: %+v", r)
	}
	queuedJob(t, db, fleet.SharedQueue, r.stdout, folder2)
	other := filepath.Join(t.TempDir(), "other.env")
	if err := os.WriteFile(other, []byte("VALKEY_URL="+db2.URL+"\nPI_WORKER_NAME=named\nPI_UNSIGNED_QUEUES=*\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	folder3 := gitRepo(t, false)
	r = runCLI(t, nil, "run", folder3, "--task", "fix the tests", "--flow", "fix", "--env-file", other)
	if r.code != exitOK {
		t.Fatalf("%+v", r)
	}
	queuedJob(t, db2, "pi-jobs@named", r.stdout, folder3)
	missing := filepath.Join(t.TempDir(), "missing.env")
	r = runCLI(t, nil, "run", folder3, "--task", "fix the tests", "--flow", "fix", "--env-file", missing)
	if r.code != exitUsage || !strings.Contains(r.stderr, "env file "+missing+": file does not exist (named by --env-file)") {
		t.Fatalf("%+v", r)
	}
}

// A malformed line is refused naming the file and line, before anything is
// written, by the commands that read the whole configuration (run, doctor).
func TestRunAndDoctorRefuseAMalformedEnvFile(t *testing.T) {
	db := livetest.Valkey(t)
	folder := gitRepo(t, false)
	path := writeDotEnv(t, "VALKEY_URL="+db.URL+"\nPI_CONCURRENCY=3     # jobs at once\n")
	for _, args := range [][]string{{"run", folder, "--task", "t", "--flow", "fix"}, {"doctor"}} {
		r := runCLI(t, nil, args...)
		if r.code != exitUsage || !strings.Contains(r.stderr, "env file "+path+":2: PI_CONCURRENCY: the value holds a comment") {
			t.Errorf("%v: %+v", args, r)
		}
	}
	dbEmpty(t, db)
	// PI_ENV_FILE=/dev/null reads no file.
	if r := runCLI(t, map[string]string{"PI_ENV_FILE": "/dev/null", "VALKEY_URL": db.URL, "PI_UNSIGNED_QUEUES": "*"}, "status"); r.code != exitOK {
		t.Fatalf("%+v", r)
	}
}

// Nothing blocks the kill switch: a comment after a value elsewhere in the
// env file is a warning naming its line, and pause, resume, status, hosts,
// cancel and dash still act on the Valkey the file names.
func TestKillSwitchWarnsOnAMalformedEnvFileAndActs(t *testing.T) {
	db := livetest.Valkey(t)
	path := writeDotEnv(t, "PI_DAILY_CAP=25  # per day\nVALKEY_URL="+db.URL+"\nPI_WEEKLY_CAP='unclosed\n")
	warn := func(t *testing.T, args []string, r result) {
		t.Helper()
		if !strings.Contains(r.stderr, "warning: "+path+":1: PI_DAILY_CAP: the value holds a comment") ||
			!strings.Contains(r.stderr, path+":3: PI_WEEKLY_CAP") || !strings.Contains(r.stderr, "line ignored") {
			t.Errorf("%v: no warning naming lines 1 and 3: %+v", args, r)
		}
	}
	r := runCLI(t, nil, "pause")
	if r.code != exitOK {
		t.Fatalf("pause refused: %+v", r)
	}
	warn(t, []string{"pause"}, r)
	if n, err := db.Client.Exists(t.Context(), fleetstate.PausedKey).Result(); err != nil || n != 1 {
		t.Fatalf("pause did not set the flag in the file's Valkey: %d %v", n, err)
	}
	for _, args := range [][]string{{"status"}, {"hosts"}, {"cancel", "no-such-job"}, {"resume"}} {
		r := runCLI(t, nil, args...)
		if r.code == exitUsage {
			t.Errorf("%v refused over the env file: %+v", args, r)
		}
		warn(t, args, r)
	}
	if n, _ := db.Client.Exists(t.Context(), fleetstate.PausedKey).Result(); n != 0 {
		t.Fatal("resume did not clear the pause flag")
	}
	stderr := &logtest.Buffer{}
	login, stop := startDashErr(t, nil, stderr)
	if code := httpDo(t, dashSession(t, login), http.MethodGet, dashBase(login)+"api/state"); code != http.StatusOK {
		t.Fatalf("dash GET api/state: %d", code)
	}
	stop()
	if !strings.Contains(stderr.String(), path+":1: PI_DAILY_CAP") {
		t.Errorf("dash did not warn about line 1: %s", stderr.String())
	}
}

// A malformed line that sets VALKEY_URL (or VALKEY_PASSWORD) still refuses
// the kill switch: acting on a guessed Valkey is worse than not acting.
func TestKillSwitchRefusesAMalformedValkeyURLLine(t *testing.T) {
	path := writeDotEnv(t, "VALKEY_URL=redis://127.0.0.1:1/0  # the fleet\n")
	r := runCLI(t, nil, "pause")
	if r.code != exitUsage || !strings.Contains(r.stderr, path+":1: VALKEY_URL") || !strings.Contains(r.stderr, "VALKEY_URL must parse") {
		t.Fatalf("%+v", r)
	}
	// The shell's VALKEY_URL wins over the file, so the bad line no longer matters.
	db := livetest.Valkey(t)
	if r := runCLI(t, map[string]string{"VALKEY_URL": db.URL, "PI_UNSIGNED_QUEUES": "*"}, "pause"); r.code != exitOK {
		t.Fatalf("%+v", r)
	}
}

// The kill switch reads VALKEY_URL from the env file too: a pause goes to
// the Valkey the deployment's workers use.
func TestStatusReadsValkeyURLFromTheEnvFile(t *testing.T) {
	db := livetest.Valkey(t)
	writeDotEnv(t, "VALKEY_URL="+db.URL+"\n")
	if r := runCLI(t, nil, "pause"); r.code != exitOK {
		t.Fatalf("%+v", r)
	}
	if n, err := db.Client.Exists(t.Context(), fleetstate.PausedKey).Result(); err != nil || n != 1 {
		t.Fatalf("the pause flag is not set in the file's Valkey: %d %v", n, err)
	}
}

// doctor says which env file it read and where each value came from, and
// warns when the shell overrides the file.
func TestDoctorNamesWhereEachValueCameFrom(t *testing.T) {
	db, vars := doctorHost(t)
	path := writeDotEnv(t, "VALKEY_URL="+vars["VALKEY_URL"]+"\nPI_WORKER_NAME=doc-env\nPI_JOB_IMAGE="+vars["PI_JOB_IMAGE"]+"\n")
	writePeerRow(t, db.Client, "doc-env", "UTC", "", 0)
	shell := map[string]string{"PI_LOGS_DIR": vars["PI_LOGS_DIR"], "TZ": "UTC"}
	r := runCLI(t, shell, "doctor")
	want := "✓ environment: env file " + path + " read, the shell winning over it; from the shell: PI_LOGS_DIR; " +
		"from the file: VALKEY_URL (line 1), PI_WORKER_NAME (line 2), PI_JOB_IMAGE (line 3); every other variable: its default\n"
	if r.code != exitOK || !strings.HasPrefix(r.stdout, want) || !strings.Contains(r.stdout, "configuration valid (worker doc-env, declared") {
		t.Fatalf("%+v", r)
	}

	shell["PI_WORKER_NAME"] = "doc-shell"
	r = runCLI(t, shell, "doctor")
	if !strings.Contains(r.stdout, "\n⚠ the shell overrides "+path+" for PI_WORKER_NAME (line 2)\n    fix: a worker started from that file uses the file's value") {
		t.Fatalf("%+v", r)
	}
}

// doctor and receive --check name a misspelt variable of the env file with
// the known name closest to it.
func TestDoctorAndReceiveCheckNameUnknownVariables(t *testing.T) {
	db, vars := doctorHost(t)
	writeDotEnv(t, "VALKEY_URL="+vars["VALKEY_URL"]+"\nPI_WORKER_NAME=doc-unknown\nPI_JOB_IMAGE="+vars["PI_JOB_IMAGE"]+"\nPI_JOB_MEMROY=2g\n")
	writePeerRow(t, db.Client, "doc-unknown", "UTC", "", 0)
	r := runCLI(t, map[string]string{"PI_LOGS_DIR": vars["PI_LOGS_DIR"], "TZ": "UTC"}, "doctor")
	if !strings.Contains(r.stdout, "PI_JOB_MEMROY is set but nothing reads it") || !strings.Contains(r.stdout, "did you mean PI_JOB_MEMORY?") {
		t.Fatalf("%+v", r)
	}
	// receive --check says it first, even when the configuration then fails.
	r = runCLI(t, map[string]string{"PI_LOGS_DIR": vars["PI_LOGS_DIR"]}, "receive", "--check")
	if !strings.HasPrefix(r.stderr, "pi-dispatch receive: warning: PI_JOB_MEMROY is not a variable pidispatch reads; did you mean PI_JOB_MEMORY?\n") {
		t.Fatalf("%+v", r)
	}
}
