package metrics

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pidispatch/pidispatch/dispatch"
)

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}

func TestMetricsServerEndpoints(t *testing.T) {
	m := New("h1")
	m.Observe(dispatch.Event{Kind: dispatch.EventFinish, Outcome: "completed", Reason: "completed"})
	var notReady atomic.Pointer[error]
	ready := func(context.Context) error {
		if p := notReady.Load(); p != nil {
			return *p
		}
		return nil
	}
	s, err := Listen("127.0.0.1:0", m, ready)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx) }()
	base := "http://" + s.Addr().String()

	code, body := get(t, base+"/metrics")
	if code != 200 || !strings.Contains(body, `pidispatch_jobs_finished_total{host="h1",outcome="completed",reason="completed"} 1`) {
		t.Fatalf("/metrics: %d\n%s", code, body)
	}
	if !strings.Contains(body, "go_goroutines") {
		t.Fatalf("/metrics lacks the Go runtime metrics:\n%s", body)
	}
	if code, body := get(t, base+"/healthz"); code != 200 {
		t.Fatalf("/healthz: %d %s", code, body)
	}
	if code, body := get(t, base+"/readyz"); code != 200 {
		t.Fatalf("/readyz while ready: %d %s", code, body)
	}
	why := errors.New("valkey unreachable")
	notReady.Store(&why)
	if code, body := get(t, base+"/readyz"); code != 503 || !strings.Contains(body, "valkey unreachable") {
		t.Fatalf("/readyz while not ready: %d %q, want 503 naming the reason", code, body)
	}
	if code, _ := get(t, base+"/healthz"); code != 200 {
		t.Fatalf("/healthz while not ready: %d, want 200 (the process still serves)", code)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Serve: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return after ctx ended")
	}
	if _, err := http.Get(base + "/healthz"); err == nil {
		t.Fatal("server still answers after Serve returned")
	}
}

// A taken port is a ListenError naming the address, before anything serves.
func TestMetricsServerPortTaken(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	err = Serve(context.Background(), ln.Addr().String(), New("h1"), nil)
	var le *ListenError
	if !errors.As(err, &le) || le.Addr != ln.Addr().String() {
		t.Fatalf("Serve on a taken port: %v, want a *ListenError naming %s", err, ln.Addr())
	}
}
