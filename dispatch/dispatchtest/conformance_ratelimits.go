package dispatchtest

import (
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/pidispatch/pidispatch/dispatch"
)

// RateLimitsHarness is one RateLimits under test and a way to let time pass
// on its clock: the fake's clock moves, a live store's test sleeps.
type RateLimitsHarness struct {
	Limits dispatch.RateLimits
	Wait   func(d time.Duration)
}

// TestRateLimits runs the RateLimits contract (dispatch/spend.go) against the
// stores newLimits makes, a fresh one per case.
func TestRateLimits(t *testing.T, newLimits func(t *testing.T) RateLimitsHarness) {
	cases := []struct {
		name string
		run  func(t *testing.T, h RateLimitsHarness)
	}{
		{"NothingSuspended", rlNone},
		{"SuspendThenRead", rlRead},
		{"LaterResetWins", rlLater},
		{"EarlierResetNeverShortens", rlEarlier},
		{"PastResetDoesNothing", rlPast},
		{"SuspensionEndsAtItsReset", rlLapse},
		{"ResetHeldToADay", rlClamp},
		{"BadProviderRefused", rlBadName},
		{"ReasonBounded", rlWhy},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { c.run(t, newLimits(t)) })
	}
}

func untilOf(t *testing.T, l dispatch.RateLimits, provider string) time.Time {
	t.Helper()
	u, err := l.SuspendedUntil(qctx(t), provider)
	if err != nil {
		t.Fatalf("SuspendedUntil(%s): %v", provider, err)
	}
	return u
}

func suspend(t *testing.T, l dispatch.RateLimits, provider string, until time.Time, why string) {
	t.Helper()
	if err := l.Suspend(qctx(t), provider, until, why); err != nil {
		t.Fatalf("Suspend(%s): %v", provider, err)
	}
}

func list(t *testing.T, l dispatch.RateLimits) []dispatch.Suspension {
	t.Helper()
	got, err := l.List(qctx(t))
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	return got
}

// ms is t as stored: to the millisecond.
func ms(t time.Time) time.Time { return time.UnixMilli(t.UnixMilli()) }

func rlNone(t *testing.T, h RateLimitsHarness) {
	if u := untilOf(t, h.Limits, "anthropic"); !u.IsZero() {
		t.Fatalf("SuspendedUntil = %s, want zero", u)
	}
	if got := list(t, h.Limits); len(got) != 0 {
		t.Fatalf("List = %+v, want none", got)
	}
}

func rlRead(t *testing.T, h RateLimitsHarness) {
	a := time.Now().Add(10 * time.Minute)
	b := time.Now().Add(20 * time.Minute)
	suspend(t, h.Limits, "openai", b, "429 rate limited")
	suspend(t, h.Limits, "anthropic", a, "529 overloaded")
	if u := untilOf(t, h.Limits, "anthropic"); !u.Equal(ms(a)) {
		t.Fatalf("SuspendedUntil = %s, want %s", u, ms(a))
	}
	if u := untilOf(t, h.Limits, "openrouter"); !u.IsZero() {
		t.Fatalf("another provider is not suspended: %s", u)
	}
	got := list(t, h.Limits)
	if len(got) != 2 || got[0].Provider != "anthropic" || got[1].Provider != "openai" ||
		!got[0].Until.Equal(ms(a)) || got[0].Why != "529 overloaded" || !got[1].Until.Equal(ms(b)) || got[1].Why != "429 rate limited" {
		t.Fatalf("List = %+v, want anthropic then openai with their resets and reasons", got)
	}
}

func rlLater(t *testing.T, h RateLimitsHarness) {
	a := time.Now().Add(5 * time.Minute)
	suspend(t, h.Limits, "anthropic", a, "first")
	suspend(t, h.Limits, "anthropic", a.Add(time.Minute), "second")
	got := list(t, h.Limits)
	if len(got) != 1 || !got[0].Until.Equal(ms(a.Add(time.Minute))) || got[0].Why != "second" {
		t.Fatalf("List = %+v, want the later reset and its reason", got)
	}
}

