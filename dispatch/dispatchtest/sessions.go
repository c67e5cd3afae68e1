package dispatchtest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/pidispatch/pidispatch/dispatch"
)

// Sessions is an in-memory dispatch.SessionStore with the Valkey store's
// rules (fleetstate.Sessions): one value per thread, replaced by the next,
// gone at its ttl; a value over dispatch.MaxSessionBytes is refused when put
// and when read; an empty value reads as none.
type Sessions struct {
	// Now is the store's clock. Default time.Now, moved on by Advance.
	Now func() time.Time

	mu     sync.Mutex
	offset time.Duration
	rows   map[string]storedSession
}

type storedSession struct {
	value []byte
	until time.Time
}

var _ dispatch.SessionStore = (*Sessions)(nil)

// NewSessions returns an empty store.
func NewSessions() *Sessions { return &Sessions{rows: map[string]storedSession{}} }

func (s *Sessions) now() time.Time {
	now := time.Now()
	if s.Now != nil {
		now = s.Now()
	}
	return now.Add(s.offset)
}

// Advance moves the store's clock on by d.
func (s *Sessions) Advance(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.offset += d
}

// PutSession implements dispatch.SessionStore.
func (s *Sessions) PutSession(_ context.Context, thread string, value []byte, ttl time.Duration) error {
	if len(value) > dispatch.MaxSessionBytes {
		return dispatch.ErrSessionTooLarge
	}
	if ttl <= 0 {
		return errors.New("a stored session needs a ttl")
	}
	s.Write(thread, value, ttl)
	return nil
}

// GetSession implements dispatch.SessionStore.
func (s *Sessions) GetSession(_ context.Context, thread string) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	row, ok := s.rows[thread]
	switch {
	case !ok || !s.now().Before(row.until) || len(row.value) == 0:
		return nil, dispatch.ErrNoSession
	case len(row.value) > dispatch.MaxSessionBytes:
		return nil, fmt.Errorf("%w", dispatch.ErrSessionTooLarge)
	}
	return append([]byte(nil), row.value...), nil
}

// Write stores value for thread as anyone who can write the store may: no
// bound is checked. A test plays the attacker with it.
func (s *Sessions) Write(thread string, value []byte, ttl time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rows[thread] = storedSession{value: append([]byte(nil), value...), until: s.now().Add(ttl)}
}
