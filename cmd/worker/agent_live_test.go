package main

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/pidispatch/pidispatch/agent/entrypoint"
	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/enqueue"
	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/internal/image/agentimage"
	"github.com/pidispatch/pidispatch/internal/testkit/fakeprovider"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/jobs"
	"github.com/pidispatch/pidispatch/queue"
	"github.com/pidispatch/pidispatch/runner"
)

// These tests run the real pi coding agent (the offline agent image) under
// the real worker, with no network: pi reaches the scripted fake provider
// only through the job's model socket.

// agentTel is the agent image's exit line as the record keeps it.
type agentTel struct {
	Outcome, Reason, Provider, Model string
	Turns, Requests                  int
	Tokens                           entrypoint.Tokens
	Cost                             float64
}

func ensureAgentImage(t *testing.T) {
	t.Helper()
	dc := livetest.Docker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	if err := agentimage.Ensure(ctx, dc, agentimage.Tag, t.Logf); err != nil {
		t.Fatal(err)
	}
}

type agentRig struct {
	w      *bootedWorker
	p      *enqueue.Producer
	fp     *fakeprovider.Server
	secret string
	db     *livetest.ValkeyDB
}

// bootAgentWorker starts a fake provider with steps and a worker that runs
// the agent image with its model socket forwarded to it. The job's key comes
// from the secrets profile "agent", which also picks a model with known
// prices and turns pi's own retries off.
func bootAgentWorker(t *testing.T, extra map[string]string, attempts int, steps ...fakeprovider.Step) *agentRig {
	t.Helper()
	ensureAgentImage(t)
	db := livetest.Valkey(t)
	fp, err := fakeprovider.Listen(steps...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fp.Close() })
	secret := "sk-ant-e2e-" + randomHex(16)
	resolver := filepath.Join(t.TempDir(), "resolve-agent")
	script := "#!/bin/sh\necho ANTHROPIC_API_KEY=" + secret + "\necho PI_AGENT_MODEL=claude-haiku-4-5\necho PI_AGENT_RETRIES=0\n"
	if err := os.WriteFile(resolver, []byte(script), 0o700); err != nil {
		t.Fatal(err)
	}
	name := uniqueName("agent", db)
	env := map[string]string{
		"PI_WORKER_NAME": name, "PI_JOB_IMAGE": agentimage.Tag, "PI_MODEL_UPSTREAM": fp.URL(),
		"PI_SECRET_PROFILES": "agent:" + resolver, "PI_JOB_MEMORY": "1g", "PI_JOB_CPUS": "1",
	}
	for k, v := range extra {
		env[k] = v
	}
	w := bootWorker(t, testEnv(t, db.URL, env), dispatch.Tuning{})
	p, err := enqueue.NewProducer(db.Client, enqueue.ProducerConfig{UnsignedQueues: []string{fleet.EveryQueue},
		WorkerName: name, WorkerNameDeclared: true,
		Attempts: attempts, Backoff: queue.Backoff{Type: queue.BackoffFixed, Delay: 200 * time.Millisecond},
	})
	if err != nil {
		t.Fatal(err)
	}
	return &agentRig{w: w, p: p, fp: fp, secret: secret, db: db}
}

// workspace is a folder the image's unprivileged user may write.
func workspace(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	return dir
}

