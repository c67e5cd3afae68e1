package dispatchtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"time"

	"github.com/pidispatch/pidispatch/dispatch"
)

// Queue states beyond the ones dispatch branches on.
const (
	StateWaiting dispatch.JobState = "waiting"
	StateDelayed dispatch.JobState = "delayed"
)

// Job is a job added to a fake Queue.
type Job struct {
	ID   string
	Data json.RawMessage
	// Attempts is how many times the job may run; 0 and 1 both mean once.
	Attempts    int
	DedupID     string
	SchedulerID string
	// Signature is the fleet key's signature of the job (fleet.Key.SignJob
	// over the queue's name, ID and Data), as a signing producer adds it.
	Signature       string
	DeferredFailure string
	Corrupt         string
	// AttemptsMade starts the job as if that many attempts had finished.
	AttemptsMade int
	// GateWaits starts the job with a deferral's note, as a peer (or anyone
	// who writes Valkey) left it.
	GateWaits string
}

// Snapshot is what a fake Queue knows of one job, for assertions.
type Snapshot struct {
	State        dispatch.JobState
	AttemptsMade int
	// Result is the completed job's result (nil until then).
	Result json.RawMessage
	// FailedReason is the last failure's reason.
	FailedReason string
	// Deferrals counts Defer calls; LastDelay is the last one's delay.
	Deferrals int
	LastDelay time.Duration
	// Takes counts the times the job was handed out.
	Takes int
}

// Finished reports whether the job completed or failed for good.
func (s Snapshot) Finished() bool {
	return s.State == dispatch.StateCompleted || s.State == dispatch.StateFailed
}

type queuedJob struct {
	job       Job
	snap      Snapshot
	token     string
	lockUntil time.Time
	dueAt     time.Time
	seq       int
	processed time.Time
	by        string
	added     time.Time // by the queue's clock
	note      string    // the last DeferNoted's note
}

// Queue is an in-memory dispatch.JobQueue with the semantics of package
// queue's Valkey queue: a lock token per take, a Fail with attempts left puts
// the job back to be taken again (no backoff), NoRetry fails it for good, a
// wrong or expired token is ErrLockLost, an unknown id ErrJobNotFound
// (ExtendLock, which looks only at the lock, says ErrLockLost), and
// CheckStalled fails an active job whose lock expired (MaxStalledCount 0).
type Queue struct {
	name string
	// LockTTL is the lock of a take until the first ExtendLock. Default 30s.
	LockTTL time.Duration
	// WorkerName is recorded as the ProcessedBy of taken jobs.
	WorkerName string
	// Now is the clock of locks and delays. Default time.Now.
	Now func() time.Time

	mu      sync.Mutex
	jobs    map[string]*queuedJob
	seq     int
	changed chan struct{} // closed and replaced on every change
}

var (
	_ dispatch.JobQueue      = (*Queue)(nil)
	_ dispatch.NotedDeferrer = (*Queue)(nil)
	_ interface {
		Unlocked(ctx context.Context) ([]string, error)
	} = (*Queue)(nil)
)

// NewQueue returns an empty queue called name.
func NewQueue(name string) *Queue {
	return &Queue{name: name, jobs: map[string]*queuedJob{}, changed: make(chan struct{})}
}

func (q *Queue) now() time.Time {
	if q.Now != nil {
		return q.Now()
	}
	return time.Now()
}

func (q *Queue) lockTTL() time.Duration {
	if q.LockTTL > 0 {
		return q.LockTTL
	}
	return 30 * time.Second
}

// notify wakes every waiter; callers hold q.mu.
func (q *Queue) notify() {
	close(q.changed)
	q.changed = make(chan struct{})
}

// Name is the queue's name.
func (q *Queue) Name() string { return q.name }

