package inbox_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pidispatch/pidispatch/cronsync"
	"github.com/pidispatch/pidispatch/enqueue"
	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/forge"
	"github.com/pidispatch/pidispatch/forge/inbox"
	fixtures "github.com/pidispatch/pidispatch/internal/testkit/forgefixtures"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/internal/testkit/logtest"
	"github.com/pidispatch/pidispatch/jobs"
	"github.com/pidispatch/pidispatch/queue"
)

// hang bounds a wait only to catch a hang; the tests never sleep for it.
const hang = 20 * time.Second

const triggersFile = `{"triggers": [
 {"on": {"type": "comment", "id": "c", "repos": ["Codertocat/Hello-World"], "phrase": "fixed"}, "run": {"kind": "github", "flow": "fix"}}]}`

type handlerFunc func(context.Context, forge.Event) (forge.Outcome, error)

func (f handlerFunc) Handle(ctx context.Context, ev forge.Event) (forge.Outcome, error) {
	return f(ctx, ev)
}

type permFunc func(context.Context, forge.Event, forge.Need) (bool, error)

func (f permFunc) Allowed(ctx context.Context, ev forge.Event, n forge.Need) (bool, error) {
	return f(ctx, ev, n)
}

var allowAll = permFunc(func(context.Context, forge.Event, forge.Need) (bool, error) { return true, nil })

func newIntake(t *testing.T, enq forge.Enqueuer, perms forge.Permissions, logs *logtest.Buffer) *forge.Intake {
	t.Helper()
	fts, err := cronsync.ParseForgeTriggers([]byte(triggersFile))
	require.NoError(t, err)
	in, err := forge.NewIntake(forge.IntakeConfig{Enqueuer: enq,
		Permissions: map[jobs.Forge]forge.Permissions{jobs.ForgeGitHub: perms}, Logger: logs.Logger(), Host: "h1"})
	require.NoError(t, err)
	in.SetTriggers(fts)
	return in
}

// realRouter enqueues into the test's Valkey, as the receiver does.
func realRouter(t *testing.T, c redis.UniversalClient) *enqueue.Router {
	t.Helper()
	p, err := enqueue.NewProducer(c, enqueue.ProducerConfig{UnsignedQueues: []string{fleet.EveryQueue}})
	require.NoError(t, err)
	return enqueue.NewRouter(p, enqueue.RouterConfig{})
}

func pendingJobs(t *testing.T, c redis.UniversalClient) []string {
	t.Helper()
	q, err := queue.New(c, "pi-jobs", queue.Config{})
	require.NoError(t, err)
	ids, err := q.PendingIDs(context.Background(), 100)
	require.NoError(t, err)
	return ids
}

// delivery is a GitHub comment the forge sent under id: each id its own
// event, so its own body (as a forge's deliveries are).
func delivery(t *testing.T, id string) inbox.Delivery {
	t.Helper()
	body := fixtures.Edit(t, fixtures.GitHub(t, "issue_comment", "created", 0), func(m map[string]any) {
		m["comment"].(map[string]any)["node_id"] = "test-" + id
	})
	return inbox.Delivery{Forge: jobs.ForgeGitHub, ID: id, Event: "issue_comment", Body: body, Received: time.Now()}
}

// keyOf is the key the delivery of id is stored and its job named under.
func keyOf(t *testing.T, id string) string { t.Helper(); return delivery(t, id).Key() }

// keysOf are the keys of the deliveries of ids, in order.
func keysOf(t *testing.T, ids ...string) []string {
	t.Helper()
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = keyOf(t, id)
	}
	return out
}

// open opens an inbox with a spool folder of its own (or dir), quick loops
// and a short lease, changed by mods.
func open(t *testing.T, c redis.UniversalClient, h inbox.Handler, logs *logtest.Buffer, dir string, mods ...func(*inbox.Config)) *inbox.Inbox {
	t.Helper()
	if dir == "" {
		dir = filepath.Join(t.TempDir(), "spool")
	}
	cfg := inbox.Config{Valkey: c, Handler: h, SpoolDir: dir, StoreTimeout: 300 * time.Millisecond,
		Lease: 2 * time.Second, Poll: 20 * time.Millisecond, MinBackoff: 50 * time.Millisecond, Logger: logs.Logger(), Host: "h1"}
	for _, m := range mods {
		m(&cfg)
	}
	ib, err := inbox.Open(cfg)
	require.NoError(t, err)
	t.Cleanup(ib.Close)
	return ib
}

