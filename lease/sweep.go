package lease

import (
	"context"
	"errors"
	"fmt"

	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/internal/bounded"
)

// ScopeRow is one scoped-limits row: a scope and its fleet-wide concurrency.
type ScopeRow struct {
	Scope      string
	Concurrent int
}

// Sweep bounds.
const (
	// MaxSweepSlots caps how many slots of one row are swept; a `concurrent`
	// beyond it is not a bound anyone means, and sweeping it would be millions
	// of keys.
	MaxSweepSlots = 4096
	// sweepBatch is how many keys one sweep script call checks.
	sweepBatch = 512
)

// SweepOwnClaims deletes the scope claims (slot:s:<hash16>:<i>) whose holder
// starts with "<worker>#", for every row's slots 0..Concurrent-1, and returns
// how many it deleted. It is driven by the configured rows, never by a SCAN.
//
// reaped must be true only when the container reaper has enumerated this
// host's job containers and removed them: only then is a claim naming this
// worker a claim for a container that no longer exists. Otherwise the claims may
// cover containers still running, freeing them would let another host start
// more beside them (a money overrun), so SweepOwnClaims logs
// scope_claims_sweep_skipped and does nothing.
//
// It logs scope_claims_swept {count} when it deleted any (as the original
// does: a boot with nothing to sweep adds no line). Each script call is
// bounded by CallTimeout. On a fault it stops and returns
// the count so far with the error, for the caller to log; the sweep is an
// optimisation over the TTL, so a caller must never block boot on it.
func (l *Lease) SweepOwnClaims(ctx context.Context, reaped bool, rows []ScopeRow) (int, error) {
	if !reaped {
		l.log.Info("scope_claims_sweep_skipped", "reason", "reaper-did-not-enumerate")
		return 0, nil
	}
	if l.worker == "" {
		return 0, errors.New("lease: sweep: empty worker name")
	}
	if l.client == nil {
		return 0, errors.New("lease: sweep: nil client")
	}
	var keys []string
	for _, row := range rows {
		if row.Concurrent < 1 {
			continue
		}
		hash := fleet.ScopeHash(row.Scope)
		for i := range min(row.Concurrent, MaxSweepSlots) {
			keys = append(keys, fleet.ScopeSlotKey(hash, i))
		}
	}
	prefix := l.worker + "#"
	swept := 0
	for len(keys) > 0 {
		batch := keys[:min(len(keys), sweepBatch)]
		keys = keys[len(batch):]
		// A late answer needs no undo: the claims it deleted were ours.
		n, err := bounded.Call(ctx, l.cfg.CallTimeout, nil, nil, func(ctx context.Context) (int64, error) {
			return sweepScript.Run(ctx, l.client, batch, prefix).Int64()
		})

		if err != nil {
			return swept, fmt.Errorf("lease: sweep: %w", err)
		}
		swept += int(n)
	}
	if swept > 0 {
		l.log.Info("scope_claims_swept", "count", swept)
	}
	return swept, nil
}