// Add adds j, waiting, and reports true; a job with j.ID already there is
// left as it is, and an empty id is refused: Add then reports false.
func (q *Queue) Add(j Job) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if _, ok := q.jobs[j.ID]; ok || j.ID == "" {
		return false
	}
	q.seq++
	q.jobs[j.ID] = &queuedJob{job: j, seq: q.seq, added: q.now(), note: j.GateWaits, snap: Snapshot{State: StateWaiting, AttemptsMade: j.AttemptsMade}}
	q.notify()
	return true
}

// Take hands out the next ready job (waiting, or delayed and due), oldest
// first, locked with token; nil when none is ready.
func (q *Queue) Take(token string) *dispatch.HeldJob {
	return q.TakeAs(token, q.WorkerName)
}

// TakeAs is Take by another worker: the job's ProcessedBy is worker.
func (q *Queue) TakeAs(token, worker string) *dispatch.HeldJob {
	q.mu.Lock()
	defer q.mu.Unlock()
	j, _ := q.takeLocked(token, worker)
	return j
}

// takeLocked is Take, also returning when the earliest delayed job is due
// (zero: none).
func (q *Queue) takeLocked(token, worker string) (*dispatch.HeldJob, time.Time) {
	now := q.now()
	var next *queuedJob
	var due time.Time
	for _, j := range q.jobs {
		switch j.snap.State {
		case StateDelayed:
			if j.dueAt.After(now) {
				if due.IsZero() || j.dueAt.Before(due) {
					due = j.dueAt
				}
				continue
			}
		case StateWaiting:
		default:
			continue
		}
		if next == nil || j.seq < next.seq {
			next = j
		}
	}
	if next == nil || token == "" {
		return nil, due
	}
	next.snap.State = dispatch.StateActive
	next.snap.Takes++
	next.token, next.lockUntil = token, now.Add(q.lockTTL())
	next.processed, next.by = now, worker
	q.notify()
	return next.held(), time.Time{}
}

func (j *queuedJob) held() *dispatch.HeldJob {
	return &dispatch.HeldJob{
		ID: j.job.ID, Data: slices.Clone(j.job.Data), DedupID: j.job.DedupID,
		AttemptsMade: j.snap.AttemptsMade, Attempts: j.job.Attempts, ProcessedOn: j.processed, EnqueuedAt: j.added, SchedulerID: j.job.SchedulerID,
		ProcessedBy: j.by, DeferredFailure: j.job.DeferredFailure, State: j.snap.State, Corrupt: j.job.Corrupt,
		Signature: j.job.Signature, GateWaits: j.note,
	}
}

// Snapshot returns what the queue knows of job id.
func (q *Queue) Snapshot(id string) (Snapshot, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	j, ok := q.jobs[id]
	if !ok {
		return Snapshot{}, false
	}
	s := j.snap
	s.Result = slices.Clone(s.Result)
	return s, true
}

// WaitFor blocks until cond holds for job id's snapshot, or ctx ends.
func (q *Queue) WaitFor(ctx context.Context, id string, cond func(Snapshot) bool) (Snapshot, error) {
	for {
		q.mu.Lock()
		var s Snapshot
		j, ok := q.jobs[id]
		if ok {
			s = j.snap
		}
		ch := q.changed
		q.mu.Unlock()
		if ok && cond(s) {
			return s, nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return s, fmt.Errorf("job %s: %w (last state %s)", id, ctx.Err(), s.State)
		}
	}
}

// ExpireLock drops job id's lock, as if its holder stopped renewing it.
func (q *Queue) ExpireLock(id string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if j, ok := q.jobs[id]; ok {
		j.token = ""
		q.notify()
	}
}

