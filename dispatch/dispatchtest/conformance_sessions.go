package dispatchtest

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/pidispatch/pidispatch/dispatch"
)

// SessionsHarness is one SessionStore under test, a way to write a value
// past its rules (as anyone who can write Valkey may), and a way to let
// time pass on its clock: the fake's clock moves, a live store's test
// sleeps.
type SessionsHarness struct {
	Store dispatch.SessionStore
	Write func(thread string, value []byte)
	Wait  func(d time.Duration)
}

// TestSessionStore runs the SessionStore contract (dispatch/deps.go)
// against the stores newStore makes, a fresh one per case.
func TestSessionStore(t *testing.T, newStore func(t *testing.T) SessionsHarness) {
	cases := []struct {
		name string
		run  func(t *testing.T, h SessionsHarness)
	}{
		{"NoneStored", ssNone},
		{"PutThenGet", ssRoundTrip},
		{"NextReplaces", ssReplace},
		{"ThreadsApart", ssApart},
		{"GoneAtItsTTL", ssExpire},
		{"OversizedPutRefused", ssPutTooLarge},
		{"OversizedValueRefusedWhenRead", ssReadTooLarge},
		{"EmptyValueReadsAsNone", ssEmpty},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { c.run(t, newStore(t)) })
	}
}

const ssThread = "github:acme/app#7"

func ssGet(t *testing.T, h SessionsHarness, thread string) ([]byte, error) {
	t.Helper()
	return h.Store.GetSession(context.Background(), thread)
}

func ssPut(t *testing.T, h SessionsHarness, thread string, value []byte, ttl time.Duration) {
	t.Helper()
	if err := h.Store.PutSession(context.Background(), thread, value, ttl); err != nil {
		t.Fatalf("PutSession: %v", err)
	}
}

func ssNone(t *testing.T, h SessionsHarness) {
	if v, err := ssGet(t, h, ssThread); !errors.Is(err, dispatch.ErrNoSession) {
		t.Fatalf("GetSession of an empty store: %q, %v; want ErrNoSession", v, err)
	}
}

func ssRoundTrip(t *testing.T, h SessionsHarness) {
	value := []byte("pisession1 -\n\x1f\x8b\x00binary\nbytes")
	ssPut(t, h, ssThread, value, time.Hour)
	if v, err := ssGet(t, h, ssThread); err != nil || !bytes.Equal(v, value) {
		t.Fatalf("GetSession: %q, %v; want %q", v, err, value)
	}
}

func ssReplace(t *testing.T, h SessionsHarness) {
	ssPut(t, h, ssThread, []byte("first"), time.Hour)
	ssPut(t, h, ssThread, []byte("second"), time.Hour)
	if v, err := ssGet(t, h, ssThread); err != nil || string(v) != "second" {
		t.Fatalf("GetSession: %q, %v; want the second value", v, err)
	}
}

func ssApart(t *testing.T, h SessionsHarness) {
	ssPut(t, h, ssThread, []byte("seven"), time.Hour)
	ssPut(t, h, "github:acme/app#8", []byte("eight"), time.Hour)
	if v, err := ssGet(t, h, ssThread); err != nil || string(v) != "seven" {
		t.Fatalf("thread #7: %q, %v", v, err)
	}
	if v, err := ssGet(t, h, "gitlab:acme/app#7"); !errors.Is(err, dispatch.ErrNoSession) {
		t.Fatalf("another forge's thread #7: %q, %v; want ErrNoSession", v, err)
	}
}

func ssExpire(t *testing.T, h SessionsHarness) {
	ssPut(t, h, ssThread, []byte("short"), 300*time.Millisecond)
	h.Wait(time.Second)
	if v, err := ssGet(t, h, ssThread); !errors.Is(err, dispatch.ErrNoSession) {
		t.Fatalf("past its ttl: %q, %v; want ErrNoSession", v, err)
	}
}

func ssPutTooLarge(t *testing.T, h SessionsHarness) {
	err := h.Store.PutSession(context.Background(), ssThread, make([]byte, dispatch.MaxSessionBytes+1), time.Hour)
	if !errors.Is(err, dispatch.ErrSessionTooLarge) {
		t.Fatalf("PutSession of MaxSessionBytes+1: %v; want ErrSessionTooLarge", err)
	}
	ssPut(t, h, ssThread, bytes.Repeat([]byte{'a'}, dispatch.MaxSessionBytes), time.Hour)
	if v, err := ssGet(t, h, ssThread); err != nil || len(v) != dispatch.MaxSessionBytes {
		t.Fatalf("a value of MaxSessionBytes: %d bytes, %v", len(v), err)
	}
}

func ssReadTooLarge(t *testing.T, h SessionsHarness) {
	h.Write(ssThread, make([]byte, dispatch.MaxSessionBytes+1))
	if v, err := ssGet(t, h, ssThread); !errors.Is(err, dispatch.ErrSessionTooLarge) || v != nil {
		t.Fatalf("a value over the bound written past the store: %d bytes, %v; want ErrSessionTooLarge", len(v), err)
	}
}

func ssEmpty(t *testing.T, h SessionsHarness) {
	h.Write(ssThread, nil)
	if v, err := ssGet(t, h, ssThread); !errors.Is(err, dispatch.ErrNoSession) {
		t.Fatalf("an empty value: %q, %v; want ErrNoSession", v, err)
	}
}
