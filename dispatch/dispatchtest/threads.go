package dispatchtest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/fleet"
)

// The defaults of the Valkey Threads (fleetstate/threads.go), held by the
// fake alike.
const (
	threadStaleAfter = 10 * time.Minute
	threadLineMax    = 1000
	threadKeyLives   = 3
	maxEnqueuedMs    = 253402300799999
)

// ErrThreadsUnavailable wraps every call of a Threads whose SetErr is set.
var ErrThreadsUnavailable = errors.New("threads unavailable")

// Threads is an in-memory dispatch.Threads with the Valkey turn script's
// rules (fleetstate/scripts.go, threadTurnScript): a job joins its thread's
// line once, scored by its enqueue time in milliseconds (ties ordered by
// id); a job of the line that has not asked for StaleAfter and does not hold
// the thread is dropped; the holder asking again keeps the thread for its
// new ttl; another holder, or an older job, makes the job wait behind it;
// the line's first job takes the thread when no one holds it. A line holds
// at most MaxLine jobs; a job past it waits without joining. The holder
// expires at its ttl, the line at three StaleAfter windows (at least the
// ttl) after its last ask, as the keys do on Valkey.
//
// The Threads of every host of a fake Fleet share one state; WithStaleAfter
// gives a view of it with its own stale window. It starts no goroutine.
type Threads struct {
	// Now is the store's clock (the server's, on Valkey). Default time.Now.
	Now func() time.Time
	// StaleAfter is the stale window (default 10 minutes).
	StaleAfter time.Duration
	// MaxLine is the most jobs one line holds (default 1000).
	MaxLine int
	// Settle is how long after its enqueue a line's first job waits before
	// it takes the thread (fleetstate.ThreadsConfig.Settle); default 0.
	Settle time.Duration

	st *threadsState
}

// threadsState is the state the views of one Threads share.
type threadsState struct {
	mu    sync.Mutex
	err   error
	lines map[string]*threadLine
}

// threadLine is one thread's keys: the line (job -> enqueue ms), when each
// job last asked (ms), the holder and when each expires.
type threadLine struct {
	score       map[string]int64
	seen        map[string]int64
	lineUntil   time.Time
	holder      string
	holderUntil time.Time
}

var _ dispatch.Threads = (*Threads)(nil)

// NewThreads returns an empty store.
func NewThreads() *Threads {
	return &Threads{st: &threadsState{lines: map[string]*threadLine{}}}
}

// WithStaleAfter is a view of the same lines whose jobs go stale after d.
func (t *Threads) WithStaleAfter(d time.Duration) dispatch.Threads {
	return &Threads{Now: t.Now, StaleAfter: max(d, time.Millisecond), MaxLine: t.MaxLine, Settle: t.Settle, st: t.st}
}

// SetErr makes every call fail with err (wrapped in ErrThreadsUnavailable)
// until it is set back to nil, on every view.
func (t *Threads) SetErr(err error) {
	t.st.mu.Lock()
	defer t.st.mu.Unlock()
	t.st.err = err
}

// Line is thread's line as it stands, oldest first, and its holder ("" when
// none), for assertions.
func (t *Threads) Line(thread string) (line []string, holder string) {
	t.st.mu.Lock()
	defer t.st.mu.Unlock()
	l := t.liveLocked(thread, t.now())
	if l == nil {
		return nil, ""
	}
	return l.orderLocked(), l.holder
}

func (t *Threads) now() time.Time {
	if t.Now != nil {
		return t.Now()
	}
	return time.Now()
}

func (t *Threads) staleAfter() time.Duration {
	if t.StaleAfter >= time.Millisecond {
		return t.StaleAfter
	}
	return threadStaleAfter
}

func (t *Threads) maxLine() int {
	if t.MaxLine > 0 {
		return t.MaxLine
	}
	return threadLineMax
}

// liveLocked is thread's line with what expired at now removed; nil when
// nothing is left.
func (t *Threads) liveLocked(thread string, now time.Time) *threadLine {
	l := t.st.lines[thread]
	if l == nil {
		return nil
	}
	if l.holder != "" && !now.Before(l.holderUntil) {
		l.holder = ""
	}
	if !now.Before(l.lineUntil) {
		l.score, l.seen = map[string]int64{}, map[string]int64{}
	}
	if l.holder == "" && len(l.score) == 0 {
		delete(t.st.lines, thread)
		return nil
	}
	return l
}