// held checks that token holds job id, active; callers hold q.mu.
func (q *Queue) heldLocked(op, id, token string) (*queuedJob, error) {
	if id == "" || token == "" {
		return nil, fmt.Errorf("%s %q in %s: empty id or token", op, id, q.name)
	}
	j, ok := q.jobs[id]
	if !ok {
		return nil, fmt.Errorf("%s %q in %s: %w", op, id, q.name, dispatch.ErrJobNotFound)
	}
	if !j.locked(q.now()) || j.token != token {
		return nil, fmt.Errorf("%s %q in %s: %w", op, id, q.name, dispatch.ErrLockLost)
	}
	if j.snap.State != dispatch.StateActive {
		return nil, fmt.Errorf("%s %q in %s: %w", op, id, q.name, dispatch.ErrNotActive)
	}
	return j, nil
}

func (j *queuedJob) locked(now time.Time) bool {
	return j.token != "" && now.Before(j.lockUntil)
}

// unlock ends the hold of j; callers hold q.mu.
func (q *Queue) unlock(j *queuedJob, state dispatch.JobState) {
	j.token, j.lockUntil = "", time.Time{}
	j.snap.State = state
	q.notify()
}

// Complete finishes a job the caller holds with result (nil stores null).
func (q *Queue) Complete(ctx context.Context, id, token string, result json.RawMessage) error {
	if len(result) > 0 && !json.Valid(result) {
		return fmt.Errorf("complete %q in %s: result is not valid JSON", id, q.name)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	j, err := q.heldLocked("complete", id, token)
	if err != nil {
		return err
	}
	j.snap.AttemptsMade++
	j.snap.Result = json.RawMessage("null")
	if len(result) > 0 {
		j.snap.Result = slices.Clone(result)
	}
	q.unlock(j, dispatch.StateCompleted)
	return nil
}

// Fail records a failed attempt: retried (waiting again) while attempts
// remain and opts allow, else failed for good.
func (q *Queue) Fail(ctx context.Context, id, token, reason string, opts dispatch.FailOptions) (bool, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	j, err := q.heldLocked("fail", id, token)
	if err != nil {
		return false, err
	}
	j.snap.AttemptsMade++
	j.snap.FailedReason = reason
	if opts.FreeAttempt && !opts.NoRetry {
		j.job.Attempts++
	}
	if !opts.NoRetry && j.snap.AttemptsMade < j.job.Attempts {
		q.seq++
		j.seq = q.seq
		q.unlock(j, StateWaiting)
		return true, nil
	}
	q.unlock(j, dispatch.StateFailed)
	return false, nil
}

// Defer puts a job the caller holds back in delayed for delay; not an
// attempt.
func (q *Queue) Defer(ctx context.Context, id, token string, delay time.Duration) error {
	return q.DeferNoted(ctx, id, token, delay, "")
}

// DeferNoted is Defer that keeps note on the job for its next take
// (HeldJob.GateWaits); "" keeps the note there.
func (q *Queue) DeferNoted(ctx context.Context, id, token string, delay time.Duration, note string) error {
	if delay < 0 {
		return fmt.Errorf("defer %q in %s: negative delay", id, q.name)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	j, err := q.heldLocked("defer", id, token)
	if err != nil {
		return err
	}
	j.snap.Deferrals++
	j.snap.LastDelay = delay
	if note != "" {
		j.note = note
	}
	j.dueAt = q.now().Add(delay)
	q.seq++
	j.seq = q.seq
	q.unlock(j, StateDelayed)
	return nil
}

// ExtendLock renews the lock of a job the caller holds for ttl. Like the
// Valkey queue it looks only at the lock: an unknown id is ErrLockLost.
func (q *Queue) ExtendLock(ctx context.Context, id, token string, ttl time.Duration) error {
	if id == "" || token == "" || ttl < time.Millisecond {
		return fmt.Errorf("extend lock %q in %s: empty id or token, or ttl under 1ms", id, q.name)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	j, ok := q.jobs[id]
	if !ok || !j.locked(q.now()) || j.token != token {
		return fmt.Errorf("extend lock %q in %s: %w", id, q.name, dispatch.ErrLockLost)
	}
	j.lockUntil = q.now().Add(ttl)
	return nil
}

// Unlocked lists the active jobs whose lock expired: those the next
// CheckStalled fails.
func (q *Queue) Unlocked(ctx context.Context) ([]string, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.unlockedLocked(), nil
}

func (q *Queue) unlockedLocked() []string {
	var ids []string
	now := q.now()
	for id, j := range q.jobs {
		if j.snap.State == dispatch.StateActive && !j.locked(now) {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// CheckStalled fails, as stalled, every active job whose lock expired.
func (q *Queue) CheckStalled(ctx context.Context) (dispatch.Stalled, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	var st dispatch.Stalled
	for _, id := range q.unlockedLocked() {
		j := q.jobs[id]
		j.snap.AttemptsMade++
		j.snap.FailedReason = "stalled"
		q.unlock(j, dispatch.StateFailed)
		st.Failed = append(st.Failed, id)
	}
	return st, nil
}

// Get returns job id with its state, or ErrJobNotFound.
func (q *Queue) Get(ctx context.Context, id string) (*dispatch.HeldJob, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	j, ok := q.jobs[id]
	if !ok {
		return nil, fmt.Errorf("get %q from %s: %w", id, q.name, dispatch.ErrJobNotFound)
	}
	return j.held(), nil
}

// Remove deletes job id whatever its state (a peer's removal behind the
// worker's back).
func (q *Queue) Remove(id string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	delete(q.jobs, id)
	q.notify()
}

// Source hands out the jobs of its queues, the first queue first. It is a
// dispatch.JobSource; Next blocks on the queues' changes, with no goroutine.
type Source struct {
	queues []*Queue
	worker string // the ProcessedBy of its takes; "": each queue's WorkerName

	mu     sync.Mutex
	closed bool
	done   chan struct{}
}

var _ dispatch.JobSource = (*Source)(nil)

// ErrSourceClosed is Next's answer after Close.
var ErrSourceClosed = errors.New("dispatchtest: source closed")

// NewSource returns a Source over queues.
func NewSource(queues ...*Queue) *Source {
	return &Source{queues: queues, done: make(chan struct{})}
}

// Next takes the next ready job of the first queue that has one, locked
// with token, waiting until there is one or ctx ends.
func (s *Source) Next(ctx context.Context, token string) (dispatch.JobQueue, *dispatch.HeldJob, error) {
	for {
		s.mu.Lock()
		closed := s.closed
		s.mu.Unlock()
		if closed {
			return nil, nil, ErrSourceClosed
		}
		var waits []chan struct{}
		var due time.Time
		for _, q := range s.queues {
			q.mu.Lock()
			worker := s.worker
			if worker == "" {
				worker = q.WorkerName
			}
			j, d := q.takeLocked(token, worker)
			waits = append(waits, q.changed)
			q.mu.Unlock()
			if j != nil {
				return q, j, nil
			}
			if !d.IsZero() && (due.IsZero() || d.Before(due)) {
				due = d
			}
		}
		if err := s.wait(ctx, waits, due); err != nil {
			return nil, nil, err
		}
	}
}

// wait returns when a queue changed, the earliest delayed job is due, the
// source closed or ctx ended (ctx's error).
func (s *Source) wait(ctx context.Context, waits []chan struct{}, due time.Time) error {
	cases := make([]reflect.SelectCase, 0, len(waits)+3)
	cases = append(cases,
		reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ctx.Done())},
		reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(s.done)})
	if !due.IsZero() {
		t := time.NewTimer(max(time.Until(due), time.Millisecond))
		defer t.Stop()
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(t.C)})
	}
	for _, ch := range waits {
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ch)})
	}
	if i, _, _ := reflect.Select(cases); i == 0 {
		return ctx.Err()
	}
	return nil
}

// Close makes Next return ErrSourceClosed.
func (s *Source) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closed {
		s.closed = true
		close(s.done)
	}
	return nil
}
