package main

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/fleetstate"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/queue"
	"github.com/pidispatch/pidispatch/registry"
)

// Goldens are inline: each is the exact stdout, stderr and exit code of one
// command, after normalize.

var (
	portRE      = regexp.MustCompile(`127\.0\.0\.1:\d+`)
	resetsRE    = regexp.MustCompile(`\(resets \d{4}-\d\d-\d\d \d\d:\d\dZ\)`)
	resetsAtRE  = regexp.MustCompile(`"resetsAt":"[^"]*"`)
	wrongTypeRE = regexp.MustCompile(`WRONGTYPE[^\n]*`)
)

// normalize replaces the parts of an output that differ between runs: the
// test database's URL, a server's port, a script error's sha and line.
func normalize(s, url string) string {
	if url != "" {
		s = strings.ReplaceAll(s, url, "<url>")
	}
	s = portRE.ReplaceAllString(s, "127.0.0.1:PORT")
	s = resetsRE.ReplaceAllString(s, "(resets <time>)")
	s = resetsAtRE.ReplaceAllString(s, `"resetsAt":"<time>"`)
	return wrongTypeRE.ReplaceAllString(s, "WRONGTYPE…")
}

// expect compares one run against its golden.
func expect(t *testing.T, r result, url string, code int, stdout, stderr string) {
	t.Helper()
	gotOut, gotErr := normalize(r.stdout, url), normalize(r.stderr, url)
	if r.code != code || gotOut != stdout || gotErr != stderr {
		t.Fatalf("got exit %d\nstdout:\n%s\nstderr:\n%s\nwant exit %d\nstdout:\n%s\nstderr:\n%s",
			r.code, gotOut, gotErr, code, stdout, stderr)
	}
}

// vars is the environment of a kill-switch command: VALKEY_URL only, plus a
// configuration that config.Load would refuse, to prove it is never read.
func vars(url string) map[string]string {
	return map[string]string{
		"VALKEY_URL": url, "PI_UNSIGNED_QUEUES": "*",
		"PI_CONCURRENCY":     "banana",
		"PI_WORKER_NAME":     "not a valid name",
		"PI_DAILY_CAP":       "-3",
		"PI_JOB_TIMEOUT":     "forever",
		"PI_SECRET_PROFILES": "junk",
	}
}

