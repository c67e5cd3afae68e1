package socket_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pidispatch/pidispatch/internal/testkit/livetest"

	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/gateway"
	"github.com/pidispatch/pidispatch/gateway/socket"
)

// The bounds one job's model socket puts on the worker, checked against a
// job that floods it. The flood comes from another process (this test
// binary, run again), so what is measured here is the worker's side alone.

const (
	floodModeEnv = "PIDISPATCH_FLOOD_MODE"
	floodSockEnv = "PIDISPATCH_FLOOD_SOCK"
	floodBody    = 32 << 20
	floodBodies  = 24
	floodConns   = 5000
	memBound     = 512 << 20
	fdBound      = 200
)

// TestFloodHelper is the flooding job; it runs only as the child process.
func TestFloodHelper(t *testing.T) {
	sock := os.Getenv(floodSockEnv)
	if sock == "" {
		t.Skip("the flood's child process only")
	}
	dial := func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}
	switch os.Getenv(floodModeEnv) {
	case "bodies":
		c := &http.Client{Transport: &http.Transport{DialContext: dial, MaxConnsPerHost: 0, DisableKeepAlives: true}}
		var wg sync.WaitGroup
		for range floodBodies {
			wg.Go(func() {
				req, _ := http.NewRequest("POST", "http://model/anthropic/v1/messages", newBigBody(floodBody))
				req.ContentLength = floodBody
				if resp, err := c.Do(req); err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			})
		}
		wg.Wait()
	case "conns":
		var conns []net.Conn
		for range floodConns {
			cn, err := net.DialTimeout("unix", sock, time.Second)
			if err != nil {
				continue
			}
			conns = append(conns, cn)
		}
		fmt.Println("held", len(conns))
		time.Sleep(3 * time.Second)
	}
}

// bigBody is a JSON request of n bytes, made as it is read.
type bigBody struct {
	head, tail string
	n, off     int
}

func newBigBody(n int) *bigBody {
	// No max_tokens: the capped gateway parses the body and adds one.
	return &bigBody{head: `{"model":"claude-sonnet-4-5","messages":[{"role":"user","content":"`, tail: `"}]}`, n: n}
}

func (b *bigBody) Read(p []byte) (int, error) {
	if b.off >= b.n {
		return 0, io.EOF
	}
	k := 0
	for k < len(p) && b.off < b.n {
		switch {
		case b.off < len(b.head):
			p[k] = b.head[b.off]
		case b.off >= b.n-len(b.tail):
			p[k] = b.tail[b.off-(b.n-len(b.tail))]
		default:
			p[k] = 'x'
		}
		k++
		b.off++
	}
	return k, nil
}

func (b *bigBody) Close() error { return nil }

// floodRig serves a gateway session on a model socket as the worker does,
// its upstream a provider that discards what it is sent.
func floodRig(t *testing.T) (sock string, upstreamCalls *atomic.Int64) {
	t.Helper()
	upstreamCalls = &atomic.Int64{}
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		upstreamCalls.Add(1)
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"type":"message","content":[],"usage":{"input_tokens":10,"output_tokens":1}}`)
	}))
	t.Cleanup(up.Close)
	gw, err := gateway.New(gateway.Config{Upstreams: map[string]string{"anthropic": up.URL}})
	if err != nil {
		t.Fatal(err)
	}
	// A cap every held body fits under: each is parsed, reserved and given
	// an output bound, the gateway's costliest path.
	sess := gw.Job(context.Background(), dispatch.GatewayJob{JobID: "flood", Keys: map[string]string{"anthropic": "k"}, MaxMicros: 600_000_000})
	m, err := socket.Open(sess, fmt.Sprintf("%d:%d", os.Getuid(), os.Getgid()), socket.DefaultConns, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close(); sess.Close() })
	return filepath.Join(m.Dir(), socket.Name), upstreamCalls
}

// flood runs the child process in mode against sock while sample runs
// every few milliseconds; it returns the child's output.
func flood(t *testing.T, mode, sock string, sample func()) string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestFloodHelper$", "-test.v")
	cmd.Env = append(os.Environ(), floodModeEnv+"="+mode, floodSockEnv+"="+sock)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("flood %s: %v\n%s", mode, err, out.String())
			}
			return out.String()
		case <-tick.C:
			sample()
		}
	}
}

// procStatus reads a kB field of /proc/self/status, in bytes.
func procStatus(t *testing.T, field string) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skip("no /proc/self/status: ", err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, field+":"); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return n << 10
		}
	}
	t.Fatalf("no %s in /proc/self/status", field)
	return 0
}

func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd: ", err)
	}
	return len(ents)
}

// Twenty-four concurrent 32 MiB bodies raise the worker's memory by less
// than 512 MiB: at most PI_GATEWAY_MAX_CALLS bodies are held, the others
// are answered 429 before they are read.
func TestModelSocketMemoryBound(t *testing.T) {
	livetest.SkipShort(t) // a stress run: not for the short lane
	if raceEnabled {
		t.Skip("the race detector multiplies memory; run without -race")
	}
	sock, calls := floodRig(t)
	base := procStatus(t, "VmRSS")
	peak := base
	flood(t, "bodies", sock, func() { peak = max(peak, procStatus(t, "VmRSS")) })
	peak = max(peak, procStatus(t, "VmRSS"))
	t.Logf("RSS %d MiB before, %d MiB at the peak; %d calls reached the provider", base>>20, peak>>20, calls.Load())
	if peak-base > memBound {
		t.Fatalf("the flood raised the worker's memory by %d MiB (bound %d MiB)", (peak-base)>>20, memBound>>20)
	}
	if calls.Load() == 0 {
		t.Fatal("no call got through: the flood measured nothing")
	}
}

// Five thousand connections held open raise the worker's open descriptors
// by at most 200: PI_GATEWAY_MAX_CONNS are accepted, the others wait.
func TestModelSocketDescriptorBound(t *testing.T) {
	livetest.SkipShort(t) // a stress run: not for the short lane
	sock, _ := floodRig(t)
	base := openFDs(t)
	peak := base
	out := flood(t, "conns", sock, func() { peak = max(peak, openFDs(t)) })
	t.Logf("fds %d before, %d at the peak; child: %s", base, peak, strings.TrimSpace(out))
	if peak-base > fdBound {
		t.Fatalf("the flood raised the worker's open descriptors by %d (bound %d)", peak-base, fdBound)
	}
	if peak-base < 10 {
		t.Fatal("the flood opened no connections: it measured nothing")
	}
}
