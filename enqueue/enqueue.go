package enqueue

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pidispatch/pidispatch/capabilities"
	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/jobs"
	"github.com/pidispatch/pidispatch/queue"
	"github.com/pidispatch/pidispatch/registry"
)

// Job options of the enqueue paths, as the original sets them: local and
// chained runs and forge deliveries get two attempts with an exponential
// backoff from 60 s; cron runs are never retried.
const (
	DefaultAttempts    = 2
	DefaultBackoff     = 60 * time.Second
	localKeepCompleted = 24 * time.Hour
	localKeepFailed    = 7 * 24 * time.Hour
	forgeKeep          = 31 * 24 * time.Hour
	// ForgeDedupTTL is how long a forge delivery's semantic dedup id holds.
	ForgeDedupTTL = 10 * time.Minute
)

// JobName is the BullMQ job name of every job the enqueue paths add.
const JobName = "pi-job"

// ProducerConfig tunes a Producer.
type ProducerConfig struct {
	// WorkerName is this host's name; WorkerNameDeclared says whether the
	// operator declared it (PI_WORKER_NAME), which is what routes host-only
	// work to this host's own queue.
	WorkerName         string
	WorkerNameDeclared bool
	// Attempts and Backoff override the retry policy of local, chain and
	// forge jobs (defaults: 2 attempts, exponential from 60 s).
	Attempts int
	Backoff  queue.Backoff
	// Queue is the queue configuration (prefix) of the queues written to.
	Queue queue.Config
	// Now is the clock of the local-run dedup minute. Default time.Now.
	Now func() time.Time
	// Logger receives forge_job_routed and the router's faults.
	Logger *slog.Logger
	// FleetKey, when set, signs every job added (over its queue, id and
	// data), so workers that hold the key run it, and makes the Router
	// ignore registry rows the key did not sign. Workers of a fleet with a
	// key refuse unsigned jobs (job-unsigned).
	FleetKey fleet.Key
	// UnsignedQueues are the queues that take unsigned jobs
	// (PI_UNSIGNED_QUEUES; fleet.EveryQueue for all). Without a FleetKey,
	// the producer adds a job only to such a queue (anything else a worker
	// would refuse: ErrUnsigned), and the Router trusts only the registry
	// rows of such host queues.
	UnsignedQueues []string
}

// ErrUnsigned refuses a job the producer cannot sign (it holds no fleet
// key) for a queue that does not take unsigned jobs: every worker would
// refuse it job-unsigned.
var ErrUnsigned = errors.New("no fleet key to sign the job, and its queue does not take unsigned jobs: set PI_FLEET_KEY_FILE (pi-dispatch init writes one), or list the queue in PI_UNSIGNED_QUEUES")

// Producer adds jobs through the enqueue paths of docs/fleet.md:
// host-only work to this host's queue when its name is declared, forge
// deliveries where their needs can be served.
type Producer struct {
	client redis.UniversalClient
	cfg    ProducerConfig

	mu     sync.Mutex
	queues map[string]*queue.Queue
}

// Enqueued says where a job went.
type Enqueued struct {
	JobID string
	Queue string
	// Added is false when a job with this id (or dedup id) already existed:
	// the request was a duplicate and nothing new will run.
	Added bool
	// State is the existing job's state when a local run was a duplicate
	// (Added false), so the caller can say whether it is still to run or
	// already ran; empty when it could not be read.
	State queue.State
}

