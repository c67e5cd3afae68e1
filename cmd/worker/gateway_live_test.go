package main

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/pidispatch/pidispatch/gateway"
	"github.com/pidispatch/pidispatch/internal/testkit/fakeprovider"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/jobs"
	"github.com/pidispatch/pidispatch/queue"
	"github.com/pidispatch/pidispatch/runner"
)

// These tests run the gateway live: the real pi agent image, the real
// worker and the fake provider, or the test job image for the fleet's
// dollar windows.

// containerSight is what a running job's container holds: its environment,
// command line and labels, its job.json, every file of its filesystem and
// of its mounts.
type containerSight struct {
	env, argv, labels, jobJSON string
	files                      int
	hits                       []string // where the secret was found
}

// lookInside inspects every container of jobID and searches all of it for
// secret.
func lookInside(t *testing.T, dc *client.Client, jobID, secret string) containerSight {
	var s containerSight
	ctx := context.Background()
	for _, c := range containers(t, dc, runner.LabelJob, jobID) {
		res, err := dc.ContainerInspect(ctx, c.ID, client.ContainerInspectOptions{})
		if err != nil {
			t.Error(err)
			return s
		}
		ci := res.Container
		s.env = strings.Join(ci.Config.Env, "\n")
		s.argv = strings.Join(append(append([]string{ci.Path}, ci.Args...), ci.Config.Cmd...), " ")
		b, _ := json.Marshal(ci.Config.Labels)
		s.labels = string(b)
		for what, text := range map[string]string{"environment": s.env, "argv": s.argv, "labels": s.labels} {
			if strings.Contains(text, secret) {
				s.hits = append(s.hits, what)
			}
		}
		for _, m := range ci.Mounts {
			if m.Destination == "/job" {
				data, _ := os.ReadFile(filepath.Join(m.Source, "job.json"))
				s.jobJSON = string(data)
			}
			s.hits = append(s.hits, searchDir(t, m.Source, secret, &s.files)...)
		}
		exp, err := dc.ContainerExport(ctx, c.ID, client.ContainerExportOptions{})
		if err != nil {
			t.Error(err)
			return s
		}
		s.hits = append(s.hits, searchTar(t, exp, secret, &s.files)...)
		exp.Close()
	}
	return s
}

func searchDir(t *testing.T, dir, secret string, files *int) (hits []string) {
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil
		}
		*files++
		if b, err := os.ReadFile(p); err == nil && bytes.Contains(b, []byte(secret)) {
			hits = append(hits, "mount file "+p)
		}
		return nil
	})
	return hits
}

func searchTar(t *testing.T, r io.Reader, secret string, files *int) (hits []string) {
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err != nil {
			if err != io.EOF {
				t.Errorf("container export: %v", err)
			}
			return hits
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		*files++
		b, err := io.ReadAll(tr)
		if err == nil && bytes.Contains(b, []byte(secret)) {
			hits = append(hits, "file /"+h.Name)
		}
	}
}