// running is an inbox's Run in the background.
type running struct {
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
	t      *testing.T
}

// stop ends Run and waits for it to return.
func (r *running) stop() {
	r.once.Do(func() {
		r.cancel()
		select {
		case <-r.done:
		case <-time.After(hang):
			r.t.Error("Run did not return after its context ended")
		}
	})
}

// start runs ib until stop (or the test's end).
func start(t *testing.T, ib *inbox.Inbox) *running {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{cancel: cancel, done: make(chan struct{}), t: t}
	go func() {
		defer close(r.done)
		assert.NoError(t, ib.Run(ctx))
	}()
	t.Cleanup(r.stop)
	return r
}

func eventually(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(hang)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, hang)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// deadValkey is a client of a port nothing listens on: every call is refused.
func deadValkey(t *testing.T) *redis.Client {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// hungValkey is a client of a server that accepts connections and never
// answers: a Valkey that stalls.
func hungValkey(t *testing.T) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: livetest.HungServer(t), ReadTimeout: time.Minute, WriteTimeout: time.Minute, MaxRetries: 3})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func TestPutStoresOnceByBody(t *testing.T) {
	db := livetest.Valkey(t)
	ctx := context.Background()
	ib := open(t, db.Client, nil, &logtest.Buffer{}, "")
	out, err := ib.Put(ctx, delivery(t, "once-1"))
	require.NoError(t, err)
	assert.Equal(t, inbox.Stored, out)
	out, err = ib.Put(ctx, delivery(t, "once-1"))
	require.NoError(t, err)
	assert.Equal(t, inbox.Duplicate, out, "the forge's second delivery of it is not stored again")
	// The signed body re-sent under new ids, and under another event type
	// header, neither of which the signature covers: the same delivery.
	for _, id := range []string{"replay-2", "replay-3"} {
		d := delivery(t, "once-1")
		d.ID = id
		out, err = ib.Put(ctx, d)
		require.NoError(t, err)
		assert.Equal(t, inbox.Duplicate, out, "the body under the new id %s", id)
	}
	d := delivery(t, "once-1")
	d.Event = "issues"
	out, err = ib.Put(ctx, d)
	require.NoError(t, err)
	assert.Equal(t, inbox.Duplicate, out, "the body under another event type")
	n, err := ib.Store().Length(ctx, jobs.ForgeGitHub)
	require.NoError(t, err)
	assert.Equal(t, int64(1), n)

	// The layout: hash-tagged by forge, the key remembered for 35 days.
	key := keyOf(t, "once-1")
	assert.Regexp(t, `^[0-9a-f]{32}$`, key)
	keys, err := db.Client.Keys(ctx, "*").Result()
	require.NoError(t, err)
	assert.ElementsMatch(t, []string{"inbox:{github}:body:" + key, "inbox:{github}:d:" + key, "inbox:{github}:due"}, keys)
	ttl, err := db.Client.TTL(ctx, "inbox:{github}:body:"+key).Result()
	require.NoError(t, err)
	assert.InDelta(t, (35 * 24 * time.Hour).Seconds(), ttl.Seconds(), 10)

	// Another event of the forge is another body, so another delivery.
	out, err = ib.Put(ctx, delivery(t, "once-2"))
	require.NoError(t, err)
	assert.Equal(t, inbox.Stored, out)

	// A delivery id stored before deliveries had keys is still remembered:
	// the forge's redelivery of it is a duplicate.
	require.NoError(t, db.Client.Set(ctx, "inbox:{github}:seen:before-keys", "1", time.Hour).Err())
	out, err = ib.Put(ctx, delivery(t, "before-keys"))
	require.NoError(t, err)
	assert.Equal(t, inbox.Duplicate, out)

	// Per forge: the same bytes from another forge are another delivery.
	d = delivery(t, "once-1")
	d.Forge = jobs.ForgeForgejo
	assert.NotEqual(t, key, d.Key())
	out, err = ib.Put(ctx, d)
	require.NoError(t, err)
	assert.Equal(t, inbox.Stored, out)
}

