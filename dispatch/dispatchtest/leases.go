package dispatchtest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/fleet"
)

// LeaseStore is the fleet-wide slot keys the Leasers of several fake hosts
// share. Like the Valkey lease it holds each key for one holder
// ("<worker>#<id>") until its TTL passes or the holder releases it.
type LeaseStore struct {
	// Now is the clock of the TTLs. Default time.Now.
	Now func() time.Time
	// Err, when set, makes Acquire grant degraded slots (no key held), as
	// the Valkey lease does when Valkey cannot be asked.
	Err error

	mu   sync.Mutex
	held map[string]leaseHold
}

type leaseHold struct {
	holder string
	until  time.Time
}

// NewLeaseStore returns an empty store.
func NewLeaseStore() *LeaseStore { return &LeaseStore{held: map[string]leaseHold{}} }

func (s *LeaseStore) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

// Held returns the holder of key, "" when free.
func (s *LeaseStore) Held(key string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if h, ok := s.held[key]; ok && s.now().Before(h.until) {
		return h.holder
	}
	return ""
}

// Leaser is one host's dispatch.Leaser on a LeaseStore.
type Leaser struct {
	store  *LeaseStore
	worker string
}

var _ dispatch.Leaser = (*Leaser)(nil)

// Leaser returns worker's Leaser on s.
func (s *LeaseStore) Leaser(worker string) *Leaser { return &Leaser{store: s, worker: worker} }

// NewLeaser returns a Leaser on a store of its own.
func NewLeaser(worker string) *Leaser { return NewLeaseStore().Leaser(worker) }

// Store is the LeaseStore l takes slots from.
func (l *Leaser) Store() *LeaseStore { return l.store }

// LeaseSlot is a slot a fake Leaser granted.
type LeaseSlot struct {
	store       *LeaseStore
	Key, holder string
}

// Release frees the slot if it is still this holder's; again does nothing.
func (h *LeaseSlot) Release(ctx context.Context) error {
	if h.Key == "" {
		return nil
	}
	s := h.store
	s.mu.Lock()
	defer s.mu.Unlock()
	if cur, ok := s.held[h.Key]; ok && cur.holder == h.holder {
		delete(s.held, h.Key)
	}
	return nil
}

// Acquire takes the first free one of keyFor(0..slots-1) for id, or returns
// nil and no error when all are held. slots < 1 is unbounded.
func (l *Leaser) Acquire(ctx context.Context, id string, slots int, ttl time.Duration, keyFor func(int) string) (dispatch.Slot, error) {
	holder := l.worker + "#" + id
	if slots < 1 {
		return &LeaseSlot{store: l.store, holder: holder}, nil
	}
	if ttl <= 0 {
		return nil, fmt.Errorf("lease: ttl %s is not positive", ttl)
	}
	if keyFor == nil {
		return nil, errors.New("lease: nil keyFor")
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("lease: acquire: %w", err)
	}
	s := l.store
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.Err != nil {
		return &LeaseSlot{store: s, holder: holder}, nil
	}
	now := s.now()
	for i := range slots {
		k := keyFor(i)
		if h, ok := s.held[k]; ok && now.Before(h.until) {
			continue
		}
		s.held[k] = leaseHold{holder: holder, until: now.Add(ttl)}
		return &LeaseSlot{store: s, Key: k, holder: holder}, nil
	}
	return nil, nil
}

// SweepOwnClaims deletes this worker's claims of the rows' scope slots, only
// when reaped, and returns how many it deleted.
func (l *Leaser) SweepOwnClaims(ctx context.Context, reaped bool, rows []dispatch.ScopeRow) (int, error) {
	if !reaped {
		return 0, nil
	}
	s := l.store
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, r := range rows {
		hash := fleet.ScopeHash(r.Scope)
		for i := range r.Concurrent {
			k := fleet.ScopeSlotKey(hash, i)
			if h, ok := s.held[k]; ok && strings.HasPrefix(h.holder, l.worker+"#") {
				delete(s.held, k)
				n++
			}
		}
	}
	return n, nil
}
