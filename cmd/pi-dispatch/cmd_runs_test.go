package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/pidispatch/pidispatch/fleetstate"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/jobs"
)

// cliRuns are three runs ended 1, 2 and 3 hours before now.
func cliRuns(now time.Time) []jobs.Record {
	at := func(h int) time.Time { return now.Add(-time.Duration(h) * time.Hour) }
	mk := func(id, host, outcome string, reason jobs.Reason, h int, spend *jobs.Spend) jobs.Record {
		return jobs.Record{JobID: id, Kind: jobs.KindForge, Target: "acme/app", Flow: "fix", StartedAt: at(h).Add(-90 * time.Second), EndedAt: at(h),
			Outcome: outcome, Reason: reason, Attempt: 1, Host: host, Spend: spend}
	}
	return []jobs.Record{
		withPull(mk("r-1", "alpha", jobs.OutcomeCompleted, jobs.ReasonCompleted, 1, &jobs.Spend{Dollars: 0.5, Micros: 500000, Basis: jobs.BasisMetered, Calls: 2}),
			"https://forge.example/acme/web/pull/7"),
		mk("r-2", "beta", jobs.OutcomeFailed, jobs.ReasonExit1, 2, nil),
		mk("r-3", "alpha", jobs.OutcomePolicy, jobs.ReasonTimeout, 3, &jobs.Spend{Dollars: 0.25, Micros: 250000, Basis: jobs.BasisMetered, Calls: 1}),
	}
}

// withPull gives r the pull request its forge job opened.
func withPull(r jobs.Record, url string) jobs.Record {
	r.PullRequestURL = url
	return r
}

// runs prints the mirror's runs as a table with totals, filters them, and
// prints JSON with --json.
func TestRunsGolden(t *testing.T) {
	db := livetest.Valkey(t)
	ctx := context.Background()
	env := explainVars(t, db.URL)
	now := time.Now().UTC().Truncate(time.Second)
	m := fleetstate.NewMirror(db.Client, fleetstate.MirrorConfig{})
	for _, r := range cliRuns(now) {
		if err := m.Mirror(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	ts := func(h int) string { return now.Add(-time.Duration(h) * time.Hour).Format("2006-01-02T15:04:05Z") }
	expect(t, runCLI(t, env, "runs"), db.URL, 0, ""+
		"ENDED                 HOST   JOB  OUTCOME    REASON     ATTEMPT  DURATION  DOLLARS  PULL REQUEST\n"+
		ts(1)+"  alpha  r-1  completed  completed  1        1m30s     $0.5000  https://forge.example/acme/web/pull/7\n"+
		ts(2)+"  beta   r-2  failed     exit-1     1        1m30s     -        -\n"+
		ts(3)+"  alpha  r-3  policy     timeout    1        1m30s     $0.2500  -\n"+
		"total: 3 runs of 3 jobs (completed 1, failed 1, policy 1); $0.7500 spent over 2 priced runs\n"+
		"source: the fleet's run mirror\n", "")
	expect(t, runCLI(t, env, "runs", "--host", "alpha", "--since", "150m", "--limit", "5"), db.URL, 0, ""+
		"ENDED                 HOST   JOB  OUTCOME    REASON     ATTEMPT  DURATION  DOLLARS  PULL REQUEST\n"+
		ts(1)+"  alpha  r-1  completed  completed  1        1m30s     $0.5000  https://forge.example/acme/web/pull/7\n"+
		"total: 1 run of 1 job (completed 1); $0.5000 spent over 1 priced run\n"+
		"source: the fleet's run mirror\n", "")

	r := runCLI(t, env, "runs", "--json", "--outcome", "policy", "--limit", "1")
	var got struct {
		Runs   []jobs.Record `json:"runs"`
		Totals struct {
			Source    string         `json:"source"`
			Runs      int            `json:"runs"`
			Jobs      int            `json:"jobs"`
			Shown     int            `json:"shown"`
			ByOutcome map[string]int `json:"byOutcome"`
			Dollars   float64        `json:"dollars"`
			Invalid   int            `json:"invalid"`
		} `json:"totals"`
	}
	if r.code != exitOK || json.Unmarshal([]byte(r.stdout), &got) != nil || len(got.Runs) != 1 || got.Runs[0].JobID != "r-3" ||
		got.Totals.Source != "mirror" || got.Totals.Runs != 1 || got.Totals.ByOutcome["policy"] != 1 || got.Totals.Dollars != 0.25 {
		t.Fatalf("%+v", r)
	}
	for _, bad := range [][]string{{"--outcome", "great"}, {"--reason", "because"}, {"--host", "no such"}, {"--limit", "0"}, {"--since", "yesterday"}, {"extra"}} {
		if r := runCLI(t, env, append([]string{"runs"}, bad...)...); r.code != exitUsage || !strings.HasPrefix(r.stderr, "pi-dispatch runs: ") {
			t.Errorf("%v: %+v", bad, r)
		}
	}

	// status --json lists the newest runs' pull requests.
	r = runCLI(t, env, "status", "--json")
	var st struct {
		PullRequests []struct {
			JobID string `json:"jobId"`
			URL   string `json:"pullRequestUrl"`
		} `json:"pullRequests"`
	}
	if r.code != exitOK || json.Unmarshal([]byte(r.stdout), &st) != nil || len(st.PullRequests) != 1 ||
		st.PullRequests[0].JobID != "r-1" || st.PullRequests[0].URL != "https://forge.example/acme/web/pull/7" {
		t.Fatalf("%+v", r)
	}
}

// With no mirror, runs reads this host's PI_LOGS_DIR and says so.
func TestRunsFallsBackToTheLogsDir(t *testing.T) {
	db := livetest.Valkey(t)
	env := explainVars(t, db.URL)
	now := time.Now().UTC().Truncate(time.Second)
	for _, r := range cliRuns(now)[:2] {
		if _, err := jobs.WriteRecord(env["PI_LOGS_DIR"], r); err != nil {
			t.Fatal(err)
		}
	}
	r := runCLI(t, env, "runs")
	if r.code != exitOK || !strings.Contains(r.stdout, "total: 2 runs of 2 jobs (completed 1, failed 1); $0.5000 spent over 1 priced run\n") ||
		!strings.HasSuffix(r.stdout, "source: this host's PI_LOGS_DIR ("+env["PI_LOGS_DIR"]+"): no run mirror to read\n") {
		t.Fatalf("%+v", r)
	}
}

// With Valkey down, runs still answers from this host's records, and says
// the mirror could not be read.
func TestRunsValkeyDown(t *testing.T) {
	env := explainVars(t, "redis://127.0.0.1:1/0")
	for _, r := range cliRuns(time.Now().UTC().Truncate(time.Second))[:1] {
		if _, err := jobs.WriteRecord(env["PI_LOGS_DIR"], r); err != nil {
			t.Fatal(err)
		}
	}
	r := runCLI(t, env, "runs")
	if r.code != exitOK || !strings.Contains(r.stdout, "total: 1 run of 1 job (completed 1)") || !strings.Contains(r.stdout, "\nnote: run mirror unreachable (") {
		t.Fatalf("%+v", r)
	}
}
