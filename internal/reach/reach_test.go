package reach

import (
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/pidispatch/pidispatch/internal/testkit/logtest"
)

func newLogged(ev Events) (*Tracker, *logtest.Buffer) {
	var buf logtest.Buffer
	return New(buf.Logger().With("host", "alpha"), ev), &buf
}

func TestTracker_LogsOncePerTransition(t *testing.T) {
	tr, buf := newLogged(Events{Down: "thing_unreachable", DownLevel: slog.LevelWarn, ErrKey: "reason", Up: "thing_restored"})
	boom := errors.New("dial tcp: refused")
	want := []Transition{Steady, WentDown, Steady, Steady, CameBack, Steady, WentDown}
	got := []Transition{tr.OK(), tr.Fail(boom), tr.Fail(boom), tr.Observe(boom), tr.Observe(nil), tr.OK(), tr.Observe(boom)}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("observation %d: got %v, want %v", i, got[i], want[i])
		}
	}
	if !tr.Down() {
		t.Fatal("Down() = false after a failure")
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("want 3 lines, got %d:\n%s", len(lines), buf)
	}
	for i, want := range []string{
		`"level":"WARN","msg":"thing_unreachable","host":"alpha","reason":"dial tcp: refused"}`,
		`"level":"INFO","msg":"thing_restored","host":"alpha"}`,
		`"level":"WARN","msg":"thing_unreachable","host":"alpha","reason":"dial tcp: refused"}`,
	} {
		if !strings.HasSuffix(lines[i], want) {
			t.Errorf("line %d = %s, want suffix %s", i, lines[i], want)
		}
	}
}

func TestTracker_Defaults(t *testing.T) {
	tr, buf := newLogged(Events{Down: "fetch_failed", DownLevel: slog.LevelError, Up: "fetch_restored"})
	tr.Fail(nil) // a failure without an error value still counts
	out := buf.String()
	if !strings.Contains(out, `"level":"ERROR","msg":"fetch_failed","host":"alpha","err":""`) {
		t.Fatalf("log: %s", out)
	}
	New(nil, Events{Down: "x"}).Fail(errors.New("y")) // a nil logger discards
}

func TestTracker_ConcurrentFailuresLogOnce(t *testing.T) {
	tr, buf := newLogged(Events{Down: "d", Up: "u"})
	var wg sync.WaitGroup
	for range 50 {
		wg.Go(func() { tr.Fail(errors.New("x")) })
	}
	wg.Wait()
	for range 50 {
		wg.Go(func() { tr.OK() })
	}
	wg.Wait()
	if n := strings.Count(buf.String(), `"msg":"d"`); n != 1 {
		t.Errorf("%d down lines, want 1", n)
	}
	if n := strings.Count(buf.String(), `"msg":"u"`); n != 1 {
		t.Errorf("%d up lines, want 1", n)
	}
}
