package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
	"github.com/redis/go-redis/v9"

	"github.com/pidispatch/pidispatch/enqueue"
	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/jobs"
	"github.com/pidispatch/pidispatch/queue"
	"github.com/pidispatch/pidispatch/registry"
	"github.com/pidispatch/pidispatch/runner"
)

// Names of workers, jobs and scopes are suffixed with the test's database
// number: the Docker daemon is shared by every test (of every package), so
// label-based assertions must only ever see this test's containers.
func uniqueName(prefix string, db *livetest.ValkeyDB) string {
	return fmt.Sprintf("%s-%d", prefix, db.DB)
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// logEvent is one JSON log line of a worker.
type logEvent struct {
	Msg    string `json:"msg"`
	Host   string `json:"host"`
	JobID  string `json:"jobId"`
	Reason string `json:"reason"`
	raw    string
}

// parseLog reads JSON log lines; a line that is not JSON fails the test (the
// worker logs only through its JSON handler).
func parseLog(t *testing.T, logs string) []logEvent {
	t.Helper()
	var out []logEvent
	sc := bufio.NewScanner(strings.NewReader(logs))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		var e logEvent
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("log line is not JSON: %q", line)
		}
		e.raw = line
		out = append(out, e)
	}
	return out
}

// countEvents counts log lines with message msg about job jobID ("" for any
// job).
func countEvents(t *testing.T, logs, msg, jobID string) int {
	t.Helper()
	n := 0
	for _, e := range parseLog(t, logs) {
		if e.Msg == msg && (jobID == "" || e.JobID == jobID) {
			n++
		}
	}
	return n
}

// testQueue is a queue handle of the test's own, for reading job state.
func testQueue(t *testing.T, db *livetest.ValkeyDB, name string) *queue.Queue {
	t.Helper()
	q, err := queue.New(db.Client, name, queue.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return q
}

// waitJobState waits until the job is in state want and returns it.
func waitJobState(t *testing.T, q *queue.Queue, id string, want queue.State, timeout time.Duration) *queue.Job {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last *queue.Job
	for time.Now().Before(deadline) {
		j, err := q.Get(context.Background(), id)
		if err == nil {
			last = j
			if j.State == want {
				return j
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	state := queue.State("absent")
	if last != nil {
		state = last.State
	}
	t.Fatalf("job %s on %s: state %s after %s, want %s", id, q.Name(), state, timeout, want)
	return nil
}

// waitHosts waits until every name has a live registry row, and caps[name],
// when given, is that row's capability list.
func waitHosts(t *testing.T, c redis.UniversalClient, caps map[string]string, names ...string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		hosts, err := registry.ReadLive(context.Background(), c, 2*time.Second)
		seen := 0
		for _, h := range hosts {
			if slices.Contains(names, h.Name) && h.AgeKnown && h.Routes {
				if want, ok := caps[h.Name]; !ok || h.Caps == want {
					seen++
				}
			}
		}
		if err == nil && seen == len(names) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("registry rows of %v not all published: %+v (%v)", names, hosts, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// containers lists every container (any state) carrying label=value.
// containersGone waits until no container carries label=value: a job's
// container is kept until its outcome is recorded and reported, and removed
// right after. It returns those left at the deadline.
func containersGone(t *testing.T, dc *client.Client, label, value string, timeout time.Duration) []container.Summary {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		left := containers(t, dc, label, value)
		if len(left) == 0 || time.Now().After(deadline) {
			return left
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func containers(t *testing.T, dc *client.Client, label, value string) []container.Summary {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := dc.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: make(client.Filters).Add("label", label+"="+value)})
	if err != nil {
		t.Fatal(err)
	}
	return res.Items
}

// sample counts, every 100 ms until done reports true, the containers of the
// given workers whose job is in jobs (every job when jobs is nil), and
// returns the highest count of existing containers (any state) and of
// running ones.
func sample(t *testing.T, dc *client.Client, workers []string, jobs map[string]bool, timeout time.Duration, done func() bool) (maxExisting, maxRunning int) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !done() {
		if time.Now().After(deadline) {
			t.Fatalf("not done after %s (max %d containers, %d running)", timeout, maxExisting, maxRunning)
		}
		existing, running := 0, 0
		for _, w := range workers {
			for _, c := range containers(t, dc, runner.LabelWorker, w) {
				if jobs != nil && !jobs[c.Labels[runner.LabelJob]] {
					continue
				}
				existing++
				if c.State == container.StateRunning {
					running++
				}
			}
		}
		maxExisting, maxRunning = max(maxExisting, existing), max(maxRunning, running)
		time.Sleep(100 * time.Millisecond)
	}
	return maxExisting, maxRunning
}

// recordExists reports whether jobID has a run record in one of dirs.
func recordExists(dirs []string, jobID string) bool {
	for _, d := range dirs {
		if recs, err := jobs.ReadRecords(d, jobID); err == nil && len(recs) > 0 {
			return true
		}
	}
	return false
}

// readRecord reads the record of jobID's latest attempt from the first of
// dirs that holds one.
func readRecord(t *testing.T, dirs []string, jobID string) (jobs.Record, string) {
	t.Helper()
	for _, d := range dirs {
		recs, err := jobs.ReadRecords(d, jobID)
		if err != nil {
			t.Fatalf("records of %s in %s: %v", jobID, d, err)
		}
		if len(recs) > 0 {
			return recs[len(recs)-1], d
		}
	}
	t.Fatalf("no record of %s in %v", jobID, dirs)
	return jobs.Record{}, ""
}

// recordFiles lists the record files of dir.
func recordFiles(t *testing.T, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// forgeJob is a valid forge job of repo whose task carries jobprog settings.
func forgeJob(repo, task string) jobs.Job {
	return jobs.Job{Kind: jobs.KindForge, Repo: repo, Ref: "main", Flow: "review", Task: task}
}

// newRouter is a front-end's router over the test's database.
func newRouter(t *testing.T, db *livetest.ValkeyDB) *enqueue.Router {
	t.Helper()
	p, err := enqueue.NewProducer(db.Client, enqueue.ProducerConfig{UnsignedQueues: []string{fleet.EveryQueue}})
	if err != nil {
		t.Fatal(err)
	}
	return enqueue.NewRouter(p, enqueue.RouterConfig{})
}

// keyContent renders every value a key holds, whatever its type, as text.
func keyContent(t *testing.T, c redis.UniversalClient, key string) string {
	t.Helper()
	ctx := context.Background()
	typ, err := c.Type(ctx, key).Result()
	if err != nil {
		t.Fatal(err)
	}
	var v any
	switch typ {
	case "string":
		v, err = c.Get(ctx, key).Result()
	case "hash":
		v, err = c.HGetAll(ctx, key).Result()
	case "list":
		v, err = c.LRange(ctx, key, 0, -1).Result()
	case "set":
		v, err = c.SMembers(ctx, key).Result()
	case "zset":
		v, err = c.ZRangeWithScores(ctx, key, 0, -1).Result()
	case "stream":
		v, err = c.XRange(ctx, key, "-", "+").Result()
	case "none":
		return ""
	default:
		t.Fatalf("key %s has type %s", key, typ)
	}
	if err != nil && err != redis.Nil {
		t.Fatalf("read %s: %v", key, err)
	}
	return fmt.Sprint(v)
}