// The provider key stays on the host: the gateway adds it to every call, so
// the fake provider sees it, and nothing of the container holds it. The
// record's dollars are the provider's usage times the pricing table's
// prices, measured by the worker, not the agent.
func TestGatewayKeyNeverEntersTheContainer(t *testing.T) {
	t.Parallel()
	dc := livetest.Docker(t)
	var mu sync.Mutex
	var sight containerSight
	jobIDs := make(chan string, 1)
	var secret string
	first := fakeprovider.WriteFile("/workspace/hello.txt", "hello from pi\n", fakeprovider.Usage{Input: 1200, Output: 40, CacheRead: 300, CacheWrite: 100})
	first.Before = func() {
		mu.Lock()
		defer mu.Unlock()
		sight = lookInside(t, dc, <-jobIDs, secret)
	}
	r := bootAgentWorker(t, nil, 1, first,
		fakeprovider.Answer("Done: wrote hello.txt.", fakeprovider.Usage{Input: 1300, Output: 12, CacheRead: 1500}))
	secret = r.secret
	e := r.enqueue(t, jobs.Job{Folder: workspace(t), Flow: "fix", Task: "Write hello.txt saying hello."})
	jobIDs <- e.JobID
	rec := waitRecord(t, r.w.cfg.LogsDir, e.JobID, 3*time.Minute)
	mu.Lock()
	defer mu.Unlock()
	if rec.Outcome != jobs.OutcomeCompleted {
		t.Fatalf("record %+v\ntelemetry %s", rec, rec.Telemetry)
	}
	reqs := r.fp.Requests()
	if len(reqs) != 2 {
		t.Fatalf("the provider saw %d requests, want 2", len(reqs))
	}
	for _, req := range reqs {
		if req.APIKey != r.secret {
			t.Fatalf("the provider saw key %q, want the host's", req.APIKey)
		}
	}
	if sight.jobJSON == "" || sight.env == "" || sight.files < 100 {
		t.Fatalf("the running container was not searched (%d files, env %q)", sight.files, sight.env)
	}
	if len(sight.hits) > 0 {
		t.Fatalf("the key is in the container: %v", sight.hits)
	}
	if !strings.Contains(sight.env, "PI_JOB_ID=") {
		t.Fatalf("the container's environment was not read:\n%s", sight.env)
	}

	reported, _ := r.fp.Reported()
	want := haikuMicros(reported)
	s := rec.Spend
	if s == nil || s.Basis != jobs.BasisMetered || s.Calls != 2 || s.Micros != want || s.Dollars != jobs.USD(want) ||
		s.Tokens != (jobs.SpendTokens{Input: reported.Input, Output: reported.Output, CacheRead: reported.CacheRead, CacheWrite: reported.CacheWrite}) {
		t.Fatalf("record spend %+v, want %d micros metered from %+v", s, want, reported)
	}
	r.w.stop(t)
	raw := recordsText(t, r.w.cfg.LogsDir, e.JobID)
	if raw == "" || strings.Contains(raw, r.secret) || strings.Contains(r.w.logs.String(), r.secret) {
		t.Fatal("the key is in the record or the worker's log (or the record was not read)")
	}
}

// haikuMicros prices u at claude-haiku-4-5's table prices ($1, $5, $0.10,
// $1.25 per million tokens), rounded half up as the gateway does.
func haikuMicros(u fakeprovider.Usage) int64 {
	// Per million tokens in micro-dollars: the price in dollars times u.
	num := u.Input*1_000_000 + u.Output*5_000_000 + u.CacheRead*100_000 + u.CacheWrite*1_250_000
	return (num + 500_000) / 1_000_000
}

// recordsText is every record file of jobID, as written.
func recordsText(t *testing.T, dir, jobID string) string {
	t.Helper()
	matches, _ := filepath.Glob(filepath.Join(dir, "*"+jobs.SanitizeJobID(jobID)+".attempt-*.json"))
	var b strings.Builder
	for _, m := range matches {
		data, err := os.ReadFile(m)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(data)
	}
	return b.String()
}

// A job whose model writes until it is stopped (the provider bills every
// output token the request allows) never passes PI_MAX_COST_USD: the
// gateway lowers each call's max_tokens to what the cap affords, refuses
// the call that cannot afford a minimal answer, and the job ends policy /
// cost-cap, never retried, its record stating at least the provider's bill.
func TestGatewayHoldsTheCostCapAgainstTheProvidersBill(t *testing.T) {
	t.Parallel()
	u := fakeprovider.Usage{Input: 1000}
	r := bootAgentWorker(t, map[string]string{"PI_MAX_COST_USD": "0.30"}, 3,
		fakeprovider.Step{Tool: &fakeprovider.ToolCall{Name: "write", Input: map[string]any{"path": "/workspace/a.txt", "content": "a\n"}}, Usage: u, FillOutput: true},
		fakeprovider.Step{Tool: &fakeprovider.ToolCall{Name: "write", Input: map[string]any{"path": "/workspace/b.txt", "content": "b\n"}}, Usage: u, FillOutput: true},
		fakeprovider.Step{Text: "done", Usage: u, FillOutput: true})
	e := r.enqueue(t, jobs.Job{Folder: workspace(t), Flow: "fix", Task: "write a and b"})
	j := waitJobState(t, testQueue(t, r.db, e.Queue), e.JobID, queue.StateCompleted, 3*time.Minute)
	rec := waitRecord(t, r.w.cfg.LogsDir, e.JobID, 5*time.Second)
	if rec.Outcome != jobs.OutcomePolicy || rec.Reason != jobs.ReasonCostCap || j.AttemptsMade != 1 {
		t.Fatalf("record %+v (attempts %d)\ntelemetry %s", rec, j.AttemptsMade, rec.Telemetry)
	}
	billed, ok := gateway.DefaultPricing().Price("anthropic", "claude-haiku-4-5", gateway.Usage(r.fp.Billed()))
	if !ok || billed == 0 || billed > 300_000 {
		t.Fatalf("the provider billed $%s against a cap of $0.30 (priced %v)", jobs.FormatUSD(billed), ok)
	}
	if s := rec.Spend; s == nil || s.Micros < billed || s.Refused < 1 || s.CapHit != jobs.ReasonCostCap {
		t.Fatalf("spend %+v, want at least the bill ($%s) and cost-cap", s, jobs.FormatUSD(billed))
	}
	time.Sleep(time.Second) // a retry (200 ms backoff) would have started
	if n := countEvents(t, r.w.logs.String(), "job_started", e.JobID); n != 1 {
		t.Fatalf("%d starts, want 1", n)
	}
}