func rlEarlier(t *testing.T, h RateLimitsHarness) {
	a := time.Now().Add(5 * time.Minute)
	suspend(t, h.Limits, "anthropic", a, "long")
	suspend(t, h.Limits, "anthropic", a.Add(-4*time.Minute), "short")
	suspend(t, h.Limits, "anthropic", a, "same")
	got := list(t, h.Limits)
	if len(got) != 1 || !got[0].Until.Equal(ms(a)) || got[0].Why != "long" {
		t.Fatalf("List = %+v, want the first suspension unchanged", got)
	}
}

func rlPast(t *testing.T, h RateLimitsHarness) {
	suspend(t, h.Limits, "anthropic", time.Now().Add(-time.Second), "late")
	suspend(t, h.Limits, "openai", time.Time{}, "zero")
	if got := list(t, h.Limits); len(got) != 0 {
		t.Fatalf("List = %+v, want none", got)
	}
}

func rlLapse(t *testing.T, h RateLimitsHarness) {
	suspend(t, h.Limits, "anthropic", time.Now().Add(1200*time.Millisecond), "brief")
	suspend(t, h.Limits, "openai", time.Now().Add(time.Hour), "long")
	if u := untilOf(t, h.Limits, "anthropic"); u.IsZero() {
		t.Fatal("not suspended right after Suspend")
	}
	h.Wait(1500 * time.Millisecond)
	if u := untilOf(t, h.Limits, "anthropic"); !u.IsZero() {
		t.Fatalf("SuspendedUntil after the reset = %s, want zero", u)
	}
	got := list(t, h.Limits)
	if len(got) != 1 || got[0].Provider != "openai" {
		t.Fatalf("List after the reset = %+v, want only openai", got)
	}
	// A provider whose suspension ended can be suspended again.
	suspend(t, h.Limits, "anthropic", time.Now().Add(time.Hour), "again")
	if got := list(t, h.Limits); len(got) != 2 {
		t.Fatalf("List = %+v, want both", got)
	}
}

func rlClamp(t *testing.T, h RateLimitsHarness) {
	before := time.Now()
	suspend(t, h.Limits, "anthropic", before.Add(72*time.Hour), "far")
	u := untilOf(t, h.Limits, "anthropic")
	if u.Before(before.Add(24*time.Hour-time.Minute)) || u.After(time.Now().Add(24*time.Hour+time.Minute)) {
		t.Fatalf("SuspendedUntil = %s, want about a day from now", u)
	}
}

func rlBadName(t *testing.T, h RateLimitsHarness) {
	for _, bad := range []string{"", "Anthropic", "open ai", "a:b", "a/b", "x\n", strings.Repeat("a", 65), "ünï"} {
		if err := h.Limits.Suspend(qctx(t), bad, time.Now().Add(time.Hour), "x"); err == nil {
			t.Errorf("Suspend(%q) = nil, want an error", bad)
		}
		if _, err := h.Limits.SuspendedUntil(qctx(t), bad); err == nil {
			t.Errorf("SuspendedUntil(%q) = nil error, want an error", bad)
		}
	}
	if got := list(t, h.Limits); len(got) != 0 {
		t.Fatalf("List = %+v, want none", got)
	}
	suspend(t, h.Limits, strings.Repeat("a", 64), time.Now().Add(time.Hour), "ok")
	suspend(t, h.Limits, "open-router-2", time.Now().Add(time.Hour), "ok")
	if got := list(t, h.Limits); len(got) != 2 {
		t.Fatalf("List = %+v, want the two valid names", got)
	}
}

func rlWhy(t *testing.T, h RateLimitsHarness) {
	long := "429 \x1b[31mslow down\x00\r\n" + strings.Repeat("é", 400) + "\xff"
	suspend(t, h.Limits, "anthropic", time.Now().Add(time.Hour), long)
	got := list(t, h.Limits)
	if len(got) != 1 {
		t.Fatalf("List = %+v", got)
	}
	why := got[0].Why
	if len(why) > 256 || !utf8.ValidString(why) || strings.ContainsFunc(why, unicode.IsControl) || !strings.HasPrefix(why, "429 [31mslow down") {
		t.Fatalf("Why = %q (%d bytes): want at most 256 bytes of valid UTF-8 without control characters", why, len(why))
	}
}
