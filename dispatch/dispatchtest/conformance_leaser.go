package dispatchtest

import (
	"fmt"
	"testing"
	"time"

	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/fleet"
)

// TestLeaser runs the Leaser contract against the leasers newLeasers makes:
// a fresh store per case, and from it the Leaser of any host name, all
// sharing the store's slots as the hosts of a fleet do.
func TestLeaser(t *testing.T, newLeasers func(t *testing.T) func(worker string) dispatch.Leaser) {
	cases := []struct {
		name string
		run  func(t *testing.T, leaser func(string) dispatch.Leaser)
	}{
		{"SlotsAreBounded", leaseBounded},
		{"ReleaseIsIdempotent", leaseReleaseOnce},
		{"UnboundedNeedsNoSlot", leaseUnbounded},
		{"BadArgumentsAreErrors", leaseBadArgs},
		{"OneIDTwiceHoldsTwoSlots", leaseSameID},
		{"SlotExpiresAtItsTTL", leaseTTL},
		{"SweepTakesOnlyOwnClaims", leaseSweep},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { c.run(t, newLeasers(t)) })
	}
}

func slotKey(t *testing.T) func(int) string {
	name := t.Name()
	return func(i int) string { return fmt.Sprintf("test:slot:%s:%d", name, i) }
}

func acquire(t *testing.T, l dispatch.Leaser, id string, slots int, ttl time.Duration, keyFor func(int) string) dispatch.Slot {
	t.Helper()
	s, err := l.Acquire(qctx(t), id, slots, ttl, keyFor)
	if err != nil {
		t.Fatalf("Acquire(%s): %v", id, err)
	}
	return s
}

func leaseBounded(t *testing.T, leaser func(string) dispatch.Leaser) {
	a, b := leaser("host-a"), leaser("host-b")
	keys := slotKey(t)
	s1 := acquire(t, a, "j1", 2, time.Minute, keys)
	s2 := acquire(t, b, "j2", 2, time.Minute, keys)
	if s1 == nil || s2 == nil {
		t.Fatalf("two slots of two: %v, %v; want both granted", s1, s2)
	}
	if s := acquire(t, a, "j3", 2, time.Minute, keys); s != nil {
		t.Fatal("a third holder was granted one of two slots")
	}
	if err := s1.Release(qctx(t)); err != nil {
		t.Fatal(err)
	}
	if s := acquire(t, b, "j3", 2, time.Minute, keys); s == nil {
		t.Fatal("a released slot was not granted again")
	}
}

func leaseReleaseOnce(t *testing.T, leaser func(string) dispatch.Leaser) {
	a := leaser("host-a")
	keys := slotKey(t)
	s1 := acquire(t, a, "j1", 1, time.Minute, keys)
	if err := s1.Release(qctx(t)); err != nil {
		t.Fatal(err)
	}
	s2 := acquire(t, a, "j2", 1, time.Minute, keys)
	if s2 == nil {
		t.Fatal("slot not granted after release")
	}
	if err := s1.Release(qctx(t)); err != nil {
		t.Fatal(err)
	}
	if s := acquire(t, a, "j3", 1, time.Minute, keys); s != nil {
		t.Fatal("a second Release of an old slot freed the new holder's slot")
	}
}

func leaseUnbounded(t *testing.T, leaser func(string) dispatch.Leaser) {
	a := leaser("host-a")
	for i := range 3 {
		s := acquire(t, a, fmt.Sprint("j", i), 0, time.Minute, slotKey(t))
		if s == nil {
			t.Fatal("slots < 1 must be unbounded")
		}
		if err := s.Release(qctx(t)); err != nil {
			t.Fatal(err)
		}
	}
}

func leaseBadArgs(t *testing.T, leaser func(string) dispatch.Leaser) {
	a := leaser("host-a")
	if _, err := a.Acquire(qctx(t), "j", 1, 0, slotKey(t)); err == nil {
		t.Error("Acquire with ttl 0: no error")
	}
	if _, err := a.Acquire(qctx(t), "j", 1, time.Minute, nil); err == nil {
		t.Error("Acquire with nil keyFor: no error")
	}
}

func leaseSameID(t *testing.T, leaser func(string) dispatch.Leaser) {
	a := leaser("host-a")
	keys := slotKey(t)
	if acquire(t, a, "j", 2, time.Minute, keys) == nil || acquire(t, a, "j", 2, time.Minute, keys) == nil {
		t.Fatal("one id acquiring twice must hold two slots")
	}
	if acquire(t, a, "k", 2, time.Minute, keys) != nil {
		t.Fatal("a third acquire was granted one of two held slots")
	}
}

func leaseTTL(t *testing.T, leaser func(string) dispatch.Leaser) {
	a, b := leaser("host-a"), leaser("host-b")
	keys := slotKey(t)
	if acquire(t, a, "j1", 1, 50*time.Millisecond, keys) == nil {
		t.Fatal("not granted")
	}
	if acquire(t, b, "j2", 1, time.Minute, keys) != nil {
		t.Fatal("a held slot was granted")
	}
	time.Sleep(150 * time.Millisecond)
	if acquire(t, b, "j2", 1, time.Minute, keys) == nil {
		t.Fatal("a slot past its TTL was not granted")
	}
}

func leaseSweep(t *testing.T, leaser func(string) dispatch.Leaser) {
	a, b := leaser("host-a"), leaser("host-b")
	const scope = "github.com/acme/widgets"
	hash := fleet.ScopeHash(scope)
	keys := func(i int) string { return fleet.ScopeSlotKey(hash, i) }
	rows := []dispatch.ScopeRow{{Scope: scope, Concurrent: 3}}
	acquire(t, a, "a1", 3, time.Minute, keys)
	acquire(t, a, "a2", 3, time.Minute, keys)
	acquire(t, b, "b1", 3, time.Minute, keys)
	if n, err := a.SweepOwnClaims(qctx(t), false, rows); err != nil || n != 0 {
		t.Fatalf("sweep without a reap = %d, %v; want 0, nil (claims may cover running containers)", n, err)
	}
	n, err := a.SweepOwnClaims(qctx(t), true, rows)
	if err != nil || n != 2 {
		t.Fatalf("sweep = %d, %v; want host-a's 2 claims", n, err)
	}
	c := leaser("host-c")
	if acquire(t, c, "c1", 3, time.Minute, keys) == nil || acquire(t, c, "c2", 3, time.Minute, keys) == nil {
		t.Fatal("swept slots were not granted again")
	}
	if acquire(t, c, "c3", 3, time.Minute, keys) != nil {
		t.Fatal("host-b's claim was swept by host-a")
	}
}