func TestPutPastTheBoundIsFull(t *testing.T) {
	db := livetest.Valkey(t)
	ib := open(t, db.Client, nil, &logtest.Buffer{}, "", func(c *inbox.Config) { c.MaxLength = 2 })
	for i, want := range []inbox.Outcome{inbox.Stored, inbox.Stored, inbox.Full, inbox.Duplicate} {
		id := "full-" + strconv.Itoa(min(i, 2))
		if i == 3 {
			id = "full-0"
		}
		out, err := ib.Put(context.Background(), delivery(t, id))
		require.NoError(t, err)
		assert.Equal(t, want, out, "delivery %d", i)
	}
	assert.Zero(t, ib.Spool().Files(), "a full inbox is answered, not spooled")
}

// Valkey stalls: Put waits StoreTimeout, whatever the client's own
// timeouts (a minute here), and spools the delivery.
func TestPutAgainstAStalledValkeyIsBounded(t *testing.T) {
	ib := open(t, hungValkey(t), nil, &logtest.Buffer{}, "", func(c *inbox.Config) { c.StoreTimeout = 200 * time.Millisecond })
	begin := time.Now()
	out, err := ib.Put(context.Background(), delivery(t, "stall-1"))
	took := time.Since(begin)
	require.NoError(t, err)
	assert.Equal(t, inbox.Spooled, out)
	assert.GreaterOrEqual(t, took, 200*time.Millisecond, "Valkey was given its time")
	assert.Less(t, took, 2*time.Second, "answered within the bound")
	// A later delivery joins the spool at once, behind the earlier one.
	begin = time.Now()
	out, err = ib.Put(context.Background(), delivery(t, "stall-2"))
	require.NoError(t, err)
	assert.Equal(t, inbox.Spooled, out)
	assert.Less(t, time.Since(begin), 200*time.Millisecond, "no second wait while the spool holds earlier ones")
	assert.Equal(t, int64(2), ib.Spool().Files())
}

// Valkey down and the spool full (or unwritable): stored nowhere, said at once.
func TestPutNowhereFailsAtOnce(t *testing.T) {
	logs := &logtest.Buffer{}
	ib := open(t, deadValkey(t), nil, logs, "", func(c *inbox.Config) { c.SpoolMax = 1000 })
	begin := time.Now()
	_, err := ib.Put(context.Background(), delivery(t, "nowhere-1"))
	var se *inbox.StoreError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, "spool-full", se.Reason())
	assert.ErrorIs(t, err, inbox.ErrSpoolFull)
	assert.Less(t, time.Since(begin), 500*time.Millisecond, "at once, not after a timeout")
	assert.Zero(t, ib.Spool().Files())

	// The spool's folder gone from under it (a disk unmounted, say): not
	// writable, whoever the process runs as.
	dir := filepath.Join(t.TempDir(), "spool")
	ib = open(t, deadValkey(t), nil, logs, dir)
	require.NoError(t, os.RemoveAll(dir))
	require.NoError(t, os.WriteFile(dir, nil, 0o600))
	_, err = ib.Put(context.Background(), delivery(t, "nowhere-2"))
	require.ErrorAs(t, err, &se)
	assert.Equal(t, "spool-unwritable", se.Reason())
}

// While Valkey is down, deliveries go to the spool (a second delivery of an
// id there is a duplicate); once it answers, the spool moves into Valkey in
// the order it was written.
func TestSpoolDrainsInOrderWhenValkeyReturns(t *testing.T) {
	srv := livetest.StartServer(t)
	client := srv.Client()
	ib := open(t, client, nil, &logtest.Buffer{}, "")
	srv.Stop()
	ids := []string{"z-first", "m-second", "a-third"} // written order, not name order
	for _, id := range ids {
		out, err := ib.Put(context.Background(), delivery(t, id))
		require.NoError(t, err)
		require.Equal(t, inbox.Spooled, out)
	}
	out, err := ib.Put(context.Background(), delivery(t, "m-second"))
	require.NoError(t, err)
	assert.Equal(t, inbox.Duplicate, out)
	replayed := delivery(t, "m-second")
	replayed.ID = "m-replayed"
	out, err = ib.Put(context.Background(), replayed)
	require.NoError(t, err)
	assert.Equal(t, inbox.Duplicate, out, "its body under a new id takes no room in the spool")
	_, err = ib.Drain(context.Background())
	require.Error(t, err, "Valkey is still down")
	assert.Equal(t, int64(3), ib.Spool().Files())

	srv.Start()
	n, err := ib.Drain(context.Background())
	require.NoError(t, err)
	assert.Equal(t, 3, n)
	assert.Zero(t, ib.Spool().Files())
	assert.Zero(t, ib.Spool().Bytes())
	due, err := client.ZRange(context.Background(), "inbox:{github}:due", 0, -1).Result()
	require.NoError(t, err)
	assert.Equal(t, keysOf(t, ids...), due, "due in the order received")
	entries, err := os.ReadDir(ib.Spool().Dir())
	require.NoError(t, err)
	for _, e := range entries {
		assert.Equal(t, ".lock", e.Name(), "no file left")
	}
}

