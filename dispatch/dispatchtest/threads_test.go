package dispatchtest_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/dispatch/dispatchtest"
)

// The fake fleet's hosts share one Threads, as the hosts of a Valkey fleet
// share its keys: what one host holds, the other waits behind.
func TestFakeFleetSharesThreads(t *testing.T) {
	c := dispatchtest.MakeFleet(t, 2)
	a, b := c.Hosts[0].Deps.Threads, c.Hosts[1].Deps.Threads
	if a == nil || b == nil {
		t.Fatal("the fake fleet opens no Threads")
	}
	ctx := t.Context()
	const thread = "github:acme/widgets#7"
	if r, err := a.Turn(ctx, thread, "gh-1", time.Now(), time.Hour); err != nil || !r.Granted {
		t.Fatalf("host-1: %+v, %v; want granted", r, err)
	}
	if r, err := b.Turn(ctx, thread, "gh-0", time.Now().Add(-time.Hour), time.Hour); err != nil || r.Granted || r.Behind != "gh-1" {
		t.Fatalf("host-2: %+v, %v; want behind gh-1", r, err)
	}
	line, holder := c.Fleet.Threads.Line(thread)
	if fmt.Sprint(line) != "[gh-0 gh-1]" || holder != "gh-1" {
		t.Fatalf("Line = %v held by %q, want [gh-0 gh-1] held by gh-1", line, holder)
	}
	// The fleet's clock moves the fake's: an hour on, the holder's ttl has
	// lapsed and gh-0, silent for longer than StaleAfter, is dropped.
	c.Fleet.Clock.Advance(time.Hour + time.Second)
	if r, err := b.Turn(ctx, thread, "gh-2", time.Now(), time.Hour); err != nil || !r.Granted {
		t.Fatalf("an hour on: %+v, %v; want granted", r, err)
	}
}

// The fake holds a line to MaxLine jobs as the Valkey store does, and
// SetErr fails every call of every view until it is cleared.
func TestFakeThreadsBoundAndErr(t *testing.T) {
	th := dispatchtest.NewThreads()
	th.MaxLine = 2
	ctx := context.Background()
	const thread = "github:acme/widgets#7"
	base := time.Now().Add(-time.Minute)
	for i, id := range []string{"gh-1", "gh-2"} {
		if _, err := th.Turn(ctx, thread, id, base.Add(time.Duration(i)*time.Second), time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	if r, err := th.Turn(ctx, thread, "gh-0", base.Add(-time.Hour), time.Hour); err != nil || r != (dispatch.ThreadTurn{Behind: "gh-1"}) {
		t.Fatalf("past the bound: %+v, %v; want behind gh-1", r, err)
	}
	if line, _ := th.Line(thread); len(line) != 2 {
		t.Fatalf("Line = %v, want two jobs: the third was not added", line)
	}
	view := th.WithStaleAfter(time.Second)
	boom := errors.New("boom")
	th.SetErr(boom)
	if _, err := view.Turn(ctx, thread, "gh-1", base, time.Hour); !errors.Is(err, dispatchtest.ErrThreadsUnavailable) || !errors.Is(err, boom) {
		t.Fatalf("Turn with SetErr = %v, want ErrThreadsUnavailable wrapping boom", err)
	}
	if err := view.Done(ctx, thread, "gh-1"); !errors.Is(err, dispatchtest.ErrThreadsUnavailable) {
		t.Fatalf("Done with SetErr = %v", err)
	}
	th.SetErr(nil)
	if r, err := view.Turn(ctx, thread, "gh-1", base, time.Hour); err != nil || !r.Granted {
		t.Fatalf("after SetErr(nil): %+v, %v; want granted", r, err)
	}
}

// With a settle window, a thread's first job waits before it takes the
// thread, so a job enqueued a moment earlier (on another host, asking
// later) still goes first.
func TestFakeThreadsSettle(t *testing.T) {
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	th := dispatchtest.NewThreads()
	th.Now = func() time.Time { return now }
	th.Settle = time.Second
	ctx := t.Context()
	const thread = "github:acme/widgets#7"
	newer, older := now, now.Add(-50*time.Millisecond)
	now = now.Add(10 * time.Millisecond)
	if r, _ := th.Turn(ctx, thread, "gh-new", newer, time.Hour); r.Granted || r.Behind != "gh-new" {
		t.Fatalf("the newer job, asking first: %+v; want settling", r)
	}
	if r, _ := th.Turn(ctx, thread, "gh-old", older, time.Hour); r.Granted {
		t.Fatalf("the older job within the window: %+v; want settling", r)
	}
	now = now.Add(time.Second)
	if r, _ := th.Turn(ctx, thread, "gh-new", newer, time.Hour); r.Granted || r.Behind != "gh-old" {
		t.Fatalf("the newer job past the window: %+v; want behind gh-old", r)
	}
	if r, _ := th.Turn(ctx, thread, "gh-old", older, time.Hour); !r.Granted {
		t.Fatalf("the older job past the window: %+v; want granted", r)
	}
}
