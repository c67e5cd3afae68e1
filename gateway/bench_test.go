package gateway

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/internal/testkit/fakeprovider"
)

// benchRig is one fake upstream reached two ways: directly over TCP, and
// through a gateway session served on a Unix socket, as the worker serves
// a job's model socket.
type benchRig struct {
	direct, viaGW       *http.Client
	directURL, viaGWURL string
}

func newBenchRig(b *testing.B, step fakeprovider.Step) *benchRig {
	b.Helper()
	fp, err := fakeprovider.Listen(step)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { fp.Close() })
	gw, err := New(Config{Upstreams: map[string]string{"anthropic": fp.URL()}})
	if err != nil {
		b.Fatal(err)
	}
	// A capped job: every call is parsed and reserved, as under PI_MAX_COST_USD.
	sess := gw.Job(context.Background(), dispatch.GatewayJob{JobID: "bench", Keys: map[string]string{"anthropic": "k"}, MaxMicros: 1_000_000_000})
	sock := filepath.Join(b.TempDir(), "model.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		b.Fatal(err)
	}
	srv := &http.Server{Handler: sess, ReadHeaderTimeout: 30 * time.Second}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ln) }()
	b.Cleanup(func() { sess.Close(); srv.Close(); <-done })
	unix := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}
	return &benchRig{
		direct: &http.Client{Transport: &http.Transport{}}, directURL: fp.URL() + "/v1/messages",
		viaGW: &http.Client{Transport: unix}, viaGWURL: "http://model/anthropic/v1/messages",
	}
}

const benchBody = `{"model":"claude-sonnet-4-5","stream":true,"max_tokens":1024,"messages":[{"role":"user","content":"hi"}]}`

// ttft is the time from sending the request to reading the first text
// delta; the rest of the answer is drained.
func ttft(b *testing.B, c *http.Client, url string) time.Duration {
	start := time.Now()
	resp, err := c.Post(url, "application/json", strings.NewReader(benchBody))
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	for {
		line, err := br.ReadSlice('\n')
		if bytes.Contains(line, []byte("content_block_delta")) {
			break
		}
		if err != nil {
			b.Fatalf("no text delta: %v", err)
		}
	}
	d := time.Since(start)
	_, _ = io.Copy(io.Discard, br)
	return d
}

func quantile(ds []time.Duration, q float64) float64 {
	s := slices.Clone(ds)
	slices.Sort(s)
	return float64(s[int(q*float64(len(s)-1))]) / float64(time.Millisecond)
}

// BenchmarkStreamTTFT measures the time to the first token of a small
// streamed answer, directly and through the gateway, alternating; each
// iteration is 50 requests of each.
func BenchmarkStreamTTFT(b *testing.B) {
	r := newBenchRig(b, fakeprovider.Answer("hello", fakeprovider.Usage{Input: 100, Output: 5}))
	var direct, viaGW []time.Duration
	ttft(b, r.direct, r.directURL) // warm both connections
	ttft(b, r.viaGW, r.viaGWURL)
	b.ResetTimer()
	for range b.N {
		for range 50 {
			direct = append(direct, ttft(b, r.direct, r.directURL))
			viaGW = append(viaGW, ttft(b, r.viaGW, r.viaGWURL))
		}
	}
	b.ReportMetric(quantile(direct, 0.5), "direct-p50-ms")
	b.ReportMetric(quantile(direct, 0.99), "direct-p99-ms")
	b.ReportMetric(quantile(viaGW, 0.5), "gateway-p50-ms")
	b.ReportMetric(quantile(viaGW, 0.99), "gateway-p99-ms")
	b.ReportMetric(quantile(viaGW, 0.99)-quantile(direct, 0.99), "added-p99-ms")
}

// BenchmarkStreamThroughput moves a 100 MB streamed answer directly and
// through the gateway each iteration. ratio is gateway over direct
// throughput for the whole run; median-ratio the median of the
// iterations', which a busy machine disturbs less.
func BenchmarkStreamThroughput(b *testing.B) {
	const size = 100 << 20
	r := newBenchRig(b, fakeprovider.Step{Big: size, Usage: fakeprovider.Usage{Input: 1, Output: 1}})
	buf := make([]byte, 256<<10)
	move := func(c *http.Client, url string) time.Duration {
		start := time.Now()
		resp, err := c.Post(url, "application/json", strings.NewReader(benchBody))
		if err != nil {
			b.Fatal(err)
		}
		defer resp.Body.Close()
		n := int64(0)
		for {
			k, err := resp.Body.Read(buf)
			n += int64(k)
			if err != nil {
				break
			}
		}
		if n < size {
			b.Fatalf("moved %d bytes", n)
		}
		return time.Since(start)
	}
	var direct, viaGW time.Duration
	var ratios []float64
	b.SetBytes(2 * size)
	b.ResetTimer()
	for i := range b.N {
		// Alternate which goes first, so neither always meets a warmer
		// machine.
		var d, g time.Duration
		if i%2 == 0 {
			d, g = move(r.direct, r.directURL), move(r.viaGW, r.viaGWURL)
		} else {
			g, d = move(r.viaGW, r.viaGWURL), move(r.direct, r.directURL)
		}
		direct, viaGW = direct+d, viaGW+g
		ratios = append(ratios, d.Seconds()/g.Seconds())
	}
	slices.Sort(ratios)
	mb := float64(b.N) * size / 1e6
	b.ReportMetric(mb/direct.Seconds(), "direct-MB/s")
	b.ReportMetric(mb/viaGW.Seconds(), "gateway-MB/s")
	b.ReportMetric(direct.Seconds()/viaGW.Seconds(), "ratio")
	b.ReportMetric(ratios[len(ratios)/2], "median-ratio")
}