// recorder is a handler that records the deliveries it is given, in order.
type recorder struct {
	mu  sync.Mutex
	ids []string
}

func (r *recorder) Handle(_ context.Context, ev forge.Event) (forge.Outcome, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ids = append(r.ids, ev.DeliveryID)
	return forge.Outcome{Status: forge.StatusEnqueued}, nil
}

func (r *recorder) seen() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.ids)
}

// A receiver that stops with deliveries in its spool leaves them on disk;
// the next one drains them at boot, oldest first. A file a crash cut short
// (.tmp-) or one that does not read back whole is never processed.
func TestRestartDrainsTheSpoolInOrderAndSkipsBrokenFiles(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "spool")
	first := open(t, deadValkey(t), nil, &logtest.Buffer{}, dir)
	ids := []string{"r-3", "r-1", "r-4", "r-2"}
	for _, id := range ids {
		out, err := first.Put(context.Background(), delivery(t, id))
		require.NoError(t, err)
		require.Equal(t, inbox.Spooled, out)
	}
	// Another receiver cannot take the folder while this one holds it.
	_, err := inbox.Open(inbox.Config{Valkey: deadValkey(t), SpoolDir: dir})
	require.ErrorContains(t, err, "in use by another receiver")
	first.Close()

	names := spoolFiles(t, dir)
	require.Len(t, names, 4)
	// The third file is cut short, as a failing disk would leave it, and a
	// write a crash interrupted is left beside them.
	third := filepath.Join(dir, names[2])
	info, err := os.Stat(third)
	require.NoError(t, err)
	require.NoError(t, os.Truncate(third, info.Size()/2))
	partial := delivery(t, "r-partial").Encode()
	require.NoError(t, os.WriteFile(filepath.Join(dir, ".tmp-99999999999999999999.dlv"), partial[:len(partial)-10], 0o600))

	db := livetest.Valkey(t)
	rec := &recorder{}
	logs := &logtest.Buffer{}
	second := open(t, db.Client, rec, logs, dir, func(c *inbox.Config) { c.Concurrency = 1 })
	assert.Equal(t, int64(4), second.Spool().Files(), "the cut file counts until it is read")
	require.Len(t, logs.Events(t, "receiver_spool_partial_removed"), 1)
	start(t, second)
	eventually(t, "the spool drained and processed", func() bool {
		return second.Spool().Files() == 0 && len(rec.seen()) == 3
	})
	assert.Equal(t, keysOf(t, "r-3", "r-1", "r-2"), rec.seen(), "oldest first; the cut file and the partial one never")
	corrupt := logs.Events(t, "receiver_spool_corrupt")
	require.Len(t, corrupt, 1)
	assert.Equal(t, names[2], corrupt[0]["file"])
	assert.Empty(t, spoolFiles(t, dir))
	_, err = os.Stat(filepath.Join(dir, ".tmp-99999999999999999999.dlv"))
	assert.ErrorIs(t, err, os.ErrNotExist)
	exists, err := db.Client.Exists(context.Background(), "inbox:{github}:body:"+keyOf(t, "r-4"), "inbox:{github}:body:"+keyOf(t, "r-partial")).Result()
	require.NoError(t, err)
	assert.Zero(t, exists, "neither broken delivery reached Valkey")
}

