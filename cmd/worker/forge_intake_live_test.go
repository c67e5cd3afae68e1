package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/pidispatch/pidispatch/cronsync"
	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/forge"
	"github.com/pidispatch/pidispatch/forge/inbox"
	"github.com/pidispatch/pidispatch/forge/receiver"
	fixtures "github.com/pidispatch/pidispatch/internal/testkit/forgefixtures"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/jobs"
	"github.com/pidispatch/pidispatch/queue"
)

// End to end: a GitHub delivery, signed with the webhook secret, reaches the
// receiver; the commenter's permission is asked of a GitHub API double; a
// live worker that holds no forge credential takes the job and refuses it
// no-forge before anything runs (it could neither clone nor publish); exactly
// one record names the delivery.
func TestSignedDeliveryRunsOnALiveWorker(t *testing.T) {
	ensureImage(t)
	db := livetest.Valkey(t)
	name := uniqueName("intake", db)
	w := bootWorker(t, testEnv(t, db.URL, map[string]string{"PI_WORKER_NAME": name}), dispatch.Tuning{})

	api := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/repos/Codertocat/Hello-World/collaborators/Codertocat/permission" || r.Header.Get("Authorization") != "Bearer pat" {
			http.NotFound(rw, r)
			return
		}
		rw.Header().Set("Content-Type", "application/json")
		fmt.Fprint(rw, `{"permission":"write","role_name":"write"}`)
	}))
	defer api.Close()

	fts, err := cronsync.ParseForgeTriggers([]byte(`{"triggers": [
	  {"on": {"type": "comment", "id": "fix-comment", "repos": ["Codertocat/Hello-World"], "phrase": "fixed"},
	   "run": {"kind": "github", "flow": "review", "task": "JOB_SLEEP=1s"}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	intake, err := forge.NewIntake(forge.IntakeConfig{
		Enqueuer:    newRouter(t, db),
		Permissions: map[jobs.Forge]forge.Permissions{jobs.ForgeGitHub: forge.GitHubPermissions{BaseURL: api.URL, Tokens: forge.StaticToken("pat")}},
		Host:        "receiver-" + name,
	})
	if err != nil {
		t.Fatal(err)
	}
	intake.SetTriggers(fts)
	const secret = "e2e-webhook-secret"
	rcv, err := receiver.New(receiver.Config{Intake: intake, Replay: receiver.ValkeyReplay{Client: db.Client}, GitHubSecret: secret})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(rcv.Handler())
	defer srv.Close()

	body := fixtures.GitHub(t, "issue_comment", "created", 0)
	delivery := "e2e-" + randomHex(8)
	post := func() int {
		return fixtures.PostGitHub(t, srv.URL+"/github", "issue_comment", delivery, secret, body)
	}
	if got := post(); got != http.StatusAccepted {
		t.Fatalf("delivery answered %d, want 202", got)
	}
	if got := post(); got != http.StatusConflict {
		t.Fatalf("replayed delivery answered %d, want 409", got)
	}

	jobID := "gh-" + inbox.Delivery{Forge: jobs.ForgeGitHub, Body: body}.Key() // named after the signed body
	j := waitJobState(t, testQueue(t, db, "pi-jobs"), jobID, queue.StateCompleted, 90*time.Second)
	if j == nil {
		t.Fatal("job not completed")
	}
	rec := waitRecord(t, w.cfg.LogsDir, jobID, 10*time.Second)
	if rec.JobID != jobID || rec.Kind != jobs.KindForge || rec.Outcome != jobs.OutcomePolicy || rec.Reason != jobs.ReasonNoForge || rec.ExitCode != nil {
		t.Fatalf("record %+v, want refused no-forge before any container", rec)
	}
	recs, err := jobs.ReadRecords(w.cfg.LogsDir, jobID)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 1 {
		t.Fatalf("%d records of %s, want one", len(recs), jobID)
	}
}
