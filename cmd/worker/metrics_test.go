package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/pidispatch/pidispatch/enqueue"
	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/internal/testkit/logtest"
	"github.com/pidispatch/pidispatch/jobs"
	"github.com/pidispatch/pidispatch/queue"
)

// freeLoopbackAddr is a loopback address whose port was free a moment ago.
func freeLoopbackAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// httpGet returns the status and body of url, or code 0 when it does not
// answer.
func httpGet(url string) (int, string) {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// A PI_METRICS_ADDR that is no address refuses boot before anything
// connects, naming the variable.
func TestMetricsAddrInvalidRefusesBoot(t *testing.T) {
	t.Parallel()
	env := map[string]string{"VALKEY_URL": "redis://127.0.0.1:1/0", "PI_UNSIGNED_QUEUES": "*", "PI_METRICS_ADDR": "no port here"}
	var stderr bytes.Buffer
	code := run(context.Background(), nil, func(k string) string { return env[k] }, io.Discard, &stderr)
	if code != exitConfig || !strings.Contains(stderr.String(), "PI_METRICS_ADDR") {
		t.Fatalf("exit %d, stderr %q; want 2 naming PI_METRICS_ADDR", code, stderr.String())
	}
}

// A port another process holds refuses boot (exit 2 naming PI_METRICS_ADDR)
// before the worker takes a job or publishes its row.
func TestMetricsPortTakenRefusesBoot(t *testing.T) {
	t.Parallel()
	db := livetest.Valkey(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	env := testEnv(t, db.URL, map[string]string{"PI_WORKER_NAME": uniqueName("mxtaken", db), "PI_METRICS_ADDR": ln.Addr().String()})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var stderr logtest.Buffer
	code := run(ctx, nil, env, io.Discard, &stderr)
	out := stderr.String()
	if code != exitConfig || !strings.Contains(out, "PI_METRICS_ADDR") || strings.Contains(out, "worker_started") {
		t.Fatalf("exit %d; want 2 naming PI_METRICS_ADDR and no start:\n%s", code, out)
	}
}

// The worker booted with PI_METRICS_ADDR serves /metrics, /healthz and
// /readyz next to its run: a completed job and a refused one show up by
// outcome and reason, and the server is gone once run returns.
func TestMetricsLiveWorker(t *testing.T) {
	t.Parallel()
	ensureImage(t)
	db := livetest.Valkey(t)
	name := uniqueName("mx", db)
	addr := freeLoopbackAddr(t)
	base := "http://" + addr
	env := testEnv(t, db.URL, map[string]string{"PI_WORKER_NAME": name, "PI_METRICS_ADDR": addr})

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stderr logtest.Buffer
	done := make(chan int, 1)
	go func() { done <- run(ctx, nil, env, io.Discard, &stderr) }()
	waitHTTP(t, base+"/readyz", 200, 30*time.Second, done, &stderr)
	if code, body := httpGet(base + "/healthz"); code != 200 {
		t.Fatalf("/healthz: %d %s", code, body)
	}

	p, err := enqueue.NewProducer(db.Client, enqueue.ProducerConfig{UnsignedQueues: []string{fleet.EveryQueue}, WorkerName: name, WorkerNameDeclared: true})
	if err != nil {
		t.Fatal(err)
	}
	e, err := p.EnqueueLocal(context.Background(), jobs.Job{Folder: t.TempDir(), Flow: "fix", Task: "JOB_EXIT_CODE=0"})
	if err != nil {
		t.Fatal(err)
	}
	shared := testQueue(t, db, fleet.SharedQueue)
	junk := uniqueName("mxjunk", db)
	if _, added, err := shared.Add(context.Background(), enqueue.JobName, json.RawMessage(`{"kind":"nope","task":"JOB_EXIT_CODE=0"}`), queue.AddOptions{JobID: junk}); err != nil || !added {
		t.Fatalf("add: %v %v", added, err)
	}
	waitJobState(t, testQueue(t, db, e.Queue), e.JobID, queue.StateCompleted, 60*time.Second)
	waitJobState(t, shared, junk, queue.StateCompleted, 30*time.Second)

	host := fmt.Sprintf("host=%q", name)
	want := []string{
		`pidispatch_jobs_finished_total{` + host + `,outcome="completed",reason="completed"} 1`,
		`pidispatch_jobs_finished_total{` + host + `,outcome="policy",reason="invalid-job"} 1`,
		`pidispatch_gate_decisions_total{decision="refuse",gate="job-data",` + host + `} 1`,
		`pidispatch_jobs_started_total{` + host + `} 1`,
		`pidispatch_job_duration_seconds_count{` + host + `,outcome="completed"} 1`,
		`pidispatch_pickup_to_start_seconds_count{` + host + `} 1`,
		`pidispatch_queue_jobs{` + host + `,queue="` + e.Queue + `",state="completed"} 1`,
		`pidispatch_container_starts{` + host + `,window="day"}`,
		`pidispatch_scrape_source_up{` + host + `,source="queues"} 1`,
		`pidispatch_registry_beats_total{` + host + `,result="ok"} `,
	}
	body := waitMetrics(t, base+"/metrics", want, 10*time.Second)
	if strings.Contains(body, `pidispatch_registry_beats_total{`+host+`,result="ok"} 0`) {
		t.Fatal("no registry beat was counted")
	}
	if strings.Contains(body, e.JobID) || strings.Contains(body, junk) {
		t.Fatalf("a job id is a label value:\n%s", body)
	}

	cancel()
	select {
	case code := <-done:
		if code != exitOK {
			t.Fatalf("run: exit %d\n%s", code, stderr.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatal("run did not return")
	}
	if code, _ := httpGet(base + "/healthz"); code != 0 {
		t.Fatalf("/healthz answers %d after run returned", code)
	}
}

// waitHTTP polls url until it answers code; a run that returns first fails
// the test with its log.
func waitHTTP(t *testing.T, url string, code int, timeout time.Duration, done <-chan int, logs *logtest.Buffer) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		got, body := httpGet(url)
		if got == code {
			return
		}
		select {
		case c := <-done:
			t.Fatalf("run returned %d before %s answered %d:\n%s", c, url, code, logs.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d %q after %s, want %d", url, got, body, timeout, code)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitMetrics scrapes url until every line of want is in the body (the
// finish is observed as the outcome is recorded, a moment before the
// queue's answer the test waits on) and returns the last body.
func waitMetrics(t *testing.T, url string, want []string, timeout time.Duration) string {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		code, body := httpGet(url)
		var missing []string
		for _, w := range want {
			if !strings.Contains(body, w) {
				missing = append(missing, w)
			}
		}
		if code == 200 && len(missing) == 0 {
			return body
		}
		if time.Now().After(deadline) {
			t.Fatalf("/metrics: %d, missing %q:\n%s", code, missing, body)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
