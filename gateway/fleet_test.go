package gateway_test

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/fleetstate"
	"github.com/pidispatch/pidispatch/gateway"
	"github.com/pidispatch/pidispatch/internal/testkit/fakeprovider"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
)

// Three hosts, each with its own Valkey client, race jobs into a $0.50
// daily window. Each job reserves its $0.10 cap in the window, then asks
// the provider for 64000 output tokens a call (more than the cap pays for)
// until its gateway refuses, and settles to what it spent. Neither the
// window nor the provider's bill passes $0.50.
func TestFleetWindowHoldsAgainstOvershootingJobs(t *testing.T) {
	db := livetest.Valkey(t)
	const (
		window = 500_000
		jobCap = 100_000
	)
	fp, err := fakeprovider.Listen(fakeprovider.Step{Text: "long", FillOutput: true, Usage: fakeprovider.Usage{Input: 50}})
	if err != nil {
		t.Fatal(err)
	}
	defer fp.Close()
	pricing, err := gateway.ParsePricing(strings.NewReader("anthropic claude-test 3 15 0.3 3.75\n"))
	if err != nil {
		t.Fatal(err)
	}
	gw, err := gateway.New(gateway.Config{Upstreams: map[string]string{"anthropic": fp.URL()}, Pricing: pricing})
	if err != nil {
		t.Fatal(err)
	}
	opts, err := redis.ParseURL(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var wg sync.WaitGroup
	var mu sync.Mutex
	granted := 0
	for host := range 3 {
		client := redis.NewClient(opts)
		defer client.Close()
		dollars := fleetstate.NewDollars(client, fleetstate.DollarsConfig{DailyMicros: window})
		wg.Go(func() {
			for job := 0; ; job++ {
				id := "h" + string(rune('0'+host)) + "-" + string(rune('a'+job))
				res, err := dollars.ReserveDollars(ctx, id, "", nil, jobCap, time.Hour)
				if err != nil {
					t.Error(err)
					return
				}
				if !res.Granted {
					return
				}
				mu.Lock()
				granted++
				mu.Unlock()
				sess := gw.Session(context.Background(), dispatch.GatewayJob{JobID: id, Keys: map[string]string{"anthropic": "k"}, MaxMicros: jobCap})
				for range 5 {
					rec := httptest.NewRecorder()
					body := `{"model":"claude-test","max_tokens":64000,"messages":[{"role":"user","content":"write"}]}`
					sess.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/anthropic/v1/messages", bytes.NewReader([]byte(body))))
					if rec.Code != http.StatusOK {
						break
					}
				}
				sess.Close()
				if err := dollars.SettleDollars(ctx, res, sess.Spend().Micros); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	ws, err := fleetstate.NewDollars(db.Client, fleetstate.DollarsConfig{DailyMicros: window}).Windows(ctx)
	if err != nil || len(ws) != 1 {
		t.Fatalf("windows %+v, %v", ws, err)
	}
	billed, _ := pricing.Price("anthropic", "claude-test", gateway.Usage(fp.Billed()))
	t.Logf("%d jobs granted; window spent $%.6f (cap $%.2f); provider billed $%.6f", granted, float64(ws[0].SpentMicros)/1e6, float64(window)/1e6, float64(billed)/1e6)
	if ws[0].SpentMicros+ws[0].ReservedMicros > window || billed > window {
		t.Fatalf("the window holds $%.6f and the provider billed $%.6f against a cap of $%.2f", float64(ws[0].SpentMicros+ws[0].ReservedMicros)/1e6, float64(billed)/1e6, float64(window)/1e6)
	}
	if billed > ws[0].SpentMicros {
		t.Fatalf("the window settled $%.6f, less than the provider billed ($%.6f)", float64(ws[0].SpentMicros)/1e6, float64(billed)/1e6)
	}
}
