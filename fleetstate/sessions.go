package fleetstate

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pidispatch/pidispatch/dispatch"
)

// DefaultSessionsCallTimeout bounds each Valkey call of a Sessions: a value
// may be 16 MiB.
const DefaultSessionsCallTimeout = 10 * time.Second

// SessionsConfig tunes a Sessions. The zero value is valid.
type SessionsConfig struct {
	// CallTimeout bounds every Valkey call. Defaults to 10s.
	CallTimeout time.Duration
}

// Sessions keeps each thread's last agent session for the fleet
// (dispatch.SessionStore, PI_SESSION_STORE=valkey): one STRING per thread
// (SessionKey), expiring at the ttl the Worker gives. It checks only the
// size: a value is read with GETRANGE up to one byte past
// dispatch.MaxSessionBytes, so a larger one written by hand is refused
// without being read whole. The Worker checks the rest.
//
// A Sessions is safe for concurrent use. It does not own the client.
type Sessions struct {
	client redis.UniversalClient
	cfg    SessionsConfig
}

var _ dispatch.SessionStore = (*Sessions)(nil)

// NewSessions returns a Sessions over client.
func NewSessions(client redis.UniversalClient, cfg SessionsConfig) *Sessions {
	if cfg.CallTimeout <= 0 {
		cfg.CallTimeout = DefaultSessionsCallTimeout
	}
	return &Sessions{client: client, cfg: cfg}
}

// PutSession implements dispatch.SessionStore.
func (s *Sessions) PutSession(ctx context.Context, thread string, value []byte, ttl time.Duration) error {
	if len(value) > dispatch.MaxSessionBytes {
		return dispatch.ErrSessionTooLarge
	}
	if ttl < time.Millisecond {
		return errors.New("a stored session needs a ttl of at least 1ms")
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.CallTimeout)
	defer cancel()
	if err := s.client.Set(ctx, SessionKey(thread), value, ttl).Err(); err != nil {
		return fmt.Errorf("store session: %w", err)
	}
	return nil
}

// GetSession implements dispatch.SessionStore. A missing key and an empty
// value read alike (GETRANGE answers both with ""): none.
func (s *Sessions) GetSession(ctx context.Context, thread string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.CallTimeout)
	defer cancel()
	v, err := s.client.GetRange(ctx, SessionKey(thread), 0, int64(dispatch.MaxSessionBytes)).Bytes()
	switch {
	case err != nil && !errors.Is(err, redis.Nil):
		return nil, fmt.Errorf("read session: %w", err)
	case len(v) == 0:
		return nil, dispatch.ErrNoSession
	case len(v) > dispatch.MaxSessionBytes:
		return nil, dispatch.ErrSessionTooLarge
	}
	return v, nil
}
