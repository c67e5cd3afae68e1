package receiver

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pidispatch/pidispatch/jobs"
)

// DefaultReplayTTL is how long a delivery's key is remembered: longer than
// the 31 days a forge job is kept, so a replay is refused even after its job
// is gone.
const DefaultReplayTTL = 35 * 24 * time.Hour

// ReplayStore remembers deliveries for the synchronous mode (Config.Replay,
// without an Inbox), by their key (inbox.Delivery.Key, the digest of the
// signed body), never by the id header, which no forge signs. The inbox keeps
// its own memory of keys (package forge/inbox), 35 days too.
type ReplayStore interface {
	// Claim records the delivery's key and reports whether it is new.
	Claim(ctx context.Context, f jobs.Forge, delivery string) (bool, error)
	// Release forgets a claimed delivery that could not be handled, so the
	// forge's redelivery is processed.
	Release(ctx context.Context, f jobs.Forge, delivery string) error
}

// ValkeyReplay keeps delivery keys in Valkey as <Prefix><forge>:<key>
// with a TTL (SET NX EX), so every receiver of a fleet shares them and a
// restart forgets none.
type ValkeyReplay struct {
	Client redis.UniversalClient
	// Prefix of the keys. Default "pidispatch:forge:delivery:".
	Prefix string
	// TTL of a key. Default DefaultReplayTTL.
	TTL time.Duration
}

func (v ValkeyReplay) key(f jobs.Forge, delivery string) string {
	p := v.Prefix
	if p == "" {
		p = "pidispatch:forge:delivery:"
	}
	return p + string(f) + ":" + delivery
}

// Claim implements ReplayStore.
func (v ValkeyReplay) Claim(ctx context.Context, f jobs.Forge, delivery string) (bool, error) {
	if v.Client == nil {
		return false, errors.New("receiver: replay store has no client")
	}
	ttl := v.TTL
	if ttl <= 0 {
		ttl = DefaultReplayTTL
	}
	return v.Client.SetNX(ctx, v.key(f, delivery), time.Now().UTC().Format(time.RFC3339), ttl).Result()
}

// Release implements ReplayStore.
func (v ValkeyReplay) Release(ctx context.Context, f jobs.Forge, delivery string) error {
	return v.Client.Del(ctx, v.key(f, delivery)).Err()
}