func publish(t *testing.T, client redis.UniversalClient, name string, facts registry.Facts) *registry.Registry {
	t.Helper()
	r, err := registry.New(client, name, facts, registry.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Publish(context.Background()); err != nil {
		t.Fatal(err)
	}
	return r
}

func newQueue(t *testing.T, client redis.UniversalClient, name string) *queue.Queue {
	t.Helper()
	q, err := queue.New(client, name, queue.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return q
}

func paused(t *testing.T, q *queue.Queue) bool {
	t.Helper()
	p, err := q.IsPaused(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func pauseFlag(t *testing.T, client redis.UniversalClient) bool {
	t.Helper()
	n, err := client.Exists(context.Background(), fleetstate.PausedKey).Result()
	if err != nil {
		t.Fatal(err)
	}
	return n == 1
}

func add(t *testing.T, q *queue.Queue, id string, opts queue.AddOptions) {
	t.Helper()
	opts.JobID = id
	if _, _, err := q.Add(context.Background(), "j", json.RawMessage(`{}`), opts); err != nil {
		t.Fatal(err)
	}
}

const pausedLine = "paused — worker will stop taking new jobs (jobs still enqueue)"

// The kill switch over three queues, one of them a host that is down (its
// queue exists, its registry row does not).
func TestKillSwitchFleetGolden(t *testing.T) {
	db := livetest.Valkey(t)
	ctx := context.Background()
	publish(t, db.Client, "alpha", registry.Facts{Routes: registry.Value(true)})
	shared := newQueue(t, db.Client, fleet.SharedQueue)
	_ = newQueue(t, db.Client, fleet.HostQueueName("alpha"))
	bravo := newQueue(t, db.Client, fleet.HostQueueName("bravo")) // down: no row
	add(t, shared, "s1", queue.AddOptions{})
	add(t, shared, "s2", queue.AddOptions{Priority: 2})
	add(t, bravo, "b1", queue.AddOptions{})
	add(t, bravo, "b2", queue.AddOptions{Delay: time.Hour})
	env := vars(db.URL)

	expect(t, runCLI(t, env, "pause"), db.URL, 0, pausedLine+" [3 queues]\n", "")
	expect(t, runCLI(t, env, "status", "--json"), db.URL, 0,
		`{"pausedState":true,"waiting":2,"active":0,"paused":0,"delayed":1,"failed":0,"completed":0,"refused":0,"cancelled":0,"prioritized":1,"spend":{"starts":[{"window":"day","count":0,"cap":25,"resetsAt":"<time>"}]},"pauseFlag":true,"queues":3,"held":0}`+"\n", "")

	expect(t, runCLI(t, env, "resume"), db.URL, 0, "resumed [3 queues]\n", "")

	// Mixed: a queue paused on its own is named.
	if err := bravo.Pause(ctx); err != nil {
		t.Fatal(err)
	}
	expect(t, runCLI(t, env, "status", "--json"), db.URL, 0,
		`{"pausedState":false,"pausedPartial":true,"pausedQueues":["pi-jobs@bravo"],"waiting":2,"active":0,"paused":0,"delayed":1,"failed":0,"completed":0,"refused":0,"cancelled":0,"prioritized":1,"spend":{"starts":[{"window":"day","count":0,"cap":25,"resetsAt":"<time>"}]},"pauseFlag":false,"queues":3,"held":0}`+"\n", "")
}

// One queue (a single host): no span, as the original printed it.
func TestKillSwitchSingleQueueGolden(t *testing.T) {
	db := livetest.Valkey(t)
	env := vars(db.URL)
	expect(t, runCLI(t, env, "pause"), db.URL, 0, pausedLine+"\n", "")
	expect(t, runCLI(t, env, "status", "--json"), db.URL, 0,
		`{"pausedState":true,"waiting":0,"active":0,"paused":0,"delayed":0,"failed":0,"completed":0,"refused":0,"cancelled":0,"prioritized":0,"spend":{"starts":[{"window":"day","count":0,"cap":25,"resetsAt":"<time>"}]},"pauseFlag":true,"queues":1,"held":0}`+"\n", "")
	expect(t, runCLI(t, env, "resume"), db.URL, 0, "resumed\n", "")
	expect(t, runCLI(t, env, "pause", "now"), db.URL, 2, "",
		"pi-dispatch pause: unexpected argument \"now\" (usage: pi-dispatch pause)\n")
}

// An unreadable registry fails open to the keyspace and is named.
func TestKillSwitchRegistryUnreadableGolden(t *testing.T) {
	db := livetest.Valkey(t)
	ctx := context.Background()
	if err := db.Client.Set(ctx, registry.LiveKey, "junk", 0).Err(); err != nil {
		t.Fatal(err)
	}
	bravo := newQueue(t, db.Client, fleet.HostQueueName("bravo"))
	if err := bravo.Declare(ctx); err != nil {
		t.Fatal(err)
	}
	env := vars(db.URL)
	expect(t, runCLI(t, env, "pause"), db.URL, 0,
		pausedLine+" [2 queues] [registry unreadable: host registry unreachable: read: WRONGTYPE…\n", "")
	r := runCLI(t, env, "status", "--json")
	var st map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil || r.code != 0 {
		t.Fatalf("%+v: %v", r, err)
	}
	if fleet, _ := st["fleet"].(string); !strings.HasPrefix(fleet, "host registry unreachable") || st["pausedState"] != true {
		t.Fatalf("status = %s", r.stdout)
	}
}

// A queue a peer broke refuses its part: the output says what changed and
// where it failed, and the keyspace agrees.
func TestKillSwitchPartialFailureGolden(t *testing.T) {
	db := livetest.Valkey(t)
	ctx := context.Background()
	charlie := newQueue(t, db.Client, fleet.HostQueueName("charlie"))
	if err := charlie.Declare(ctx); err != nil {
		t.Fatal(err)
	}
	if err := db.Client.Set(ctx, "bull:pi-jobs@bravo:meta", "junk", 0).Err(); err != nil {
		t.Fatal(err)
	}
	env := vars(db.URL)
	expect(t, runCLI(t, env, "pause"), db.URL, 1, "", `could not pause the whole deployment at <url>
  paused: pi-jobs, pi-jobs@charlie
  fleet pause flag: set (host queues declared from now on start paused)
  failed at: pi-jobs@bravo
  pause pi-jobs@bravo: WRONGTYPE…
`)
	expect(t, runCLI(t, env, "status"), db.URL, 1, "", `could not read the status of every queue at <url>
  status: is-paused pi-jobs@bravo: WRONGTYPE…
`)
	expect(t, runCLI(t, env, "resume"), db.URL, 1, "", `could not resume the whole deployment at <url>
  resumed: pi-jobs, pi-jobs@charlie
  fleet pause flag: cleared
  failed at: pi-jobs@bravo
  resume pi-jobs@bravo: WRONGTYPE…
`)
}

// With Valkey down every kill-switch command fails within 5 s with one clean
// message, and never prints a password.
func TestKillSwitchValkeyDown(t *testing.T) {
	srv := livetest.StartServer(t)
	srv.Stop()
	url := "redis://:s3cret@" + srv.Addr() + "/0"
	env := vars(url)
	shown := "redis://xxxxx@127.0.0.1:PORT/0"
	head := "could not reach Valkey at " + shown + " — is it running? " + ksUnreachableFix + "\n"
	for _, tc := range []struct {
		args []string
		want string // stderr after the head
	}{
		{[]string{"pause"}, "  pause: pause 1 queue(s): dial tcp 127.0.0.1:PORT: connect: connection refused\n  nothing changed\n"},
		{[]string{"resume"}, "  resume: resume 1 queue(s): dial tcp 127.0.0.1:PORT: connect: connection refused\n  nothing changed\n"},
		{[]string{"status"}, "  status: read pi:paused: dial tcp 127.0.0.1:PORT: connect: connection refused\n"},
		{[]string{"hosts"}, "  host registry unreachable: read: dial tcp 127.0.0.1:PORT: connect: connection refused\n"},
		{[]string{"cancel", "job-1"}, "  cancel \"job-1\": find \"job-1\": get \"job-1\" from pi-jobs: dial tcp 127.0.0.1:PORT: connect: connection refused\n"},
	} {
		start := time.Now()
		r := runCLI(t, env, tc.args...)
		el := time.Since(start)
		if el >= 20*time.Second { // a hang-catching bound
			t.Errorf("%v took %s", tc.args, el)
		}
		if strings.Contains(r.stdout+r.stderr, "s3cret") {
			t.Fatalf("%v printed the password: %s", tc.args, r.stderr)
		}
		expect(t, r, "", 1, "", head+tc.want)
	}
}

// A VALKEY_URL that does not parse is a usage error, without its password.
func TestKillSwitchBadURL(t *testing.T) {
	for _, cmd := range []string{"pause", "resume", "status", "hosts"} {
		r := runCLI(t, map[string]string{"VALKEY_URL": "redis://:s3cret@127.0.0.1:notaport/0", "PI_UNSIGNED_QUEUES": "*"}, cmd)
		if r.code != exitUsage || strings.Contains(r.stderr, "s3cret") || !strings.Contains(r.stderr, "VALKEY_URL=redis://xxxxx@127.0.0.1:notaport/0") {
			t.Fatalf("%s: %+v", cmd, r)
		}
	}
}

// VALKEY_PASSWORD is used when the URL carries none.
func TestKillSwitchPassword(t *testing.T) {
	srv := livetest.StartServer(t)
	admin := srv.Client()
	if err := admin.ConfigSet(context.Background(), "requirepass", "pw1").Err(); err != nil {
		t.Fatal(err)
	}
	url := srv.URL()
	r := runCLI(t, map[string]string{"VALKEY_URL": url, "PI_UNSIGNED_QUEUES": "*", "VALKEY_PASSWORD": "pw1"}, "pause")
	expect(t, r, url, 0, pausedLine+"\n", "")
	r = runCLI(t, map[string]string{"VALKEY_URL": url, "PI_UNSIGNED_QUEUES": "*"}, "status")
	if r.code != exitFailure || !strings.Contains(r.stderr, "NOAUTH") {
		t.Fatalf("without the password: %+v", r)
	}
}

// hungServer accepts connections and never answers: a Valkey that hangs
// (stopped with SIGSTOP, a full disk, a black-holed route after connect).
func hungServer(t *testing.T) string {
	t.Helper()
	livetest.SkipShort(t) // a hung server is waited out: not for the short lane
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns sync.WaitGroup
	done := make(chan struct{})
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			conns.Go(func() {
				defer c.Close()
				go func() { _, _ = io.Copy(io.Discard, c) }()
				<-done
			})
		}
	}()
	t.Cleanup(func() {
		close(done)
		_ = l.Close()
		conns.Wait()
	})
	return "redis://" + l.Addr().String() + "/0"
}

// A Valkey that accepts and never answers: every command still gives up,
// with the same message (the 20 s bound catches a hang, not a slow machine).
func TestKillSwitchValkeyHung(t *testing.T) {
	url := hungServer(t)
	for _, args := range [][]string{{"pause"}, {"resume"}, {"status"}, {"hosts"}, {"cancel", "job-1"}} {
		t.Run(args[0], func(t *testing.T) {
			t.Parallel()
			start := time.Now()
			r := runCLI(t, vars(url), args...)
			el := time.Since(start)
			if el >= 20*time.Second {
				t.Errorf("took %s", el)
			}
			if r.code != exitFailure || !strings.HasPrefix(r.stderr, "could not reach Valkey at "+url+" — is it running?") {
				t.Fatalf("%+v", r)
			}
			t.Logf("%s in %s: %s", args[0], el.Round(time.Millisecond), r.stderr)
		})
	}
}