func spoolFiles(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		if filepath.Ext(e.Name()) == ".dlv" && e.Name()[0] != '.' {
			names = append(names, e.Name())
		}
	}
	slices.Sort(names)
	return names
}

// rateLimitedGitHub is a GitHub API double whose permission endpoint is over
// its rate limit until reset (403, x-ratelimit-remaining: 0), and answers
// write after it. The reset is set at the first lookup, a whole second
// ahead of it, so the first lookup is always refused however slowly the
// test reaches it. It records when each lookup came.
type rateLimitedGitHub struct {
	*httptest.Server
	reset time.Time
	mu    sync.Mutex
	calls []time.Time
}

func newRateLimitedGitHub(t *testing.T) *rateLimitedGitHub {
	t.Helper()
	g := &rateLimitedGitHub{}
	g.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		now := time.Now()
		g.mu.Lock()
		g.calls = append(g.calls, now)
		if g.reset.IsZero() {
			g.reset = time.Unix(now.Unix()+1, 0)
		}
		reset := g.reset
		g.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path != "/repos/Codertocat/Hello-World/collaborators/Codertocat/permission" {
			http.Error(w, `{"message":"Not Found"}`, http.StatusNotFound)
			return
		}
		if now.Before(reset) {
			w.Header().Set("X-RateLimit-Limit", "5000")
			w.Header().Set("X-RateLimit-Remaining", "0")
			w.Header().Set("X-RateLimit-Reset", strconv.FormatInt(reset.Unix(), 10))
			w.WriteHeader(http.StatusForbidden)
			fmt.Fprint(w, `{"message":"API rate limit exceeded for installation ID 1."}`)
			return
		}
		fmt.Fprint(w, `{"permission":"write","role_name":"write"}`)
	}))
	t.Cleanup(g.Close)
	return g
}

func (g *rateLimitedGitHub) resetAt() time.Time {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.reset
}

func (g *rateLimitedGitHub) lookups() []time.Time {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.calls)
}

// A permission lookup the forge rate-limits is neither refused nor
// hammered: the delivery waits for the limit's reset, is looked up once
// more, and its job is enqueued.
func TestRateLimitedLookupIsProcessedAfterTheReset(t *testing.T) {
	db := livetest.Valkey(t)
	gh := newRateLimitedGitHub(t)
	logs := &logtest.Buffer{}
	in := newIntake(t, realRouter(t, db.Client),
		forge.GitHubPermissions{BaseURL: gh.URL, Tokens: forge.StaticToken("pat")}, logs)
	ib := open(t, db.Client, in, logs, "")
	reg := prometheus.NewRegistry()
	reg.MustRegister(ib.Collectors()...)
	out, err := ib.Put(context.Background(), delivery(t, "limited-1"))
	require.NoError(t, err)
	require.Equal(t, inbox.Stored, out)
	start(t, ib)
	eventually(t, "the job enqueued", func() bool { return len(logs.Events(t, "forge_enqueued")) == 1 })

	calls := gh.lookups()
	require.Len(t, calls, 2, "one lookup refused for the limit, one after its reset; none in between")
	assert.False(t, calls[1].Before(gh.resetAt()), "looked up again only after the reset")
	assert.Equal(t, []string{"gh-" + keyOf(t, "limited-1")}, pendingJobs(t, db.Client))
	assert.Empty(t, logs.Events(t, "forge_refused"), "a rate limit is no refusal")
	retry := logs.Events(t, "forge_delivery_retry")
	require.Len(t, retry, 1)
	assert.Equal(t, "rate-limited", retry[0]["reason"])
	assert.Equal(t, 1.0, counter(t, reg, "pidispatch_receiver_inbox_retries_total", "rate-limited"))
	eventually(t, "the delivery done", func() bool {
		n, err := ib.Store().Length(context.Background(), jobs.ForgeGitHub)
		return err == nil && n == 0
	})
}

