package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pidispatch/pidispatch/config"
	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/internal/image/agentimage"
	"github.com/pidispatch/pidispatch/internal/testkit/fakeprovider"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/internal/testkit/logtest"
	"github.com/pidispatch/pidispatch/jobs"
	"github.com/pidispatch/pidispatch/operator"
	"github.com/pidispatch/pidispatch/stack"
)

// These tests follow what the work was worth, end to end: a real receiver
// (pi-dispatch receive) turns signed forge deliveries into jobs, a real
// worker runs each in the agent image against the fake provider (whose
// usage makes each run's spend known) and opens its pull request; then a
// person merges one, closes one and pushes to the third, the forge's
// pull_request deliveries reach the same receiver, which records what
// became of each; and `pi-dispatch runs` shows it.

// outcomeUsage is what the fake provider reports for each model call.
var outcomeUsage = fakeprovider.Usage{Input: 1500, Output: 40}

// outcomeCallMicros is what the host charges for one call of outcomeUsage
// at claude-haiku-4-5's prices ($1 and $5 per million input and output
// tokens); each job makes two calls.
const outcomeCallMicros = 1500*1 + 40*5

// outcomeModel writes NOTES.md in the workspace on its first turn, then
// answers: every job changes one file, so every job opens a pull request.
func outcomeModel(body []byte) fakeprovider.Step {
	var req struct {
		Messages []struct {
			Role string `json:"role"`
		} `json:"messages"`
	}
	_ = json.Unmarshal(body, &req)
	for _, m := range req.Messages {
		if m.Role == "assistant" {
			return fakeprovider.Answer("Wrote NOTES.md.", outcomeUsage)
		}
	}
	return fakeprovider.WriteFile("/workspace/NOTES.md", "Notes on the fix.\n", outcomeUsage)
}

func hexToken(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// outcomeRig is the fleet of one: a fleet key every part reads, a worker
// running the agent image against the fake provider, and the environment
// the receiver and the CLI read.
type outcomeRig struct {
	db      *livetest.ValkeyDB
	keyFile string
	logsDir string
	fp      *fakeprovider.Server
}

func newOutcomeRig(t *testing.T) *outcomeRig {
	t.Helper()
	dc := livetest.Docker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	if err := agentimage.Ensure(ctx, dc, agentimage.Tag, t.Logf); err != nil {
		t.Fatal(err)
	}
	r := &outcomeRig{db: livetest.Valkey(t), logsDir: t.TempDir()}
	r.keyFile = filepath.Join(t.TempDir(), "fleet.key")
	if err := os.WriteFile(r.keyFile, []byte(hexToken(32)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	fp, err := fakeprovider.Listen(fakeprovider.Step{Respond: outcomeModel})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fp.Close() })
	r.fp = fp
	return r
}

// bootWorker runs a worker wired as cmd/worker wires one from env (the
// forge's credentials) and the triggers file, until the test ends.
func (r *outcomeRig) bootWorker(t *testing.T, name, triggers string, env map[string]string) *logtest.Buffer {
	t.Helper()
	resolver := filepath.Join(t.TempDir(), "resolve-agent")
	script := "#!/bin/sh\necho ANTHROPIC_API_KEY=sk-ant-outcome-" + hexToken(8) + "\necho PI_AGENT_MODEL=claude-haiku-4-5\necho PI_AGENT_RETRIES=0\n"
	if err := os.WriteFile(resolver, []byte(script), 0o700); err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{
		"VALKEY_URL": r.db.URL, "PI_FLEET_KEY_FILE": r.keyFile, "PI_WORKER_NAME": name, "PI_LOGS_DIR": r.logsDir,
		"PI_JOB_IMAGE": agentimage.Tag, "PI_MODEL_UPSTREAM": r.fp.URL(), "PI_SECRET_PROFILES": "agent:" + resolver,
		"PI_JOB_MEMORY": "1g", "PI_JOB_CPUS": "1", "PI_CONTAINER_USER": "65534:65534", "PI_TRIGGERS_FILE": triggers,
	}
	for k, v := range env {
		vars[k] = v
	}
	getenv := func(k string) string { return vars[k] }
	cfg, err := config.Load(getenv)
	if err != nil {
		t.Fatal(err)
	}
	logs := &logtest.Buffer{}
	logger := slog.New(slog.NewJSONHandler(logs, nil))
	policies, err := stack.LoadForgePolicies(triggers, name, logger)
	if err != nil {
		t.Fatal(err)
	}
	ws, err := stack.ForgeWorkspacesFromEnv(getenv, name, logger, policies)
	if err != nil || ws == nil {
		t.Fatalf("forge workspaces: %v, %v", ws, err)
	}
	s, err := stack.Build(context.Background(), cfg, logger, dispatch.Tuning{JobsDir: t.TempDir()},
		stack.WithForgeWorkspaces(ws), stack.WithForgePolicies(policies))
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Worker.Run(ctx) }()
	t.Cleanup(func() {
		stop()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("worker: %v", err)
			}
		case <-time.After(60 * time.Second):
			t.Error("the worker did not stop")
		}
		s.Close()
	})
	return logs
}

