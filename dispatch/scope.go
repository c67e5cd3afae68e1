package dispatch

import (
	"context"
	"time"

	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/jobs"
)

// takeScope takes the job's scope slot: the in-process count (one per local
// folder; the scope's concurrent limit) and, for a forge scope on a named
// host, the fleet lease. It returns a release func, or ok=false when busy.
func (w *Worker) takeScope(ctx context.Context, h *held) (release func(), ok bool) {
	scope := h.spec.Scope()
	if scope == "" {
		return func() {}, true
	}
	ceiling := 0
	if h.spec.Kind == jobs.KindLocal || h.spec.Folder != "" {
		ceiling = 1 // a folder is its own mutex: two agents in one tree collide
	}
	limit, limited := w.limits.Lookup(scope)
	if limited && limit.Concurrent > 0 && (ceiling == 0 || limit.Concurrent < ceiling) {
		ceiling = limit.Concurrent
	}
	if ceiling == 0 {
		return func() {}, true
	}
	key := "scope:" + scope
	w.mu.Lock()
	if w.inFlight[key] >= ceiling {
		w.mu.Unlock()
		return nil, false
	}
	w.inFlight[key]++
	w.mu.Unlock()
	local := func() {
		w.mu.Lock()
		w.inFlight[key]--
		if w.inFlight[key] <= 0 {
			delete(w.inFlight, key)
		}
		w.mu.Unlock()
	}

	// A path is not an identity across machines: local folders never take a
	// fleet lease (routing answers for them). Forge scopes with a limit do.
	if h.spec.Folder != "" || !limited || limit.Concurrent <= 0 || !w.cfg.WorkerNameDeclared || w.deps.Leases == nil {
		return local, true
	}
	hash := fleet.ScopeHash(scope)
	ttl := w.cfg.JobTimeout + 5*time.Minute
	handle, err := w.deps.Leases.Acquire(ctx, h.job.ID, limit.Concurrent, ttl, func(i int) string {
		return fleet.ScopeSlotKey(hash, i)
	})
	if err != nil || handle == nil {
		local()
		if err != nil {
			w.log.Warn("scope_lease_failed", "jobId", h.job.ID, "err", err)
		}
		w.log.Info("scope_busy_deferred", "jobId", h.job.ID, "where", "fleet")
		return nil, false
	}
	return func() {
		if err := handle.Release(context.WithoutCancel(ctx)); err != nil {
			w.log.Warn("scope_lease_release_failed", "jobId", h.job.ID, "err", err)
		}
		local()
	}, true
}
