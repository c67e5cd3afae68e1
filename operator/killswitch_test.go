package operator_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/fleetstate"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/operator"
	"github.com/pidispatch/pidispatch/queue"
	"github.com/pidispatch/pidispatch/registry"
	"github.com/pidispatch/pidispatch/valkey"
)

// publishHost writes a registry row for name, as a worker's beat does.
func publishHost(t *testing.T, client redis.UniversalClient, name string, routes bool) *registry.Registry {
	t.Helper()
	r, err := registry.New(client, name, registry.Facts{
		Routes:      registry.Value(routes),
		Concurrency: registry.Value(2),
		TZ:          registry.Value("UTC"),
	}, registry.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Publish(context.Background()); err != nil {
		t.Fatal(err)
	}
	return r
}

// mustQueue returns the named queue of client.
func mustQueue(t *testing.T, client redis.UniversalClient, name string) *queue.Queue {
	t.Helper()
	q, err := queue.New(client, name, queue.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return q
}

func isPaused(t *testing.T, q *queue.Queue) bool {
	t.Helper()
	p, err := q.IsPaused(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func flagSet(t *testing.T, client redis.UniversalClient) bool {
	t.Helper()
	n, err := client.Exists(context.Background(), fleetstate.PausedKey).Result()
	if err != nil {
		t.Fatal(err)
	}
	return n == 1
}

// The set is the union of routing rows and existing host queues: a host
// whose row is gone still has its queue acted on; an undeclared host and a
// junk meta key add nothing.
func TestFleetQueuesUnion(t *testing.T) {
	db := livetest.Valkey(t)
	ctx := context.Background()
	publishHost(t, db.Client, "alpha", true)  // routes, no queue yet
	publishHost(t, db.Client, "quiet", false) // undeclared: contributes nothing
	down := mustQueue(t, db.Client, fleet.HostQueueName("bravo"))
	if err := down.Declare(ctx); err != nil { // a host that is down: queue, no row
		t.Fatal(err)
	}
	if err := db.Client.HSet(ctx, "bull:pi-jobs@bad name:meta", "paused", 1).Err(); err != nil {
		t.Fatal(err)
	}

	set, err := operator.FleetQueues(ctx, db.Client)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"pi-jobs", "pi-jobs@alpha", "pi-jobs@bravo"}
	if !slices.Equal(set.Names, want) || set.Degraded() {
		t.Fatalf("FleetQueues = %+v, want %v and not degraded", set, want)
	}
}

// An unreadable registry fails open to the keyspace, and is named.
func TestFleetQueuesRegistryUnreadable(t *testing.T) {
	db := livetest.Valkey(t)
	ctx := context.Background()
	if err := db.Client.Set(ctx, registry.LiveKey, "junk", 0).Err(); err != nil { // wrong type
		t.Fatal(err)
	}
	if err := mustQueue(t, db.Client, fleet.HostQueueName("bravo")).Declare(ctx); err != nil {
		t.Fatal(err)
	}
	set, err := operator.FleetQueues(ctx, db.Client)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(set.Names, []string{"pi-jobs", "pi-jobs@bravo"}) {
		t.Fatalf("names = %v", set.Names)
	}
	if !errors.Is(set.RegistryErr, registry.ErrUnreachable) || set.DiscoveryErr != nil {
		t.Fatalf("errors = %v / %v", set.RegistryErr, set.DiscoveryErr)
	}
}

// Both reads fail against a dead Valkey: the set is the shared queue alone,
// both failures named, within the budget.
func TestFleetQueuesValkeyDown(t *testing.T) {
	srv := livetest.StartServer(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), DialTimeout: time.Second, MaxRetries: -1, DialerRetries: 1})
	t.Cleanup(func() { _ = c.Close() })
	srv.Stop()
	start := time.Now()
	set, err := operator.FleetQueues(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el > 10*operator.FleetReadTimeout { // catches a hang, not a slow machine
		t.Fatalf("took %s", el)
	}
	if !slices.Equal(set.Names, []string{"pi-jobs"}) || set.RegistryErr == nil || set.DiscoveryErr == nil {
		t.Fatalf("set = %+v", set)
	}
	r, err := operator.Pause(context.Background(), c, set)
	if err == nil || !r.NotSent || len(r.Changed) != 0 {
		t.Fatalf("Pause with Valkey down = %+v, %v; want a not-sent error", r, err)
	}
}

// The kill switch over three queues, one of a host that is down; the fleet
// flag makes a host queue declared during the pause start paused.
func TestKillSwitchFleet(t *testing.T) {
	db := livetest.Valkey(t)
	ctx := context.Background()
	publishHost(t, db.Client, "alpha", true)
	gone := publishHost(t, db.Client, "bravo", true)
	bravo := mustQueue(t, db.Client, fleet.HostQueueName("bravo"))
	if err := bravo.Declare(ctx); err != nil {
		t.Fatal(err)
	}
	if err := gone.Close(ctx); err != nil { // bravo goes down: row deleted, queue stays
		t.Fatal(err)
	}
	shared := mustQueue(t, db.Client, fleet.SharedQueue)
	alpha := mustQueue(t, db.Client, fleet.HostQueueName("alpha"))
	for i, q := range []*queue.Queue{shared, alpha, bravo} {
		if _, _, err := q.Add(ctx, "j", json.RawMessage(`{}`), queue.AddOptions{JobID: "w" + string(rune('0'+i))}); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := bravo.Add(ctx, "j", json.RawMessage(`{}`), queue.AddOptions{JobID: "d1", Delay: time.Hour}); err != nil {
		t.Fatal(err)
	}

	set, err := operator.FleetQueues(ctx, db.Client)
	if err != nil {
		t.Fatal(err)
	}
	if len(set.Names) != 3 {
		t.Fatalf("set = %v", set.Names)
	}
	res, err := operator.Pause(ctx, db.Client, set)
	if err != nil || !res.Complete() {
		t.Fatalf("Pause = %+v, %v", res, err)
	}
	for _, q := range []*queue.Queue{shared, alpha, bravo} {
		if !isPaused(t, q) {
			t.Errorf("%s not paused", q.Name())
		}
	}
	if !flagSet(t, db.Client) {
		t.Fatal("pause did not set the fleet flag")
	}
	st, err := operator.Status(ctx, db.Client, set)
	if err != nil {
		t.Fatal(err)
	}
	// BullMQ 6's layout (the default): a paused queue's jobs stay waiting.
	want := operator.StatusReport{PausedState: true, Waiting: 3, Delayed: 1, PauseFlag: true, Queues: 3}
	if !statusEqual(st, want) {
		t.Fatalf("status = %+v, want %+v", st, want)
	}

	// A host joining during the pause starts paused, and takes nothing.
	late := mustQueue(t, db.Client, fleet.HostQueueName("charlie"))
	if p, err := fleetstate.DeclareHostQueue(ctx, late); err != nil || !p {
		t.Fatalf("DeclareHostQueue during pause = %v, %v", p, err)
	}
	if _, _, err := late.Add(ctx, "j", json.RawMessage(`{}`), queue.AddOptions{JobID: "late"}); err != nil {
		t.Fatal(err)
	}
	if j, err := late.Fetch(ctx, queue.NewToken()); err != nil || j != nil {
		t.Fatalf("a paused late queue gave %v, %v", j, err)
	}

	set, _ = operator.FleetQueues(ctx, db.Client)
	res, err = operator.Resume(ctx, db.Client, set)
	if err != nil || !res.Complete() || len(res.Changed) != 4 {
		t.Fatalf("Resume = %+v, %v", res, err)
	}
	for _, q := range []*queue.Queue{shared, alpha, bravo, late} {
		if isPaused(t, q) {
			t.Errorf("%s still paused", q.Name())
		}
	}
	if flagSet(t, db.Client) {
		t.Fatal("resume did not clear the fleet flag")
	}
	later := mustQueue(t, db.Client, fleet.HostQueueName("delta"))
	if p, err := fleetstate.DeclareHostQueue(ctx, later); err != nil || p {
		t.Fatalf("DeclareHostQueue after resume = %v, %v", p, err)
	}
	if j, err := late.Fetch(ctx, queue.NewToken()); err != nil || j == nil || j.ID != "late" {
		t.Fatalf("resumed late queue gave %v, %v", j, err)
	}
}

func statusEqual(a, b operator.StatusReport) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

// A queue paused on its own (not by the flag) stays paused through a
// DeclareHostQueue, and reads as such.
func TestDeclareHostQueueKeepsAPausedQueue(t *testing.T) {
	db := livetest.Valkey(t)
	ctx := context.Background()
	q := mustQueue(t, db.Client, fleet.HostQueueName("alpha"))
	if err := q.Pause(ctx); err != nil {
		t.Fatal(err)
	}
	if p, err := fleetstate.DeclareHostQueue(ctx, q); err != nil || !p {
		t.Fatalf("= %v, %v", p, err)
	}
	if _, err := fleetstate.DeclareHostQueue(ctx, nil); err == nil {
		t.Fatal("nil queue accepted")
	}
}

// Status of a half-paused fleet names the paused queues.
func TestStatusPartial(t *testing.T) {
	db := livetest.Valkey(t)
	ctx := context.Background()
	for _, n := range []string{"alpha", "bravo"} {
		if err := mustQueue(t, db.Client, fleet.HostQueueName(n)).Declare(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := mustQueue(t, db.Client, fleet.HostQueueName("bravo")).Pause(ctx); err != nil {
		t.Fatal(err)
	}
	set, err := operator.FleetQueues(ctx, db.Client)
	if err != nil {
		t.Fatal(err)
	}
	st, err := operator.Status(ctx, db.Client, set)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := json.Marshal(st)
	want := `{"pausedState":false,"pausedPartial":true,"pausedQueues":["pi-jobs@bravo"],"waiting":0,"active":0,"paused":0,"delayed":0,"failed":0,"completed":0,"refused":0,"cancelled":0,"prioritized":0,"pauseFlag":false,"queues":3,"held":0}`
	if string(got) != want {
		t.Fatalf("status\n got %s\nwant %s", got, want)
	}
}

// A queue whose meta key a peer broke (wrong type) refuses its part of the
// pause; the others and the flag still change, and the result says exactly
// that, as the keyspace confirms.
func TestPauseFailureReportsWhatChanged(t *testing.T) {
	db := livetest.Valkey(t)
	ctx := context.Background()
	if err := mustQueue(t, db.Client, fleet.HostQueueName("charlie")).Declare(ctx); err != nil {
		t.Fatal(err)
	}
	// pi-jobs@bravo sorts second among the host queues; its meta is a STRING.
	if err := db.Client.Set(ctx, "bull:pi-jobs@bravo:meta", "junk", 0).Err(); err != nil {
		t.Fatal(err)
	}
	set, err := operator.FleetQueues(ctx, db.Client)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(set.Names, []string{"pi-jobs", "pi-jobs@bravo", "pi-jobs@charlie"}) {
		t.Fatalf("set = %v", set.Names)
	}
	res, err := operator.Pause(ctx, db.Client, set)
	var ke *operator.KillError
	if !errors.As(err, &ke) {
		t.Fatalf("Pause error = %v, want a *KillError", err)
	}
	if !slices.Equal(res.Changed, []string{"pi-jobs", "pi-jobs@charlie"}) || !res.FlagChanged ||
		len(res.Failed) != 1 || res.Failed[0].Queue != "pi-jobs@bravo" || res.NotSent {
		t.Fatalf("result = %+v", res)
	}
	// The report is the truth.
	if !isPaused(t, mustQueue(t, db.Client, "pi-jobs")) || !isPaused(t, mustQueue(t, db.Client, "pi-jobs@charlie")) || !flagSet(t, db.Client) {
		t.Fatal("reported changes did not happen")
	}
	if v, _ := db.Client.Get(ctx, "bull:pi-jobs@bravo:meta").Result(); v != "junk" {
		t.Fatalf("failed queue's meta = %q", v)
	}
	if _, err := operator.Status(ctx, db.Client, set); err == nil {
		t.Fatal("status summed without an unreadable queue")
	}
	// Resume is refused on the same queue, and again reports it.
	res, err = operator.Resume(ctx, db.Client, set)
	if !errors.As(err, &ke) || len(res.Failed) != 1 || len(res.Changed) != 2 || !res.FlagChanged {
		t.Fatalf("Resume = %+v, %v", res, err)
	}
	if isPaused(t, mustQueue(t, db.Client, "pi-jobs")) || flagSet(t, db.Client) {
		t.Fatal("resume did not apply to the healthy parts")
	}
}

// A host queue declared between the fleet read and the round trip (a worker
// booting then saw the flag as it was) is caught by the sweep, for pause and
// for resume alike.
func TestKillSwitchSweepsQueuesDeclaredMeanwhile(t *testing.T) {
	db := livetest.Valkey(t)
	ctx := context.Background()
	set, err := operator.FleetQueues(ctx, db.Client)
	if err != nil {
		t.Fatal(err)
	}
	early := mustQueue(t, db.Client, fleet.HostQueueName("early"))
	if p, err := fleetstate.DeclareHostQueue(ctx, early); err != nil || p {
		t.Fatalf("declared before the pause: %v %v", p, err)
	}
	res, err := operator.Pause(ctx, db.Client, set)
	if err != nil || !slices.Equal(res.Queues, []string{"pi-jobs", "pi-jobs@early"}) || !res.Complete() {
		t.Fatalf("Pause = %+v, %v", res, err)
	}
	if !isPaused(t, early) {
		t.Fatal("the queue declared meanwhile was not paused")
	}

	set, _ = operator.FleetQueues(ctx, db.Client)
	late := mustQueue(t, db.Client, fleet.HostQueueName("late"))
	if p, err := fleetstate.DeclareHostQueue(ctx, late); err != nil || !p {
		t.Fatalf("declared during the pause: %v %v", p, err)
	}
	res, err = operator.Resume(ctx, db.Client, set)
	if err != nil || len(res.Queues) != 3 || !res.Complete() {
		t.Fatalf("Resume = %+v, %v", res, err)
	}
	if isPaused(t, late) || isPaused(t, early) {
		t.Fatal("a queue was left paused forever")
	}
}

// Pause and status of a single-host deployment: the shared queue only.
func TestPauseSharedOnly(t *testing.T) {
	db := livetest.Valkey(t)
	ctx := context.Background()
	set, err := operator.FleetQueues(ctx, db.Client)
	if err != nil {
		t.Fatal(err)
	}
	if res, err := operator.Pause(ctx, db.Client, set); err != nil || !slices.Equal(res.Changed, []string{"pi-jobs"}) {
		t.Fatalf("= %+v, %v", res, err)
	}
	if res, err := operator.Pause(ctx, db.Client, operator.QueueSet{Names: []string{"pi-jobs", "no:pe"}}); err == nil || len(res.Changed) != 0 {
		t.Fatalf("an invalid name must refuse the whole call: %+v, %v", res, err)
	}
}

// The operator's kill switch: read the fleet's queues (failing open, but
// naming a degraded read), then pause them all and set the fleet flag in one
// round trip.
func ExamplePause() {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true})
	defer client.Close()
	ctx := context.Background()
	set, err := operator.FleetQueues(ctx, client)
	if err != nil {
		return
	}
	if set.RegistryErr != nil {
		fmt.Println("registry unreadable:", set.RegistryErr.Error())
	}
	res, err := operator.Pause(ctx, client, set)
	var ke *operator.KillError
	if errors.As(err, &ke) {
		fmt.Println("paused", len(res.Changed), "of", len(res.Queues), "queues; failed at", res.Failed[0].Queue)
	}
}

// A server that refuses the client's password serves no part of a pause or
// resume: the call fails, says nothing changed, and names the refusal,
// whichever client is used (a plain go-redis one reports the handshake's
// refusal on no command, the shared constructor's reports it on every one).
func TestKillSwitchAuthRefused(t *testing.T) {
	srv := livetest.StartServer(t)
	ctx := context.Background()
	if err := srv.Client().ConfigSet(ctx, "requirepass", "pw1").Err(); err != nil {
		t.Fatal(err)
	}
	shared, err := valkey.NewClient(srv.URL(), valkey.Options{OneShot: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = shared.Close() })
	plain := redis.NewClient(&redis.Options{Addr: srv.Addr(), Password: "wrong", MaxRetries: -1})
	t.Cleanup(func() { _ = plain.Close() })
	for _, tc := range []struct {
		name   string
		client *redis.Client
		want   error
	}{{"shared constructor", shared, valkey.ErrAuthRefused}, {"plain client", plain, queue.ErrTxRefused}} {
		set, err := operator.FleetQueues(ctx, tc.client)
		if err != nil {
			t.Fatal(err)
		}
		for _, act := range []func(context.Context, redis.UniversalClient, operator.QueueSet) (operator.KillResult, error){operator.Pause, operator.Resume} {
			r, err := act(ctx, tc.client, set)
			var ke *operator.KillError
			if !errors.Is(err, tc.want) || errors.As(err, &ke) || !r.NotSent || len(r.Changed) != 0 || r.FlagChanged {
				t.Fatalf("%s: %+v, %v", tc.name, r, err)
			}
		}
	}
}