// receive runs pi-dispatch receive with vars (and the rig's Valkey and
// fleet key) until the test ends, and returns its address and its log.
func (r *outcomeRig) receive(t *testing.T, triggers string, vars map[string]string) (string, *logtest.Buffer) {
	t.Helper()
	port := freeTCPPort(t)
	env := map[string]string{
		"PI_ENV_FILE": "/dev/null", "VALKEY_URL": r.db.URL, "PI_FLEET_KEY_FILE": r.keyFile, "PI_TRIGGERS_FILE": triggers,
		"RECEIVER_BIND": "127.0.0.1", "RECEIVER_PORT": strconv.Itoa(port), "RECEIVER_SPOOL_DIR": filepath.Join(t.TempDir(), "spool"),
	}
	for k, v := range vars {
		env[k] = v
	}
	ctx, cancel := context.WithCancel(context.Background())
	stderr := &logtest.Buffer{}
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"receive"}, func(k string) string { return env[k] }, io.Discard, stderr)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			t.Error("receive did not stop with its context")
		}
	})
	base := "http://127.0.0.1:" + strconv.Itoa(port)
	waitUntil(t, "the receiver up", 30*time.Second, stderr, func() bool {
		resp, err := http.Get(base + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return base, stderr
}

// waitUntil polls ok until it holds, failing the test with log after d.
func waitUntil(t *testing.T, what string, d time.Duration, log fmt.Stringer, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: timed out; log:\n%s", what, log)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitRecords waits for the record of each job the receiver enqueued,
// count in all, in the worker's logs folder, each completed with a pull
// request; it returns them by pull request URL.
func (r *outcomeRig) waitRecords(t *testing.T, count int, rlog, wlog fmt.Stringer) map[string]jobs.Record {
	t.Helper()
	out := map[string]jobs.Record{}
	waitUntil(t, fmt.Sprintf("%d runs recorded", count), 6*time.Minute, wlog, func() bool {
		entries, _ := os.ReadDir(r.logsDir)
		clear(out)
		for _, e := range entries {
			if !strings.HasSuffix(e.Name(), ".json") || !strings.Contains(e.Name(), ".attempt-") {
				continue
			}
			rec, err := jobs.ReadRecordFile(filepath.Join(r.logsDir, e.Name()))
			if err != nil {
				continue
			}
			if rec.Outcome != jobs.OutcomeCompleted || rec.PullRequestURL == "" {
				t.Fatalf("run %s: %s/%s, pull request %q; receiver:\n%s\nworker:\n%s", rec.JobID, rec.Outcome, rec.Reason, rec.PullRequestURL, rlog, wlog)
			}
			out[rec.PullRequestURL] = rec
		}
		return len(out) == count
	})
	return out
}

// cli runs pi-dispatch with args against the rig's Valkey and fleet key.
func (r *outcomeRig) cli(t *testing.T, args ...string) string {
	t.Helper()
	env := map[string]string{"PI_ENV_FILE": "/dev/null", "VALKEY_URL": r.db.URL, "PI_FLEET_KEY_FILE": r.keyFile}
	var stdout, stderr strings.Builder
	if code := run(context.Background(), args, func(k string) string { return env[k] }, &stdout, &stderr); code != exitOK {
		t.Fatalf("pi-dispatch %s: exit %d\n%s", strings.Join(args, " "), code, stderr.String())
	}
	return stdout.String()
}

// wantOutcome is what a pull request became.
type wantOutcome struct {
	state        string
	humanCommits int
}

// checkWorth checks that `runs --json` shows each run's pull request as
// want says, the table says it too, and that `runs --by trigger --json`
// counts each trigger's merged pull requests and divides the sum of its
// runs' spend by them.
func (r *outcomeRig) checkWorth(t *testing.T, recs map[string]jobs.Record, want map[string]wantOutcome) {
	t.Helper()
	var list struct {
		Runs   []jobs.Record   `json:"runs"`
		Totals operator.Totals `json:"totals"`
	}
	if err := json.Unmarshal([]byte(r.cli(t, "runs", "--json")), &list); err != nil {
		t.Fatal(err)
	}
	if list.Totals.PullRequestOutcomes != operator.OutcomesJoined || list.Totals.Joined != len(want) || len(list.Runs) != len(want) {
		t.Fatalf("runs --json: %d runs, join %q with %d known; want %d joined", len(list.Runs), list.Totals.PullRequestOutcomes, list.Totals.Joined, len(want))
	}
	for _, run := range list.Runs {
		w, ok := want[run.PullRequestURL]
		if !ok {
			t.Fatalf("runs --json shows %s with pull request %q, which no job opened", run.JobID, run.PullRequestURL)
		}
		if p := run.PullRequest; p == nil || p.State != w.state || p.HumanCommits != w.humanCommits {
			t.Errorf("runs --json: %s (%s) shows %+v, want %s with %d human commits", run.JobID, run.PullRequestURL, p, w.state, w.humanCommits)
		}
	}
	table := r.cli(t, "runs")
	for url, w := range want {
		text := w.state
		if w.humanCommits > 0 {
			text += fmt.Sprintf(", +%d human push", w.humanCommits)
		}
		if !strings.Contains(table, url+" ("+text+")") {
			t.Errorf("runs does not show %s (%s):\n%s", url, text, table)
		}
	}

	type sums struct {
		runs, merged, closed, prs int
		micros                    int64
	}
	// Grouped as the records name their trigger (checkTrigger: each names
	// the one that made it).
	byTrigger := map[string]*sums{}
	for url, rec := range recs {
		key := rec.Trigger
		s := byTrigger[key]
		if s == nil {
			s = &sums{}
			byTrigger[key] = s
		}
		s.runs++
		s.prs++
		s.micros += rec.Spend.Micros
		switch want[url].state {
		case jobs.PullRequestMerged:
			s.merged++
		case jobs.PullRequestClosed:
			s.closed++
		}
	}
	var rep operator.BreakdownReport
	if err := json.Unmarshal([]byte(r.cli(t, "runs", "--by", "trigger", "--json")), &rep); err != nil {
		t.Fatal(err)
	}
	if len(byTrigger) != 2 {
		t.Fatalf("the runs name %d triggers, want 2: %v", len(byTrigger), byTrigger)
	}
	if rep.PullRequestOutcomes != operator.OutcomesJoined || len(rep.Rows) != len(byTrigger) {
		t.Fatalf("runs --by trigger: join %q, %d rows; want joined, %d rows: %+v", rep.PullRequestOutcomes, len(rep.Rows), len(byTrigger), rep.Rows)
	}
	for _, row := range rep.Rows {
		s := byTrigger[row.Key]
		if s == nil {
			t.Fatalf("runs --by trigger: a row %q no run had", row.Key)
		}
		var perMerged int64
		if s.merged > 0 {
			perMerged = s.micros / int64(s.merged)
		}
		if row.Runs != s.runs || row.Micros != s.micros || row.PullRequests != s.prs || row.Merged != s.merged || row.Closed != s.closed ||
			row.MicrosPerMerged != perMerged {
			t.Errorf("runs --by trigger, %s: %d runs, %d micros, %d pull requests, %d merged, %d closed, %d per merged; "+
				"want %d, %d, %d, %d, %d, %d", row.Key, row.Runs, row.Micros, row.PullRequests, row.Merged, row.Closed, row.MicrosPerMerged,
				s.runs, s.micros, s.prs, s.merged, s.closed, perMerged)
		}
	}
}

// checkTrigger checks the record names the trigger that made its job.
func checkTrigger(t *testing.T, rec jobs.Record, want string) {
	t.Helper()
	if rec.Trigger != want {
		t.Fatalf("the run of %s: trigger %q, want %q", rec.PullRequestURL, rec.Trigger, want)
	}
}

// checkSpend checks each run spent what the fake provider's usage costs:
// two calls of outcomeUsage.
func checkSpend(t *testing.T, recs map[string]jobs.Record) {
	t.Helper()
	for url, rec := range recs {
		if rec.Spend == nil || rec.Spend.Micros != 2*outcomeCallMicros {
			t.Fatalf("the run of %s: spend %+v; want two calls, %d micros", url, rec.Spend, 2*outcomeCallMicros)
		}
	}
}
