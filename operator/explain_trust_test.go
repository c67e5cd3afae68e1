package operator_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/operator"
	"github.com/pidispatch/pidispatch/queue"
)

// With the fleet key, explain says a job the key did not sign will be
// refused job-unsigned, and that the host whose queue holds it published a
// row the key did not sign; a signed job on an allowed queue gets neither.
func TestExplainUnsignedJobAndUntrustedHost(t *testing.T) {
	db := livetest.Valkey(t)
	ctx := context.Background()
	key, err := fleet.NewKey([]byte(strings.Repeat("explain-key-", 3)))
	if err != nil {
		t.Fatal(err)
	}
	defer liveHost(t, db.Client, "alpha", digestA).Close(ctx) // no key: an unsigned row
	host := mustQueue(t, db.Client, fleet.HostQueueName("alpha"))
	addData(t, host, "forged-1", forgeJob, queue.AddOptions{})
	opts := operator.ExplainOptions{FleetKey: key}
	ex := explain(t, db.Client, "forged-1", opts)
	if f := finding(t, ex, operator.FindJobUnsigned); !strings.Contains(f.Words, "no signature") {
		t.Fatalf("job-unsigned: %+v", f)
	}
	if f := finding(t, ex, operator.FindHostUntrusted); f.Data["host"] != "alpha" {
		t.Fatalf("host-untrusted: %+v", f)
	}

	shared := mustQueue(t, db.Client, fleet.SharedQueue)
	sig, err := key.SignJob(fleet.SharedQueue, "signed-1", json.RawMessage(forgeJob))
	if err != nil {
		t.Fatal(err)
	}
	addData(t, shared, "signed-1", forgeJob, queue.AddOptions{Signature: sig})
	addData(t, shared, "allowed-1", forgeJob, queue.AddOptions{})
	for _, id := range []string{"signed-1", "allowed-1"} {
		ex = explain(t, db.Client, id, operator.ExplainOptions{FleetKey: key, UnsignedQueues: []string{"pi-jobs"}})
		for _, f := range ex.Findings {
			if f.Code == operator.FindJobUnsigned {
				t.Fatalf("%s: %+v", id, f)
			}
		}
	}
	// Without a key, a worker configured alike refuses every unsigned job
	// and routing trusts no row, unless PI_UNSIGNED_QUEUES opts the queue in.
	ex = explain(t, db.Client, "forged-1", operator.ExplainOptions{})
	if f := finding(t, ex, operator.FindJobUnsigned); !strings.Contains(f.Words, "PI_UNSIGNED_QUEUES") {
		t.Fatalf("no key: %+v", f)
	}
	ex = explain(t, db.Client, "forged-1", operator.ExplainOptions{UnsignedQueues: []string{fleet.EveryQueue}})
	for _, f := range ex.Findings {
		if f.Code == operator.FindJobUnsigned || f.Code == operator.FindHostUntrusted {
			t.Fatalf("no key, every queue opted in: %+v", f)
		}
	}
}