// orderLocked is the line oldest first, ties by id (a ZSET's order).
func (l *threadLine) orderLocked() []string {
	out := make([]string, 0, len(l.score))
	for id := range l.score {
		out = append(out, id)
	}
	slices.SortFunc(out, func(a, b string) int {
		return cmp.Or(cmp.Compare(l.score[a], l.score[b]), cmp.Compare(a, b))
	})
	return out
}

// Turn puts jobID in thread's line once and answers whether it may run now.
func (t *Threads) Turn(ctx context.Context, thread, jobID string, enqueuedAt time.Time, ttl time.Duration) (dispatch.ThreadTurn, error) {
	if err := fakeThreadArgs(thread, jobID); err != nil {
		return dispatch.ThreadTurn{}, err
	}
	if ttl < time.Millisecond {
		return dispatch.ThreadTurn{}, fmt.Errorf("threads: turn of %s: ttl %s is under a millisecond", jobID, ttl)
	}
	if err := ctx.Err(); err != nil {
		return dispatch.ThreadTurn{}, err
	}
	t.st.mu.Lock()
	defer t.st.mu.Unlock()
	if t.st.err != nil {
		return dispatch.ThreadTurn{}, fmt.Errorf("%w: turn of %s: %w", ErrThreadsUnavailable, jobID, t.st.err)
	}
	now := t.now()
	nowMs := now.UnixMilli()
	l := t.liveLocked(thread, now)
	if l == nil {
		l = &threadLine{score: map[string]int64{}, seen: map[string]int64{}}
		t.st.lines[thread] = l
	}
	_, inLine := l.score[jobID]
	if inLine {
		l.seen[jobID] = nowMs
	}
	stale := t.staleAfter().Milliseconds()
	for id := range l.score {
		if id != l.holder && nowMs-l.seen[id] >= stale {
			delete(l.score, id)
			delete(l.seen, id)
		}
	}
	if !inLine && len(l.score) < t.maxLine() {
		score := nowMs
		if !enqueuedAt.IsZero() {
			score = min(max(enqueuedAt.UnixMilli(), 0), maxEnqueuedMs)
		}
		l.score[jobID], l.seen[jobID] = score, nowMs
	}
	var turn dispatch.ThreadTurn
	switch {
	case l.holder == jobID:
		l.holderUntil = now.Add(ttl)
		turn.Granted = true
	case l.holder != "":
		turn.Behind = l.holder
	default:
		first := l.orderLocked()
		switch {
		case len(first) > 0 && first[0] == jobID && nowMs-l.score[jobID] < t.Settle.Milliseconds():
			turn.Behind = jobID // settling
		case len(first) > 0 && first[0] == jobID:
			l.holder, l.holderUntil = jobID, now.Add(ttl)
			turn.Granted = true
		case len(first) > 0:
			turn.Behind = first[0]
		}
	}
	if until := now.Add(max(threadKeyLives*t.staleAfter(), ttl)); until.After(l.lineUntil) {
		l.lineUntil = until
	}
	return turn, nil
}

// Done takes jobID out of thread's line and frees the thread when it holds
// it. Calling it again does nothing.
func (t *Threads) Done(ctx context.Context, thread, jobID string) error {
	if err := fakeThreadArgs(thread, jobID); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	t.st.mu.Lock()
	defer t.st.mu.Unlock()
	if t.st.err != nil {
		return fmt.Errorf("%w: done of %s: %w", ErrThreadsUnavailable, jobID, t.st.err)
	}
	l := t.liveLocked(thread, t.now())
	if l == nil {
		return nil
	}
	delete(l.score, jobID)
	delete(l.seen, jobID)
	if l.holder == jobID {
		l.holder = ""
	}
	t.liveLocked(thread, t.now())
	return nil
}

// fakeThreadArgs refuses an empty thread and a job id the fleet's rule
// refuses, as the Valkey store does.
func fakeThreadArgs(thread, jobID string) error {
	if thread == "" {
		return errors.New("threads: empty thread")
	}
	if err := fleet.CheckJobID(jobID); err != nil {
		return fmt.Errorf("threads: job id: %w", err)
	}
	return nil
}