func (r *agentRig) enqueue(t *testing.T, job jobs.Job) enqueue.Enqueued {
	t.Helper()
	job.SecretsProfile = "agent"
	e, err := r.p.EnqueueLocal(context.Background(), job)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func telemetry(t *testing.T, rec jobs.Record) agentTel {
	t.Helper()
	var tel agentTel
	if err := json.Unmarshal(rec.Telemetry, &tel); err != nil {
		t.Fatalf("telemetry %s: %v", rec.Telemetry, err)
	}
	return tel
}

// haikuCost is what pi charges for u at claude-haiku-4-5's prices ($1, $5,
// $0.10 and $1.25 per million input, output, cache-read, cache-write tokens).
func haikuCost(u fakeprovider.Usage) float64 {
	return (float64(u.Input)*1 + float64(u.Output)*5 + float64(u.CacheRead)*0.1 + float64(u.CacheWrite)*1.25) / 1e6
}

// The agent writes a file in the workspace with a tool call, answers, and
// the record carries exactly the usage the provider reported. No secret is
// in the container's command line, labels or job.json, in the record or in
// any log line.
func TestAgentJobEndToEnd(t *testing.T) {
	t.Parallel()
	dc := livetest.Docker(t)
	// The provider's goroutine fills seen while the agent waits for its first
	// answer; mu orders it with the test's reads.
	var mu sync.Mutex
	var seen struct {
		argv, labels, jobJSON string
		network               string
	}
	jobIDs := make(chan string, 1)
	inspect := func() {
		mu.Lock()
		defer mu.Unlock()
		jobID := <-jobIDs
		for _, c := range containers(t, dc, runner.LabelJob, jobID) {
			res, err := dc.ContainerInspect(context.Background(), c.ID, client.ContainerInspectOptions{})
			if err != nil {
				t.Error(err)
				return
			}
			ci := res.Container
			seen.argv = strings.Join(append(append([]string{ci.Path}, ci.Args...), ci.Config.Cmd...), " ")
			b, _ := json.Marshal(ci.Config.Labels)
			seen.labels = string(b)
			seen.network = string(ci.HostConfig.NetworkMode)
			for _, m := range ci.Mounts {
				if m.Destination == "/job" {
					data, _ := os.ReadFile(filepath.Join(m.Source, "job.json"))
					seen.jobJSON = string(data)
				}
			}
		}
	}
	first := fakeprovider.WriteFile("/workspace/hello.txt", "hello from pi\n", fakeprovider.Usage{Input: 1200, Output: 40, CacheRead: 300, CacheWrite: 100})
	first.Before = inspect
	r := bootAgentWorker(t, nil, 2, first,
		fakeprovider.Answer("Done: wrote hello.txt.", fakeprovider.Usage{Input: 1300, Output: 12, CacheRead: 1500}))
	folder := workspace(t)
	e := r.enqueue(t, jobs.Job{Folder: folder, Flow: "fix", Task: "Write hello.txt saying hello."})
	jobIDs <- e.JobID

	rec := waitRecord(t, r.w.cfg.LogsDir, e.JobID, 3*time.Minute)
	mu.Lock()
	defer mu.Unlock()
	if rec.Outcome != jobs.OutcomeCompleted || rec.ExitCode == nil || *rec.ExitCode != 0 || rec.Network != "none" {
		t.Fatalf("record %+v\ntelemetry %s", rec, rec.Telemetry)
	}
	got, err := os.ReadFile(filepath.Join(folder, "hello.txt"))
	if err != nil || string(got) != "hello from pi\n" {
		t.Fatalf("hello.txt: %q (%v)", got, err)
	}
	reported, answers := r.fp.Reported()
	tel := telemetry(t, rec)
	want := entrypoint.Tokens{Input: reported.Input, Output: reported.Output, CacheRead: reported.CacheRead, CacheWrite: reported.CacheWrite, Total: reported.Total()}
	// The model's name came from the secrets profile (PI_AGENT_MODEL): a
	// value the profile resolved never reaches the record, so it is dropped.
	if answers != 2 || tel.Turns != 2 || tel.Tokens != want || tel.Provider != "anthropic" || tel.Model != "" {
		t.Fatalf("telemetry %+v, provider reported %+v in %d answers", tel, reported, answers)
	}
	if math.Abs(tel.Cost-haikuCost(reported)) > 1e-9 {
		t.Fatalf("cost %v, want %v", tel.Cost, haikuCost(reported))
	}
	// The key reached the provider, added by the worker's gateway.
	for _, req := range r.fp.Requests() {
		if req.APIKey != r.secret {
			t.Fatalf("the provider saw key %q", req.APIKey)
		}
	}
	if seen.jobJSON == "" || seen.network != "none" {
		t.Fatalf("the running container was not inspected (network %q)", seen.network)
	}
	r.w.stop(t)
	records := recordsText(t, r.w.cfg.LogsDir, e.JobID)
	if records == "" {
		t.Fatal("no record file read")
	}
	for what, s := range map[string]string{
		"argv": seen.argv, "labels": seen.labels, "job.json": seen.jobJSON, "record": records, "worker log": r.w.logs.String(),
	} {
		if strings.Contains(s, r.secret) {
			t.Errorf("the API key is in the container's %s", what)
		}
	}
}

// An agent that keeps calling tools is stopped at the job's maxTurns: a
// policy outcome, never retried.
func TestAgentMaxTurnsIsPolicy(t *testing.T) {
	t.Parallel()
	r := bootAgentWorker(t, nil, 3, fakeprovider.WriteFile("/workspace/again.txt", "again\n", fakeprovider.Usage{Input: 10, Output: 5}))
	e := r.enqueue(t, jobs.Job{Folder: workspace(t), Flow: "fix", Task: "loop", MaxTurns: 2})
	j := waitJobState(t, testQueue(t, r.db, e.Queue), e.JobID, queue.StateCompleted, 3*time.Minute)
	rec := waitRecord(t, r.w.cfg.LogsDir, e.JobID, 5*time.Second)
	tel := telemetry(t, rec)
	if rec.Outcome != jobs.OutcomePolicy || rec.Reason != jobs.ReasonPolicy || *rec.ExitCode != 2 || tel.Reason != entrypoint.ReasonMaxTurns || tel.Turns != 2 {
		t.Fatalf("record %+v\ntelemetry %s", rec, rec.Telemetry)
	}
	if j.AttemptsMade != 1 {
		t.Fatalf("attempts made %d, want 1", j.AttemptsMade)
	}
	time.Sleep(time.Second) // a retry (200 ms backoff) would have started
	r.w.stop(t)
	if n := countEvents(t, r.w.logs.String(), "job_started", e.JobID); n != 1 {
		t.Fatalf("%d starts, want 1", n)
	}
}

// A provider answering 500 is an infrastructure failure: retried within the
// job's attempts, then failed.
func TestAgentProviderErrorIsRetried(t *testing.T) {
	t.Parallel()
	r := bootAgentWorker(t, nil, 2, fakeprovider.Step{Status: 500})
	e := r.enqueue(t, jobs.Job{Folder: workspace(t), Flow: "fix", Task: "anything"})
	j := waitJobState(t, testQueue(t, r.db, e.Queue), e.JobID, queue.StateFailed, 4*time.Minute)
	rec := waitRecord(t, r.w.cfg.LogsDir, e.JobID, 5*time.Second)
	tel := telemetry(t, rec)
	if j.AttemptsMade != 2 || rec.Reason != jobs.ReasonExit1 || rec.Attempt != 2 || tel.Reason != entrypoint.ReasonProviderError {
		t.Fatalf("job attempts %d, record %+v\ntelemetry %s", j.AttemptsMade, rec, rec.Telemetry)
	}
	if n := len(r.fp.Requests()); n != 2 {
		t.Fatalf("the provider saw %d requests, want 2 (one per attempt, pi's retries off)", n)
	}
}

// A provider that never answers runs into the job timeout: stopped and
// recorded, with the agent's exit line printed inside the stop grace.
func TestAgentHungProviderTimesOut(t *testing.T) {
	t.Parallel()
	r := bootAgentWorker(t, map[string]string{"PI_JOB_TIMEOUT": "40s"}, 1, fakeprovider.Step{Hang: true})
	e := r.enqueue(t, jobs.Job{Folder: workspace(t), Flow: "fix", Task: "anything"})
	rec := waitRecord(t, r.w.cfg.LogsDir, e.JobID, 3*time.Minute)
	if rec.Outcome != jobs.OutcomePolicy || rec.Reason != jobs.ReasonTimeout {
		t.Fatalf("record %+v\ntelemetry %s", rec, rec.Telemetry)
	}
	if len(r.fp.Requests()) == 0 {
		t.Fatal("the agent never reached the provider: the timeout proves nothing")
	}
	// Stopped within the worker's grace, the entrypoint still reported.
	if tel := telemetry(t, rec); tel.Reason != entrypoint.ReasonTerminated {
		t.Fatalf("telemetry %s, want reason %s", rec.Telemetry, entrypoint.ReasonTerminated)
	}
}

// A job.json the entrypoint cannot read ends as policy with the reason on
// stderr, before pi is started.
func TestAgentMalformedJobIsPolicy(t *testing.T) {
	t.Parallel()
	ensureAgentImage(t)
	dc := livetest.Docker(t)
	d, err := runner.NewDocker(dc, runner.Config{})
	if err != nil {
		t.Fatal(err)
	}
	jobDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(jobDir, "job.json"), []byte(`{"jobId":"x","task":`), 0o644); err != nil {
		t.Fatal(err)
	}
	_ = os.Chmod(jobDir, 0o755)
	res, err := d.Run(context.Background(), runner.Spec{
		JobID: "agent-malformed-" + randomHex(6), Worker: "agent-test-" + randomHex(6), Image: agentimage.Tag,
		JobDir: jobDir, WorkspaceDir: workspace(t), Network: "none", Memory: 512 << 20, Timeout: time.Minute,
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != entrypoint.ExitPolicy || res.Telemetry == nil || res.Telemetry.Reason != entrypoint.ReasonInvalidJob {
		t.Fatalf("exit %d, telemetry %+v, tail %s", res.ExitCode, res.Telemetry, res.Tail)
	}
	if !strings.Contains(string(res.Tail), "not a JSON job description") {
		t.Fatalf("no clear reason in the output:\n%s", res.Tail)
	}
}

// TestAgentFirstRequestLatency measures the worker's time from picking a
// job up to the agent's first model request, over 10 jobs. It is a
// measurement, not a check: set PIDISPATCH_AGENT_LATENCY=1 to run it.
func TestAgentFirstRequestLatency(t *testing.T) {
	if os.Getenv("PIDISPATCH_AGENT_LATENCY") != "1" {
		t.Skip("set PIDISPATCH_AGENT_LATENCY=1 to measure")
	}
	r := bootAgentWorker(t, nil, 1, fakeprovider.Answer("ok", fakeprovider.Usage{Input: 1, Output: 1}))
	for i := range 10 {
		e := r.enqueue(t, jobs.Job{Folder: workspace(t), Flow: "fix", Task: "answer " + strconv.Itoa(i)})
		waitRecord(t, r.w.cfg.LogsDir, e.JobID, 3*time.Minute)
	}
	r.w.stop(t)
	var ms []int
	for _, ev := range parseLog(t, r.w.logs.String()) {
		var line struct{ AfterPickupMs int }
		if ev.Msg == "model_first_request" && json.Unmarshal([]byte(ev.raw), &line) == nil {
			ms = append(ms, line.AfterPickupMs)
		}
	}
	if len(ms) != 10 {
		t.Fatalf("%d model_first_request lines, want 10", len(ms))
	}
	sort.Ints(ms)
	t.Logf("pickup to first model request, ms: %v; median %d", ms, (ms[4]+ms[5])/2)
}
