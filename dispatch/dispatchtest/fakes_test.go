package dispatchtest_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/pidispatch/pidispatch/capabilities"
	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/dispatch/container"
	"github.com/pidispatch/pidispatch/dispatch/dispatchtest"
)

// Next blocks until a job is added, hands out the first queue's first, and
// returns when ctx ends or the source closes: it leaves no goroutine.
func TestSourceNext(t *testing.T) {
	a, b := dispatchtest.NewQueue("pi-jobs"), dispatchtest.NewQueue("pi-jobs@h")
	src := dispatchtest.NewSource(a, b)
	got := make(chan string, 1)
	go func() {
		q, j, err := src.Next(context.Background(), "tok")
		if err != nil {
			got <- err.Error()
			return
		}
		got <- q.Name() + "/" + j.ID
	}()
	time.Sleep(20 * time.Millisecond)
	b.Add(dispatchtest.Job{ID: "on-host", Data: []byte(`{}`)})
	if g := <-got; g != "pi-jobs@h/on-host" {
		t.Fatalf("Next = %s", g)
	}
	a.Add(dispatchtest.Job{ID: "shared", Data: []byte(`{}`)})
	b.Add(dispatchtest.Job{ID: "host-2", Data: []byte(`{}`)})
	if q, j, err := src.Next(context.Background(), "tok2"); err != nil || q.Name() != "pi-jobs" || j.ID != "shared" {
		t.Fatalf("Next = %v %+v %v, want the first queue's job first", q, j, err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	b.Take("x") // nothing left
	if _, _, err := src.Next(ctx, "tok3"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Next on an empty source: %v, want ctx's error", err)
	}
	done := make(chan error, 1)
	go func() { _, _, err := src.Next(context.Background(), "tok4"); done <- err }()
	time.Sleep(20 * time.Millisecond)
	_ = src.Close()
	if err := <-done; !errors.Is(err, dispatchtest.ErrSourceClosed) {
		t.Fatalf("Next after Close: %v", err)
	}
}

// A deferred job comes back once its delay has passed.
func TestSourceDelayedJobComesBack(t *testing.T) {
	q := dispatchtest.NewQueue("pi-jobs")
	q.Add(dispatchtest.Job{ID: "d", Data: []byte(`{}`)})
	src := dispatchtest.NewSource(q)
	if _, _, err := src.Next(context.Background(), "t1"); err != nil {
		t.Fatal(err)
	}
	if err := q.Defer(context.Background(), "d", "t1", 50*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	_, j, err := src.Next(ctx, "t2")
	if err != nil || j.ID != "d" || time.Since(start) < 40*time.Millisecond {
		t.Fatalf("Next = %+v %v after %s, want d after its delay", j, err, time.Since(start))
	}
	if s, _ := q.Snapshot("d"); s.Deferrals != 1 || s.Takes != 2 || s.AttemptsMade != 0 {
		t.Fatalf("snapshot %+v", s)
	}
}

// A cancel asked before the run is watched stops it as soon as it is.
func TestCancelsBeforeWatch(t *testing.T) {
	c := dispatchtest.NewCancels()
	c.Cancel("j")
	stopped := false
	stop := c.Watch(context.Background(), "j", func() { stopped = true })
	defer stop()
	if !stopped || !c.Cancelled("j") {
		t.Fatal("an early cancel was lost")
	}
	ctx, cancel := context.WithCancel(context.Background())
	c.Watch(ctx, "k", func() {})
	cancel()
	deadline := time.Now().Add(time.Second)
	for c.Watching("k") {
		if time.Now().After(deadline) {
			t.Fatal("a watch outlived its ctx")
		}
		time.Sleep(time.Millisecond)
	}
}

// The runtime reports exits 125 to 127 never started, as Docker's does, and
// records what it ran.
func TestRuntimeScripts(t *testing.T) {
	rt := dispatchtest.NewRuntime()
	rt.Script("bad", container.Result{ExitCode: 126}, nil)
	res, err := rt.Run(context.Background(), container.Spec{JobID: "bad", Env: map[string]string{"A": "1"}})
	if err != nil || !res.NeverStarted {
		t.Fatalf("exit 126 = %+v %v, want never started", res, err)
	}
	res, err = rt.Run(context.Background(), container.Spec{JobID: "ok"})
	if err != nil || res.ExitCode != 0 || res.Container == "" || res.StartedAt.IsZero() {
		t.Fatalf("default run = %+v %v", res, err)
	}
	if specs := rt.Specs(); len(specs) != 2 || specs[0].Env["A"] != "1" {
		t.Fatalf("specs %+v", specs)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if res, err := dispatchtest.BlockUntilStopped(ctx, container.Spec{JobID: "s"}); !res.Cancelled || err == nil {
		t.Fatalf("stopped run = %+v %v", res, err)
	}
}

// Registry.Start refuses a name a live host holds.
func TestRegistryNameInUse(t *testing.T) {
	r := dispatchtest.NewRegistry("h1")
	if err := r.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	dup := dispatchtest.NewRegistry("h1", mustLive(t, r)...)
	if err := dup.Start(context.Background()); !errors.Is(err, dispatch.ErrNameInUse) {
		t.Fatalf("Start of a name in use: %v", err)
	}
}

func mustLive(t *testing.T, r dispatch.Registry) []capabilities.Host {
	hosts, err := r.ReadLive(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return hosts
}
