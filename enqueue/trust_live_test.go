package enqueue_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pidispatch/pidispatch/capabilities"
	"github.com/pidispatch/pidispatch/enqueue"
	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/jobs"
	"github.com/pidispatch/pidispatch/queue"
	"github.com/pidispatch/pidispatch/registry"
)

// testFleetKey writes a key file as an operator would and loads it.
func testFleetKey(t *testing.T) fleet.Key {
	t.Helper()
	p := filepath.Join(t.TempDir(), "fleet.key")
	if err := os.WriteFile(p, []byte(strings.Repeat("0123456789abcdef", 3)), 0o600); err != nil {
		t.Fatal(err)
	}
	k, err := fleet.LoadKey(p)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// Nine rows written straight into Valkey by a party without the key, each
// claiming the secrets profile a delivery needs, receive none of 100 routed
// deliveries: routing ignores rows the fleet key did not sign, and every
// delivery that needs the profile goes to the one signed host serving it.
func TestLiveRoutingIgnoresUnsignedRows(t *testing.T) {
	db := livetest.Valkey(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	key := testFleetKey(t)
	caps := capabilities.Serialize(capabilities.Tokens([]string{"gh"}, nil))

	// Two honest, signed hosts: one serves the profile, one does not (so
	// routing has a choice to make).
	for name, c := range map[string]string{"honest-gh": caps, "honest-plain": ""} {
		reg, err := registry.New(db.Client, name, registry.Facts{Routes: registry.Value(true), Caps: registry.Value(c)}, registry.Config{FleetKey: key})
		if err != nil {
			t.Fatal(err)
		}
		if err := reg.Start(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = reg.Close(context.Background()) })
	}
	// The attacker: raw rows, dated by the server's clock, as a beat would.
	now, err := db.Client.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	for i := range 9 {
		name := fmt.Sprintf("evil-%d", i)
		if err := db.Client.HSet(ctx, registry.HostKey(name), registry.FieldName, name, registry.FieldBeatAt, strconv.FormatInt(now.UnixMilli(), 10),
			registry.FieldRoutes, "true", registry.FieldCaps, caps, registry.FieldSig, strings.Repeat("ab", 32)).Err(); err != nil {
			t.Fatal(err)
		}
		if err := db.Client.SAdd(ctx, registry.LiveKey, name).Err(); err != nil {
			t.Fatal(err)
		}
	}

	p, err := enqueue.NewProducer(db.Client, enqueue.ProducerConfig{FleetKey: key})
	if err != nil {
		t.Fatal(err)
	}
	r := enqueue.NewRouter(p, enqueue.RouterConfig{})
	counts := map[string]int{}
	for i := range 100 {
		e, err := r.EnqueueForge(ctx, enqueue.ForgeDelivery{JobID: fmt.Sprintf("gh-delivery-%d", i),
			Job: jobs.Job{Kind: jobs.KindForge, Repo: "acme/widgets", Flow: "fix", Task: "t", SecretsProfile: "gh"}})
		if err != nil {
			t.Fatal(err)
		}
		counts[e.Queue]++
	}
	if counts[fleet.HostQueueName("honest-gh")] != 100 {
		t.Fatalf("routed deliveries by queue: %v; want all 100 on the signed capable host", counts)
	}

	// The jobs carry the key's signature for the queue they are on.
	q, err := queue.New(db.Client, fleet.HostQueueName("honest-gh"), queue.Config{})
	if err != nil {
		t.Fatal(err)
	}
	j, err := q.Get(ctx, "gh-delivery-0")
	if err != nil {
		t.Fatal(err)
	}
	if !key.VerifyJob(q.Name(), j.ID, j.Data, j.Signature) {
		t.Fatalf("routed job not signed: %q", j.Signature)
	}
	hosts, err := registry.ReadLive(ctx, db.Client, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range registry.Trust(hosts, key, nil) {
		if h.Untrusted != strings.HasPrefix(h.Name, "evil-") {
			t.Errorf("%s: untrusted %v", h.Name, h.Untrusted)
		}
	}
}
