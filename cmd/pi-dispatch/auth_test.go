package main

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/pidispatch/pidispatch/config"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/valkey"
)

const authFix = "the server refused authentication (set VALKEY_PASSWORD or put the password in VALKEY_URL)"

// Against a Valkey that requires a password, with none or a wrong one,
// every command that talks to it fails within 5 s naming the password fix,
// and pause and resume say nothing changed (the keyspace agrees); with the
// right password they work.
func TestCommandsAuthRefused(t *testing.T) {
	srv := livetest.StartServer(t)
	ctx := context.Background()
	if err := srv.Client().ConfigSet(ctx, "requirepass", "pw1").Err(); err != nil {
		t.Fatal(err)
	}
	folder := gitRepo(t, false)
	commands := [][]string{
		{"pause"}, {"resume"}, {"status"}, {"hosts"}, {"cancel", "job-1"}, {"explain", "job-1"}, {"runs"},
		{"run", folder, "--task", "t", "--flow", "fix", "--env-file", ""},
	}
	for _, tc := range []struct{ name, url, pw, answer string }{
		{"no password", srv.URL(), "", "NOAUTH"},
		{"wrong password", srv.URL(), "wrong", "WRONGPASS"},
		{"wrong password in the URL", "redis://:wrong@" + srv.Addr() + "/0", "pw1", "WRONGPASS"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := map[string]string{"VALKEY_URL": tc.url, "PI_UNSIGNED_QUEUES": "*", "VALKEY_PASSWORD": tc.pw, "PI_FOLDER_ROOTS": os.TempDir()}
			shown := config.RedactURL(tc.url)
			for _, args := range commands {
				start := time.Now()
				r := runCLI(t, env, args...)
				if el := time.Since(start); el >= 20*time.Second { // a hang-catching bound
					t.Errorf("%s took %s", args[0], el)
				}
				if r.code == exitOK || r.stdout != "" || !strings.Contains(r.stderr, authFix) ||
					strings.Contains(strings.ToLower(r.stderr), "is it running") || strings.Contains(r.stderr, "wrong@") {
					t.Fatalf("%s: %+v", args[0], r)
				}
				if args[0] == "pause" || args[0] == "resume" {
					want := "could not " + args[0] + " the deployment at " + shown + ": " + authFix + "\n" +
						"  (the server answered " + tc.answer + ")\n  nothing changed\n"
					expect(t, r, "", exitFailure, "", normalize(want, ""))
				}
			}
		})
	}
	admin, err := valkey.NewClient(srv.URL(), valkey.Options{Password: "pw1"})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if n, err := admin.DBSize(ctx).Result(); err != nil || n != 0 {
		t.Fatalf("refused commands wrote %d keys (%v)", n, err)
	}

	env := map[string]string{"VALKEY_URL": srv.URL(), "PI_UNSIGNED_QUEUES": "*", "VALKEY_PASSWORD": "pw1"}
	expect(t, runCLI(t, env, "pause"), "", exitOK, pausedLine+"\n", "")
	if !pauseFlag(t, admin) {
		t.Fatal("pause with the password set no flag")
	}
	if r := runCLI(t, env, "status", "--json"); r.code != exitOK || !strings.Contains(r.stdout, `"pausedState":true`) {
		t.Fatalf("status: %+v", r)
	}
	if r := runCLI(t, env, "run", folder, "--task", "t", "--flow", "fix", "--env-file", ""); r.code != exitOK || !strings.HasPrefix(r.stdout, "queued ") {
		t.Fatalf("run: %+v", r)
	}
	if r := runCLI(t, env, "cancel", "job-1"); r.code != exitFailure || !strings.Contains(r.stderr, "no job job-1 on any queue") {
		t.Fatalf("cancel: %+v", r)
	}
	if r := runCLI(t, env, "hosts"); r.code != exitOK {
		t.Fatalf("hosts: %+v", r)
	}
	expect(t, runCLI(t, env, "resume"), "", exitOK, "resumed\n", "")
}