// counter is the value of the series of the counter name in reg whose label
// holds value.
func counter(t *testing.T, reg *prometheus.Registry, name, value string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetValue() == value {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatalf("no %s{...=%q}", name, value)
	return 0
}

// A lookup that fails (a 5xx) is retried; a person the forge does not know
// (404) stays a refusal, decided once.
func TestFailedLookupIsRetriedAndAnOutsiderRefused(t *testing.T) {
	db := livetest.Valkey(t)
	var mu sync.Mutex
	calls := map[string]int{}
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		calls[r.URL.Path]++
		n := calls[r.URL.Path]
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path != "/repos/Codertocat/Hello-World/collaborators/Codertocat/permission" {
			http.Error(w, `{"message":"Not Found"}`, http.StatusNotFound)
			return
		}
		if n <= 2 {
			http.Error(w, `{"message":"Server Error"}`, http.StatusBadGateway)
			return
		}
		fmt.Fprint(w, `{"permission":"write","role_name":"write"}`)
	}))
	defer api.Close()
	logs := &logtest.Buffer{}
	in := newIntake(t, realRouter(t, db.Client), forge.GitHubPermissions{BaseURL: api.URL, Tokens: forge.StaticToken("pat")}, logs)
	ib := open(t, db.Client, in, logs, "")
	outsider := delivery(t, "outsider-1")
	outsider.Body = fixtures.Edit(t, outsider.Body, func(m map[string]any) {
		m["sender"].(map[string]any)["login"] = "mallory"
	})
	for _, d := range []inbox.Delivery{delivery(t, "flaky-1"), outsider} {
		_, err := ib.Put(context.Background(), d)
		require.NoError(t, err)
	}
	start(t, ib)
	eventually(t, "both decided", func() bool {
		n, err := ib.Store().Length(context.Background(), jobs.ForgeGitHub)
		return err == nil && n == 0
	})
	assert.Equal(t, []string{"gh-" + keyOf(t, "flaky-1")}, pendingJobs(t, db.Client))
	refused := logs.Events(t, "forge_refused")
	require.Len(t, refused, 1)
	assert.Equal(t, outsider.Key(), refused[0]["delivery"])
	assert.Equal(t, "author-not-allowed", refused[0]["reason"])
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, 1, calls["/repos/Codertocat/Hello-World/collaborators/mallory/permission"], "a refusal is not asked again")
	retries := logs.Events(t, "forge_delivery_retry")
	require.Len(t, retries, 2)
	assert.Equal(t, "lookup-failed", retries[0]["reason"])
}

// The forge never delivers again, and the processor dies after the job was
// enqueued but before it marked the delivery done: when its lease ends,
// another processor takes the delivery, and the job, whose id is the
// delivery's, is one job.
func TestCrashedProcessorLeavesItToAnother(t *testing.T) {
	db := livetest.Valkey(t)
	logs := &logtest.Buffer{}
	in := newIntake(t, realRouter(t, db.Client), allowAll, logs)
	enqueued, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	crashing := handlerFunc(func(ctx context.Context, ev forge.Event) (forge.Outcome, error) {
		out, err := in.Handle(ctx, ev)
		once.Do(func() { close(enqueued) })
		<-release // dead: it never says done
		return out, err
	})
	short := func(c *inbox.Config) { c.Lease = 500 * time.Millisecond }
	var released sync.Once
	wake := func() { released.Do(func() { close(release) }) }
	logsA := &logtest.Buffer{}
	a := open(t, db.Client, crashing, logsA, "", short)
	runA := start(t, a)
	t.Cleanup(wake)
	_, err := a.Put(context.Background(), delivery(t, "crash-1"))
	require.NoError(t, err)
	select {
	case <-enqueued:
	case <-time.After(hang):
		t.Fatal("the first processor never took the delivery")
	}
	runA.cancel() // it takes nothing more: dead
	require.Equal(t, []string{"gh-" + keyOf(t, "crash-1")}, pendingJobs(t, db.Client))

	logsB := &logtest.Buffer{}
	b := open(t, db.Client, in, logsB, "", short)
	start(t, b)
	eventually(t, "the second processor finished it", func() bool {
		n, err := b.Store().Length(context.Background(), jobs.ForgeGitHub)
		return err == nil && n == 0
	})
	assert.Equal(t, []string{"gh-" + keyOf(t, "crash-1")}, pendingJobs(t, db.Client), "one job")
	enq := logs.Events(t, "forge_enqueued")
	require.Len(t, enq, 2, "processed twice (at least once)...")
	assert.Equal(t, true, enq[0]["added"])
	assert.Equal(t, false, enq[1]["added"], "...with one effect")
	require.Len(t, logsB.Events(t, "forge_delivery_lease_expired"), 1)

	// The dead one wakes: its lease is gone, it changes nothing.
	wake()
	runA.stop()
	require.Len(t, logsA.Events(t, "forge_delivery_lease_lost"), 1)
	assert.Equal(t, []string{"gh-" + keyOf(t, "crash-1")}, pendingJobs(t, db.Client))
}