// A 429 with a 20 s reset suspends the provider fleet-wide: the next job is
// deferred, not started and not charged an attempt, until the reset, and
// then runs.
func TestRateLimitDefersNewJobsUntilTheReset(t *testing.T) {
	t.Parallel()
	r := bootAgentWorker(t, nil, 1,
		fakeprovider.Step{Status: 429, Reset: 20 * time.Second},
		fakeprovider.Answer("ok", fakeprovider.Usage{Input: 10, Output: 2}))
	first := r.enqueue(t, jobs.Job{Folder: workspace(t), Flow: "fix", Task: "meet the limit"})
	waitRecord(t, r.w.cfg.LogsDir, first.JobID, 3*time.Minute)
	limitedAt := r.fp.Requests()[0].At
	reset := limitedAt.Add(20 * time.Second)

	second := r.enqueue(t, jobs.Job{Folder: workspace(t), Flow: "fix", Task: "after the reset"})
	rec := waitRecord(t, r.w.cfg.LogsDir, second.JobID, 3*time.Minute)
	if rec.Outcome != jobs.OutcomeCompleted || rec.Attempt != 1 {
		t.Fatalf("second job's record %+v, want completed on its first attempt", rec)
	}
	if rec.StartedAt.Before(reset.Add(-time.Second)) {
		t.Fatalf("the second job started at %s, before the provider's reset at %s", rec.StartedAt, reset)
	}
	if n := countEvents(t, r.w.logs.String(), "job_deferred", second.JobID); n < 1 {
		t.Fatal("the second job was not deferred")
	}
	for _, ev := range parseLog(t, r.w.logs.String()) {
		if ev.Msg == "job_deferred" && strings.Contains(ev.raw, second.JobID) && !strings.Contains(ev.raw, `"gate":"rate-limit"`) {
			t.Fatalf("deferred by another gate: %s", ev.raw)
		}
	}
	if n := len(r.fp.Requests()); n != 2 {
		t.Fatalf("the provider saw %d calls, want 2 (none while suspended)", n)
	}
}

// A job stopped mid-stream by its timeout (the container killed while the
// provider is still writing an answer it bills whole): the gateway cannot
// learn the answer's usage, so the record charges the call's whole
// reservation, never less than the provider billed, and the run is not
// recorded completed.
func TestJobStoppedMidStreamRecordsAtLeastTheBill(t *testing.T) {
	t.Parallel()
	r := bootAgentWorker(t, map[string]string{"PI_JOB_TIMEOUT": "20s"}, 1,
		fakeprovider.Step{Text: "never read", Big: 1 << 30, ChunkDelay: 50 * time.Millisecond,
			FillOutput: true, Usage: fakeprovider.Usage{Input: 2000, Output: 8000}})
	e := r.enqueue(t, jobs.Job{Folder: workspace(t), Flow: "fix", Task: "write at length"})
	rec := waitRecord(t, r.w.cfg.LogsDir, e.JobID, 3*time.Minute)
	if rec.Outcome == jobs.OutcomeCompleted || rec.Reason != jobs.ReasonTimeout {
		t.Fatalf("record %+v, want the timeout", rec)
	}
	if n := len(r.fp.Requests()); n != 1 {
		t.Fatalf("the provider saw %d calls, want the one cut off", n)
	}
	billed, ok := gateway.DefaultPricing().Price("anthropic", "claude-haiku-4-5", gateway.Usage(r.fp.Billed()))
	if !ok || billed == 0 {
		t.Fatalf("the provider billed nothing (priced %v): the stream was not begun", ok)
	}
	if s := rec.Spend; s == nil || s.Micros < billed || s.Calls != 1 {
		t.Fatalf("spend %+v, want at least the provider's bill ($%s) for the one call", s, jobs.FormatUSD(billed))
	}
}