// NewProducer returns a Producer writing through client.
func NewProducer(client redis.UniversalClient, cfg ProducerConfig) (*Producer, error) {
	if client == nil {
		return nil, errors.New("dispatch: nil client")
	}
	if cfg.WorkerNameDeclared {
		if err := fleet.ValidateName(cfg.WorkerName); err != nil {
			return nil, err
		}
	}
	if cfg.Attempts <= 0 {
		cfg.Attempts = DefaultAttempts
	}
	if cfg.Backoff == (queue.Backoff{}) {
		cfg.Backoff = queue.Backoff{Type: queue.BackoffExponential, Delay: DefaultBackoff}
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Producer{client: client, cfg: cfg, queues: map[string]*queue.Queue{}}, nil
}

func (p *Producer) queue(name string) (*queue.Queue, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if q, ok := p.queues[name]; ok {
		return q, nil
	}
	q, err := queue.New(p.client, name, p.cfg.Queue)
	if err != nil {
		return nil, err
	}
	p.queues[name] = q
	return q, nil
}

// ownQueue is where host-only work goes: this host's queue when its name is
// declared, else the shared queue (a single host drains only that).
func (p *Producer) ownQueue() string {
	if p.cfg.WorkerNameDeclared {
		return fleet.HostQueueName(p.cfg.WorkerName)
	}
	return fleet.SharedQueue
}

func (p *Producer) add(ctx context.Context, queueName, id string, job jobs.Job, opts queue.AddOptions) (Enqueued, error) {
	data, err := json.Marshal(job)
	if err != nil {
		return Enqueued{}, err
	}
	q, err := p.queue(queueName)
	if err != nil {
		return Enqueued{}, err
	}
	opts.JobID = id
	switch {
	case p.cfg.FleetKey.IsSet():
		if opts.Signature, err = p.cfg.FleetKey.SignJob(queueName, id, data); err != nil {
			return Enqueued{}, fmt.Errorf("sign %s: %w", id, err)
		}
	case !fleet.UnsignedAllowed(p.cfg.UnsignedQueues, queueName):
		return Enqueued{}, fmt.Errorf("enqueue %s on %s: %w", id, queueName, ErrUnsigned)
	}
	got, added, err := q.Add(ctx, JobName, data, opts)
	if err != nil {
		return Enqueued{}, fmt.Errorf("enqueue %s on %s: %w", id, queueName, err)
	}
	return Enqueued{JobID: got, Queue: queueName, Added: added}, nil
}

func (p *Producer) retryOpts(keepDone, keepFailed time.Duration) queue.AddOptions {
	return queue.AddOptions{
		Attempts:         p.cfg.Attempts,
		Backoff:          p.cfg.Backoff,
		RemoveOnComplete: queue.Keep{Age: keepDone},
		RemoveOnFail:     queue.Keep{Age: keepFailed},
	}
}

// EnqueueLocal enqueues a run of a folder on this host. Its id is
// LocalRunID(job, this minute): the same request twice within one minute is
// one job, and a duplicate comes back with Added false and the existing
// job's State. It goes onto this host's own queue when the name is declared
// (only this machine has the folder), else the shared queue.
func (p *Producer) EnqueueLocal(ctx context.Context, job jobs.Job) (Enqueued, error) {
	return p.enqueueLocal(ctx, job)
}

// EnqueueLocalNew enqueues a run of a folder like EnqueueLocal, but always as
// a new job: a random part joins the id, so an identical run asked for
// within the same minute (one that already finished, say) runs again.
func (p *Producer) EnqueueLocalNew(ctx context.Context, job jobs.Job) (Enqueued, error) {
	var nonce [8]byte
	if _, err := rand.Read(nonce[:]); err != nil {
		return Enqueued{}, err
	}
	return p.enqueueLocal(ctx, job, "new:"+hex.EncodeToString(nonce[:]))
}

func (p *Producer) enqueueLocal(ctx context.Context, job jobs.Job, extra ...string) (Enqueued, error) {
	if job.Kind == "" {
		job.Kind = jobs.KindLocal
	}
	if err := job.Validate(); err != nil {
		return Enqueued{}, err
	}
	if job.Folder == "" {
		return Enqueued{}, fmt.Errorf("%w: folder: a local run needs a folder", jobs.ErrInvalidJob)
	}
	id := jobs.LocalRunID(job, p.cfg.Now(), extra...)
	e, err := p.add(ctx, p.ownQueue(), id, job, p.retryOpts(localKeepCompleted, localKeepFailed))
	if err != nil || e.Added {
		return e, err
	}
	// A duplicate: say what became of the first, best effort.
	if q, qerr := p.queue(e.Queue); qerr == nil {
		if existing, gerr := q.Get(ctx, e.JobID); gerr == nil {
			e.State = existing.State
		}
	}
	return e, nil
}

// EnqueueChain enqueues a child a finished job asked for. Its id is
// ChainJobID(parent, flow, task), so a retried parent asks for the same
// child once. It goes onto the parent's host queue: parentQueue is the queue
// the parent ran from (a host queue stays there; the shared queue stays
// shared), and the child runs in the parent's folder.
func (p *Producer) EnqueueChain(ctx context.Context, parentQueue, parentJobID string, job jobs.Job) (Enqueued, error) {
	if err := queue.ValidateQueueName(parentQueue); err != nil {
		return Enqueued{}, err
	}
	job.Kind = jobs.KindChain
	job.ParentJobID = parentJobID
	if err := job.Validate(); err != nil {
		return Enqueued{}, err
	}
	flow := job.Flow
	if job.Command != "" {
		flow = "cmd:" + job.Command
	}
	id := jobs.ChainJobID(parentJobID, flow, job.Task)
	return p.add(ctx, parentQueue, id, job, p.retryOpts(localKeepCompleted, localKeepFailed))
}

// RouterConfig tunes a Router.
type RouterConfig struct {
	// CacheTTL is how long one registry read serves routing decisions
	// (faults included). Default 5 s.
	CacheTTL time.Duration
	// ReadTimeout bounds a registry read. Default 1.5 s.
	ReadTimeout time.Duration
	// Fresh is the route-fresh window. Default capabilities.RouteFresh.
	Fresh time.Duration
}

// Router enqueues forge deliveries on the queue of a host that can serve
// what they need (a secret or wait profile), decided at enqueue time with
// capabilities.Route. Every fault falls back to the shared queue, where the
// job meets the same pre-spend refusal it would without routing.
type Router struct {
	p   *Producer
	cfg RouterConfig

	mu       sync.Mutex
	hosts    []capabilities.Host
	readAt   time.Time
	inFlight chan struct{} // closed when the running read ends
}

// NewRouter returns a Router enqueuing through p.
func NewRouter(p *Producer, cfg RouterConfig) *Router {
	if cfg.CacheTTL <= 0 {
		cfg.CacheTTL = 5 * time.Second
	}
	if cfg.ReadTimeout <= 0 {
		cfg.ReadTimeout = 1500 * time.Millisecond
	}
	if cfg.Fresh <= 0 {
		cfg.Fresh = capabilities.RouteFresh
	}
	return &Router{p: p, cfg: cfg}
}

// ForgeDelivery is one forge event to enqueue.
type ForgeDelivery struct {
	// JobID is the delivery's id (for example "gh-<delivery guid>"); a
	// redelivery with the same id is one job. Required: an id is never
	// invented.
	JobID string
	// DedupID, when set, holds for ForgeDedupTTL so a burst of deliveries
	// about one pull request makes one job.
	DedupID string
	Job     jobs.Job
}

// EnqueueForge routes and enqueues a forge delivery and logs
// forge_job_routed. A resume is never routed (session keys must not be
// published), and neither is a job that needs nothing host-specific.
func (r *Router) EnqueueForge(ctx context.Context, d ForgeDelivery) (Enqueued, error) {
	if d.JobID == "" {
		return Enqueued{}, fmt.Errorf("%w: jobId: a forge delivery needs its delivery id", jobs.ErrInvalidJob)
	}
	if err := queue.ValidateJobID(d.JobID); err != nil {
		return Enqueued{}, err
	}
	job := d.Job
	if job.Kind == "" {
		job.Kind = jobs.KindForge
	}
	if err := job.Validate(); err != nil {
		return Enqueued{}, err
	}
	target, why := fleet.SharedQueue, "no-needs"
	needs := job.Needs()
	switch {
	case job.Resume:
		why = "resume-not-routed"
	case len(needs) > 0:
		hosts, err := r.hostsCached(ctx)
		if err != nil {
			why = "registry-unreadable"
			r.p.cfg.Logger.Warn("forge_route_registry_unreadable", "jobId", d.JobID, "err", err)
		} else if host := capabilities.Route(hosts, needs, d.JobID, r.cfg.Fresh); host != "" {
			target, why = fleet.HostQueueName(host), "capable-host"
		} else {
			why = "abstained"
		}
	}
	opts := r.p.retryOpts(forgeKeep, forgeKeep)
	if d.DedupID != "" {
		opts.Dedup = &queue.Dedup{ID: d.DedupID, TTL: ForgeDedupTTL}
	}
	e, err := r.p.add(ctx, target, d.JobID, job, opts)
	if err != nil && target != fleet.SharedQueue {
		// The chosen host's queue refused (a bad name from a peer's row, a
		// fault): the shared queue is always a correct place.
		r.p.cfg.Logger.Warn("forge_route_fallback", "jobId", d.JobID, "queue", target, "err", err)
		target, why = fleet.SharedQueue, "fallback"
		e, err = r.p.add(ctx, target, d.JobID, job, opts)
	}
	if err != nil {
		return Enqueued{}, err
	}
	r.p.cfg.Logger.Info("forge_job_routed", "host", r.p.cfg.WorkerName, "jobId", d.JobID,
		"queue", target, "why", why, "needs", needs, "added", e.Added)
	return e, nil
}

// hostsCached returns the live hosts, read at most once per CacheTTL with
// one read in flight; a failed read is cached too, so a dead registry costs
// one timeout per CacheTTL, not one per delivery.
func (r *Router) hostsCached(ctx context.Context) ([]capabilities.Host, error) {
	for {
		r.mu.Lock()
		if !r.readAt.IsZero() && time.Since(r.readAt) < r.cfg.CacheTTL {
			hosts := r.hosts
			r.mu.Unlock()
			if hosts == nil {
				return nil, errRegistryUnreadable
			}
			return hosts, nil
		}
		if wait := r.inFlight; wait != nil {
			r.mu.Unlock()
			select {
			case <-wait:
				continue
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		done := make(chan struct{})
		r.inFlight = done
		r.mu.Unlock()

		rctx, cancel := context.WithTimeout(ctx, r.cfg.ReadTimeout)
		live, err := registry.ReadLive(rctx, r.p.client, r.cfg.ReadTimeout)
		cancel()
		var hosts []capabilities.Host
		if err == nil {
			hosts = registry.CapabilityHosts(registry.Trust(live, r.p.cfg.FleetKey, r.p.cfg.UnsignedQueues))
		}
		r.mu.Lock()
		r.readAt = time.Now()
		r.hosts = hosts
		r.inFlight = nil
		close(done)
		r.mu.Unlock()
		if err != nil {
			return nil, err
		}
		return hosts, nil
	}
}

var errRegistryUnreadable = errors.New("registry unreadable (cached)")
