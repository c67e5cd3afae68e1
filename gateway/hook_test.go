package gateway

import (
	"sync"
	"testing"

	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/internal/testkit/fakeprovider"
)

// OnCall hears of each settled call once, with the job, the model, the
// usage and the price the spend counted, and never the key.
func TestOnCallHearsEachSettledCall(t *testing.T) {
	var mu sync.Mutex
	var got []CallEvent
	cfg := Config{OnCall: func(c CallEvent) { mu.Lock(); got = append(got, c); mu.Unlock() }}
	u := fakeprovider.Usage{Input: 1000, Output: 200}
	r := newRig(t, cfg, dispatch.GatewayJob{Attempt: 3}, fakeprovider.Answer("hello", u))
	for range 2 {
		if resp, body := r.post(t, "/anthropic/v1/messages", antJSON); resp.StatusCode != 200 {
			t.Fatalf("%d %s", resp.StatusCode, body)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 2 {
		t.Fatalf("OnCall heard %d calls, want 2", len(got))
	}
	sum := int64(0)
	for _, c := range got {
		sum += c.Micros
		if c.JobID != "job-1" || c.Attempt != 3 || c.Provider != "anthropic" || c.Model != "claude-test" || c.Status != 200 ||
			c.Usage.Input != 1000 || c.Usage.Output != 200 || !c.Priced || c.Start.IsZero() || c.End.Before(c.Start) {
			t.Fatalf("call %+v", c)
		}
	}
	if sp := r.sess.Spend(); sp.Micros != sum {
		t.Fatalf("OnCall prices sum to %d, spend says %d", sum, sp.Micros)
	}
}
