package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/fleetstate"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/jobs"
	"github.com/pidispatch/pidispatch/queue"
)

const cliForgeJob = `{"kind":"forge","repo":"acme/app","flow":"fix","task":"fix it"}`

// explainVars is a host's environment: its Valkey and its records folder.
func explainVars(t *testing.T, url string) map[string]string {
	return map[string]string{"VALKEY_URL": url, "PI_UNSIGNED_QUEUES": "*", "PI_LOGS_DIR": t.TempDir()}
}

func addJobData(t *testing.T, q *queue.Queue, id, data string) {
	t.Helper()
	if _, _, err := q.Add(context.Background(), "j", json.RawMessage(data), queue.AddOptions{JobID: id}); err != nil {
		t.Fatal(err)
	}
}

// explain prints where the job is and one line per finding, the fleet's
// pause first; --json prints the Explanation.
func TestExplainGolden(t *testing.T) {
	db := livetest.Valkey(t)
	env := explainVars(t, db.URL)
	addJobData(t, newQueue(t, db.Client, fleet.SharedQueue), "p-1", cliForgeJob)
	if r := runCLI(t, env, "pause"); r.code != exitOK {
		t.Fatalf("%+v", r)
	}
	expect(t, runCLI(t, env, "explain", "p-1"), db.URL, 0, ""+
		"job p-1 on pi-jobs: waiting, attempt 1\n"+
		"not running: the fleet is paused (pi-dispatch resume)\n"+
		"no worker has a live registry row: nothing takes jobs from pi-jobs (start a worker)\n", "")

	r := runCLI(t, env, "explain", "--json", "p-1")
	var got struct {
		JobID    string `json:"jobId"`
		Found    bool   `json:"found"`
		Queue    string `json:"queue"`
		State    string `json:"state"`
		Attempt  int    `json:"attempt"`
		Scope    string `json:"scope"`
		Findings []struct {
			Code  string         `json:"code"`
			Words string         `json:"words"`
			Data  map[string]any `json:"data"`
		} `json:"findings"`
	}
	if r.code != exitOK || strings.Count(r.stdout, "\n") != 1 || json.Unmarshal([]byte(r.stdout), &got) != nil {
		t.Fatalf("%+v", r)
	}
	if got.JobID != "p-1" || !got.Found || got.Queue != fleet.SharedQueue || got.State != "waiting" || got.Attempt != 1 || got.Scope != "acme/app" ||
		len(got.Findings) != 2 || got.Findings[0].Code != "fleet-paused" || got.Findings[0].Data["queuePaused"] != true || got.Findings[1].Code != "no-hosts" {
		t.Fatalf("%s", r.stdout)
	}
}

// A finished job shows its run records; an unknown id exits 1 with a hint,
// an id no job can have exits 2.
func TestExplainFinishedUnknownAndBadIDs(t *testing.T) {
	db := livetest.Valkey(t)
	ctx := context.Background()
	env := explainVars(t, db.URL)
	q := newQueue(t, db.Client, fleet.SharedQueue)
	addJobData(t, q, "d-1", cliForgeJob)
	finishNext(t, q, `{"outcome":"policy","reason":"over-budget"}`)
	ended := time.Now().UTC().Truncate(time.Second)
	rec := jobs.Record{JobID: "d-1", Kind: jobs.KindForge, Target: "acme/app", Flow: "fix", StartedAt: ended.Add(-time.Minute), EndedAt: ended,
		Outcome: jobs.OutcomePolicy, Reason: jobs.ReasonOverBudget, Attempt: 1, Host: "alpha",
		PullRequestURL: "https://forge.example/acme/app/pull/3", StatusCommentURL: "https://forge.example/acme/app/issues/2#issuecomment-9"}
	if err := fleetstate.NewMirror(db.Client, fleetstate.MirrorConfig{}).Mirror(ctx, rec); err != nil {
		t.Fatal(err)
	}
	at := ended.Format("2006-01-02T15:04:05Z")
	r := runCLI(t, env, "explain", "d-1")
	want := "job d-1 on pi-jobs: completed, attempt 1\n" +
		"finished: refused at " // then the queue's own finishing time
	if r.code != exitOK || !strings.HasPrefix(r.stdout, want) ||
		!strings.HasSuffix(r.stdout, " after 1 attempt(s); its last record says policy/over-budget on host alpha\n"+
			"run records (the run mirror):\n"+
			"  attempt 1  ended "+at+"  on alpha  policy/over-budget\n"+
			"    pull request: https://forge.example/acme/app/pull/3\n"+
			"    status comment: https://forge.example/acme/app/issues/2#issuecomment-9\n") {
		t.Fatalf("%+v", r)
	}

	expect(t, runCLI(t, env, "explain", "nope"), db.URL, 1, "",
		"no job nope on any queue\n  hint: a finished job leaves its queue with retention; pi-dispatch runs lists recent runs\n")
	expect(t, runCLI(t, env, "explain", "bad\x01id"), db.URL, 2, "",
		"pi-dispatch explain: invalid job id: contains control character U+0001\n")
	expect(t, runCLI(t, env, "explain"), db.URL, 2, "",
		"pi-dispatch explain: want exactly one job id, got 0 ("+explainUsage+")\n")
	expect(t, runCLI(t, env, "explain", "--frobnicate", "x"), db.URL, 2, "",
		"pi-dispatch explain: flag provided but not defined: -frobnicate ("+explainUsage+")\n")
}
