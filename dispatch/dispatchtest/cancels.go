package dispatchtest

import (
	"context"
	"sync"

	"github.com/pidispatch/pidispatch/dispatch"
)

// Cancels is an in-memory dispatch.JobCancels: Cancel(jobID) stops the
// watched run of that job, as an operator's pi-dispatch cancel does, and a
// request made before the job is watched stops it as soon as it is.
type Cancels struct {
	mu        sync.Mutex
	watches   map[string]map[int]func()
	next      int
	requested map[string]bool
	cancelled map[string]bool
}

var _ dispatch.JobCancels = (*Cancels)(nil)

// NewCancels returns a Cancels with no request.
func NewCancels() *Cancels {
	return &Cancels{watches: map[string]map[int]func(){}, requested: map[string]bool{}, cancelled: map[string]bool{}}
}

// Watch calls cancel when jobID is cancelled, until stop or ctx ends.
func (c *Cancels) Watch(ctx context.Context, jobID string, cancel func()) (stop func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.requested[jobID] {
		delete(c.requested, jobID)
		c.cancelled[jobID] = true
		cancel()
		return func() {}
	}
	id := c.next
	c.next++
	if c.watches[jobID] == nil {
		c.watches[jobID] = map[int]func(){}
	}
	c.watches[jobID][id] = cancel
	unwatch := func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		delete(c.watches[jobID], id)
		if len(c.watches[jobID]) == 0 {
			delete(c.watches, jobID)
		}
	}
	after := context.AfterFunc(ctx, unwatch)
	return func() { after(); unwatch() }
}

// Cancel stops jobID's watched runs, or the next one watched.
func (c *Cancels) Cancel(jobID string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ws := c.watches[jobID]
	if len(ws) == 0 {
		c.requested[jobID] = true
		return
	}
	c.cancelled[jobID] = true
	for _, cancel := range ws {
		cancel()
	}
}

// Cancelled reports whether jobID was stopped on request.
func (c *Cancels) Cancelled(jobID string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cancelled[jobID]
}

// Watching reports whether a run of jobID is watched now.
func (c *Cancels) Watching(jobID string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.watches[jobID]) > 0
}
