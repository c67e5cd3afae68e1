package dispatchtest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/pidispatch/pidispatch/dispatch"
)

// Directory reaches a set of fake Queues by name: a dispatch.Directory and
// dispatch.Finder. Host queues are those named pi-jobs@<host>.
type Directory struct {
	mu     sync.Mutex
	queues map[string]*Queue
}

var (
	_ dispatch.Directory = (*Directory)(nil)
	_ dispatch.Finder    = (*Directory)(nil)
)

// NewDirectory returns a directory of queues.
func NewDirectory(queues ...*Queue) *Directory {
	d := &Directory{queues: map[string]*Queue{}}
	for _, q := range queues {
		d.queues[q.Name()] = q
	}
	return d
}

// Add makes q reachable.
func (d *Directory) Add(q *Queue) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.queues[q.Name()] = q
}

func (d *Directory) names() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	names := make([]string, 0, len(d.queues))
	for n := range d.queues {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

func (d *Directory) queue(name string) (*Queue, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	q, ok := d.queues[name]
	if !ok {
		return nil, fmt.Errorf("queue %s: not in the directory", name)
	}
	return q, nil
}

// HostQueues lists the host queues.
func (d *Directory) HostQueues(ctx context.Context) ([]string, error) {
	var out []string
	for _, n := range d.names() {
		if strings.HasPrefix(n, "pi-jobs@") {
			out = append(out, n)
		}
	}
	return out, nil
}

// Pending lists up to limit waiting or delayed jobs of queue name.
func (d *Directory) Pending(ctx context.Context, name string, limit int) ([]*dispatch.HeldJob, error) {
	q, err := d.queue(name)
	if err != nil {
		return nil, err
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	var out []*dispatch.HeldJob
	for _, j := range q.jobs {
		if j.snap.State == StateWaiting || j.snap.State == StateDelayed {
			out = append(out, j.held())
		}
	}
	slices.SortFunc(out, func(a, b *dispatch.HeldJob) int { return strings.Compare(a.ID, b.ID) })
	return out[:min(len(out), limit)], nil
}

// Move moves a waiting or delayed job from one queue to another.
func (d *Directory) Move(ctx context.Context, from, to, id string) error {
	src, err := d.queue(from)
	if err != nil {
		return err
	}
	dst, err := d.queue(to)
	if err != nil {
		return err
	}
	src.mu.Lock()
	j, ok := src.jobs[id]
	if !ok || (j.snap.State != StateWaiting && j.snap.State != StateDelayed) {
		src.mu.Unlock()
		return fmt.Errorf("move %q from %s: %w", id, from, dispatch.ErrJobNotFound)
	}
	delete(src.jobs, id)
	src.notify()
	src.mu.Unlock()
	job := j.job
	job.AttemptsMade = j.snap.AttemptsMade
	dst.Add(job)
	return nil
}

// Queue returns the queue called name.
func (d *Directory) Queue(name string) (dispatch.JobQueue, error) {
	q, err := d.queue(name)
	if err != nil {
		return nil, err
	}
	return q, nil
}

// Find looks job id up on every queue.
func (d *Directory) Find(ctx context.Context, id string) (string, *dispatch.HeldJob, error) {
	for _, n := range d.names() {
		q, _ := d.queue(n)
		if j, err := q.Get(ctx, id); err == nil {
			return n, j, nil
		}
	}
	return "", nil, fmt.Errorf("find %q: %w", id, dispatch.ErrJobNotFound)
}
