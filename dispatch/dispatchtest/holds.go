package dispatchtest

import (
	"context"
	"sync"
	"time"

	"github.com/pidispatch/pidispatch/dispatch"
)

// Holds is an in-memory dispatch.HoldStore with the Valkey hold scripts'
// rules (fleetstate/waitstate.go): a fresh Begin takes the dedup id over and
// names the previous holder; a hold whose dedup id another job holds, or
// that was marked, reads superseded and records nothing more; Checked with
// AllMet and Release release it; a call on a hold that is gone reads Lost;
// End deletes it and its dedup id when still its own. State expires at the
// hold's deadline plus an hour, as on Valkey.
type Holds struct {
	// Now is the store's clock (the server's, on Valkey). Default time.Now.
	Now func() time.Time
	// Err, when set, fails every call.
	Err error

	mu    sync.Mutex
	holds map[string]*holdState
	dedup map[string]string // dedup id -> holding job
}

type holdState struct {
	st      dispatch.HoldState
	dedupID string
	expires time.Time
}

var _ dispatch.HoldStore = (*Holds)(nil)

// holdMargin is how long state outlives the hold's deadline.
const holdMargin = time.Hour

// NewHolds returns an empty store.
func NewHolds() *Holds { return &Holds{holds: map[string]*holdState{}, dedup: map[string]string{}} }

func (h *Holds) now() time.Time {
	if h.Now != nil {
		return h.Now()
	}
	return time.Now()
}

// getLocked returns job's live hold, dropping an expired one.
func (h *Holds) getLocked(jobID string, now time.Time) *holdState {
	s, ok := h.holds[jobID]
	if ok && !now.Before(s.expires) {
		delete(h.holds, jobID)
		return nil
	}
	return s
}

func (h *Holds) supersededLocked(jobID string, s *holdState) bool {
	if s.st.Superseded {
		return true
	}
	holder, ok := h.dedup[s.dedupID]
	return s.dedupID != "" && ok && holder != jobID
}

func (h *Holds) replyLocked(jobID string, s *holdState, now time.Time) dispatch.HoldState {
	if s == nil {
		return dispatch.HoldState{Now: now, Lost: true}
	}
	out := s.st
	out.Now = now
	out.Superseded = h.supersededLocked(jobID, s)
	return out
}

// Begin starts jobID's hold or reads the one in progress.
func (h *Holds) Begin(ctx context.Context, jobID, dedupID string, b dispatch.HoldBounds) (dispatch.HoldState, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.Err != nil {
		return dispatch.HoldState{}, h.Err
	}
	now := h.now()
	s := h.getLocked(jobID, now)
	prev, fresh := "", false
	if s == nil {
		fresh = true
		s = &holdState{st: dispatch.HoldState{Since: now}, dedupID: dedupID}
		h.holds[jobID] = s
		if dedupID != "" {
			if holder, ok := h.dedup[dedupID]; ok && holder != jobID {
				prev = holder
			}
			h.dedup[dedupID] = jobID
		}
	} else if _, held := h.dedup[dedupID]; dedupID != "" && !held && !s.st.Superseded {
		h.dedup[dedupID] = jobID
	}
	var afterAt time.Time
	if b.AfterDelay > 0 {
		afterAt = s.st.Since.Add(b.AfterDelay)
	}
	if b.AfterAt.After(afterAt) {
		afterAt = b.AfterAt
	}
	anchor := s.st.Since
	if c := minTime(afterAt, s.st.Since.Add(b.AfterMax)); c.After(anchor) {
		anchor = c
	}
	s.expires = anchor.Add(b.WaitMax + holdMargin)
	out := h.replyLocked(jobID, s, now)
	out.AfterAt, out.Fresh, out.Previous = afterAt, fresh, prev
	return out, nil
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// Throttled counts a round denied a check slot.
func (h *Holds) Throttled(ctx context.Context, jobID, dedupID string) (dispatch.HoldState, error) {
	return h.update(jobID, func(s *holdState) { s.st.Throttles++ })
}

// Checked records a round; AllMet releases the hold.
func (h *Holds) Checked(ctx context.Context, jobID, dedupID string, o dispatch.CheckOutcome) (dispatch.HoldState, error) {
	return h.update(jobID, func(s *holdState) {
		s.st.Checks++
		s.st.Throttles = 0
		if o.Fault {
			s.st.Faults++
		} else {
			s.st.Faults = 0
		}
		s.st.Met = o.Met & 0x0F
		if o.AllMet {
			s.st.Released = true
		}
	})
}

// Release releases a hold whose conditions need no check.
func (h *Holds) Release(ctx context.Context, jobID, dedupID string) (dispatch.HoldState, error) {
	return h.update(jobID, func(s *holdState) { s.st.Released = true })
}

// update applies change to a live, not superseded hold and replies.
func (h *Holds) update(jobID string, change func(*holdState)) (dispatch.HoldState, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.Err != nil {
		return dispatch.HoldState{}, h.Err
	}
	now := h.now()
	s := h.getLocked(jobID, now)
	if s != nil && !h.supersededLocked(jobID, s) {
		change(s)
	}
	return h.replyLocked(jobID, s, now), nil
}

// Supersede marks jobID's hold superseded, if it exists.
func (h *Holds) Supersede(ctx context.Context, jobID string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.Err != nil {
		return h.Err
	}
	if s := h.getLocked(jobID, h.now()); s != nil {
		s.st.Superseded = true
	}
	return nil
}

// End deletes jobID's hold and its dedup id when still jobID's.
func (h *Holds) End(ctx context.Context, jobID string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.Err != nil {
		return h.Err
	}
	if s, ok := h.holds[jobID]; ok {
		if s.dedupID != "" && h.dedup[s.dedupID] == jobID {
			delete(h.dedup, s.dedupID)
		}
		delete(h.holds, jobID)
	}
	return nil
}

// Held reports whether jobID has hold state.
func (h *Holds) Held(jobID string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.getLocked(jobID, h.now()) != nil
}
