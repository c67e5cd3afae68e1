package queue

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/pidispatch/pidispatch/fleet"
	"github.com/redis/go-redis/v9"
)

// Directory reaches every queue of a deployment by name: discovery, pending
// jobs, moves between queues and lookups across all of them. The kill switch,
// re-homing and held-job liveness use it.
type Directory struct {
	client redis.UniversalClient
	cfg    Config

	mu     sync.Mutex
	queues map[string]*Queue
}

// NewDirectory returns a Directory over client with the queues' cfg.
func NewDirectory(client redis.UniversalClient, cfg Config) (*Directory, error) {
	if client == nil {
		return nil, errors.New("queue: nil client")
	}
	if _, err := cfg.withDefaults(); err != nil {
		return nil, err
	}
	return &Directory{client: client, cfg: cfg, queues: map[string]*Queue{}}, nil
}

// Queue returns the queue called name (validated).
func (d *Directory) Queue(name string) (*Queue, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if q, ok := d.queues[name]; ok {
		return q, nil
	}
	q, err := New(d.client, name, d.cfg)
	if err != nil {
		return nil, err
	}
	d.queues[name] = q
	return q, nil
}

// HostQueues discovers every host queue (see Discover).
func (d *Directory) HostQueues(ctx context.Context) ([]string, error) {
	prefix := d.cfg.Prefix
	return Discover(ctx, d.client, prefix)
}

// Pending returns up to limit jobs waiting to run on the named queue (see
// PendingIDs); a job that finished or moved meanwhile is left out.
func (d *Directory) Pending(ctx context.Context, name string, limit int) ([]*Job, error) {
	q, err := d.Queue(name)
	if err != nil {
		return nil, err
	}
	ids, err := q.PendingIDs(ctx, limit)
	if err != nil {
		return nil, err
	}
	out := make([]*Job, 0, len(ids))
	for _, id := range ids {
		j, err := q.Get(ctx, id)
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			return out, err
		}
		out = append(out, j)
	}
	return out, nil
}

// Move moves a pending job from one queue to another (see Queue.MoveTo).
func (d *Directory) Move(ctx context.Context, from, to, id string) error {
	return d.MoveSigned(ctx, from, to, id, "")
}

// MoveSigned moves a pending job and replaces its fleet signature by sig
// (see Queue.MoveToSigned).
func (d *Directory) MoveSigned(ctx context.Context, from, to, id, sig string) error {
	src, err := d.Queue(from)
	if err != nil {
		return err
	}
	dst, err := d.Queue(to)
	if err != nil {
		return err
	}
	return src.MoveToSigned(ctx, id, dst, sig)
}

// Find looks the job id up on the shared queue and every host queue and
// returns the queue that has it, with the job. A job that exists nowhere is
// ErrNotFound; a discovery that could not finish is returned as its error
// (ErrDiscoveryIncomplete), because "not found" would then be a guess.
func (d *Directory) Find(ctx context.Context, id string) (string, *Job, error) {
	names, derr := d.HostQueues(ctx)
	var de *DiscoveryError
	if derr != nil && errors.As(derr, &de) {
		names = de.Found
	}
	for _, name := range append([]string{fleet.SharedQueue}, names...) {
		q, err := d.Queue(name)
		if err != nil {
			continue
		}
		j, err := q.Get(ctx, id)
		if err == nil {
			return name, j, nil
		}
		if !errors.Is(err, ErrNotFound) {
			return "", nil, fmt.Errorf("find %q: %w", id, err)
		}
	}
	if derr != nil {
		return "", nil, fmt.Errorf("find %q: %w", id, derr)
	}
	return "", nil, fmt.Errorf("find %q: %w", id, ErrNotFound)
}
