package dispatchtest

import (
	"context"
	"slices"
	"sync"

	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/jobs"
)

// Mirror is an in-memory dispatch.RunMirror and record claimer: Go stores
// the record at once (no goroutine), Close stops further copies, and Claim
// gives each attempt to the first host that asks, as the Valkey mirror does.
type Mirror struct {
	mu      sync.Mutex
	records []jobs.Record
	claims  map[string]string
	closed  bool
	// ClaimErr, when set, fails Claim and ReleaseClaim (Valkey unreachable).
	ClaimErr error
}

var (
	_ dispatch.RunMirror = (*Mirror)(nil)
	_ interface {
		Claim(ctx context.Context, queue, jobID string, attempt int, host string) (string, error)
		ReleaseClaim(ctx context.Context, queue, jobID string, attempt int, host string) error
	} = (*Mirror)(nil)
)

// NewMirror returns an empty mirror.
func NewMirror() *Mirror { return &Mirror{claims: map[string]string{}} }

// Go stores rec unless the mirror is closed.
func (m *Mirror) Go(ctx context.Context, rec jobs.Record) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.closed {
		m.records = append(m.records, rec)
	}
}

// Close stops Go from storing.
func (m *Mirror) Close(ctx context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closed = true
	return nil
}

// Records returns the mirrored records, oldest first.
func (m *Mirror) Records() []jobs.Record {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.records)
}

// Claim returns the owner of the attempt's record: host when it took it now
// or before, else the first host that did.
func (m *Mirror) Claim(ctx context.Context, queue, jobID string, attempt int, host string) (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.ClaimErr != nil {
		return "", m.ClaimErr
	}
	k := jobs.RecordMember(queue, jobID, attempt)
	if owner, ok := m.claims[k]; ok {
		return owner, nil
	}
	m.claims[k] = host
	return host, nil
}

// ReleaseClaim drops host's claim of the attempt; another's stays.
func (m *Mirror) ReleaseClaim(ctx context.Context, queue, jobID string, attempt int, host string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.ClaimErr != nil {
		return m.ClaimErr
	}
	k := jobs.RecordMember(queue, jobID, attempt)
	if m.claims[k] == host {
		delete(m.claims, k)
	}
	return nil
}

// ClaimOwner returns who claimed the attempt on queue, "" when nobody.
func (m *Mirror) ClaimOwner(queue, jobID string, attempt int) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.claims[jobs.RecordMember(queue, jobID, attempt)]
}