// A delivery that cannot be decided within MaxAge is given up, logged with
// its reason; its id stays remembered.
func TestGivesUpAfterMaxAge(t *testing.T) {
	db := livetest.Valkey(t)
	logs := &logtest.Buffer{}
	failing := handlerFunc(func(context.Context, forge.Event) (forge.Outcome, error) {
		return forge.Outcome{}, fmt.Errorf("%w: status 503", forge.ErrLookup)
	})
	ib := open(t, db.Client, failing, logs, "", func(c *inbox.Config) {
		c.MaxAge, c.MinBackoff = 400*time.Millisecond, 100*time.Millisecond
	})
	_, err := ib.Put(context.Background(), delivery(t, "doomed-1"))
	require.NoError(t, err)
	start(t, ib)
	eventually(t, "given up", func() bool { return len(logs.Events(t, "forge_delivery_abandoned")) == 1 })
	ab := logs.Events(t, "forge_delivery_abandoned")[0]
	assert.Equal(t, "lookup-failed", ab["reason"])
	assert.Equal(t, keyOf(t, "doomed-1"), ab["delivery"])
	assert.Equal(t, "doomed-1", ab["forgeDelivery"])
	assert.Equal(t, "h1", ab["host"])
	assert.NotEmpty(t, logs.Events(t, "forge_delivery_retry"), "retried before giving up")
	n, err := ib.Store().Length(context.Background(), jobs.ForgeGitHub)
	require.NoError(t, err)
	assert.Zero(t, n)
	out, err := ib.Put(context.Background(), delivery(t, "doomed-1"))
	require.NoError(t, err)
	assert.Equal(t, inbox.Duplicate, out)
}

// A stored entry changed in Valkey is re-validated when read back and given
// up, never handed to the intake.
func TestChangedEntryIsNeverHandled(t *testing.T) {
	db := livetest.Valkey(t)
	logs := &logtest.Buffer{}
	rec := &recorder{}
	ib := open(t, db.Client, rec, logs, "")
	_, err := ib.Put(context.Background(), delivery(t, "changed-1"))
	require.NoError(t, err)
	other := delivery(t, "other-1").Encode()
	require.NoError(t, db.Client.HSet(context.Background(), "inbox:{github}:d:"+keyOf(t, "changed-1"), "env", other).Err())
	start(t, ib)
	eventually(t, "given up", func() bool { return len(logs.Events(t, "forge_delivery_abandoned")) == 1 })
	assert.Equal(t, "invalid", logs.Events(t, "forge_delivery_abandoned")[0]["reason"])
	assert.Empty(t, rec.seen())
}

// An entry stored before deliveries had keys sits under its delivery id:
// it is still processed, its job named after that id as it was then.
func TestEntryStoredBeforeKeysIsProcessed(t *testing.T) {
	db := livetest.Valkey(t)
	ctx := context.Background()
	logs := &logtest.Buffer{}
	ib := open(t, db.Client, newIntake(t, realRouter(t, db.Client), allowAll, logs), logs, "")
	d := delivery(t, "old-1")
	require.NoError(t, db.Client.HSet(ctx, "inbox:{github}:d:old-1", "env", d.Encode(), "recv", time.Now().UnixMicro(), "tries", 0).Err())
	require.NoError(t, db.Client.ZAdd(ctx, "inbox:{github}:due", redis.Z{Score: float64(time.Now().UnixMicro()), Member: "old-1"}).Err())
	start(t, ib)
	eventually(t, "the old entry processed", func() bool {
		n, err := ib.Store().Length(ctx, jobs.ForgeGitHub)
		return err == nil && n == 0
	})
	assert.Equal(t, []string{"gh-old-1"}, pendingJobs(t, db.Client))
	assert.Empty(t, logs.Events(t, "forge_delivery_abandoned"))
}
