package queue

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// DefaultBlockTimeout is the longest single wait on the markers. An idle
// consumer of N queues issues N fetches and one BZPOPMIN per timeout.
const DefaultBlockTimeout = 5 * time.Second

// ErrConsumerClosed is returned by Next after Close.
var ErrConsumerClosed = errors.New("queue: consumer closed")

// ConsumerConfig tunes a Consumer. The zero value is usable.
type ConsumerConfig struct {
	// BlockTimeout is the longest single wait on the queues' markers before
	// every queue is fetched again as a safety net. Defaults to 5s.
	BlockTimeout time.Duration
	// NowFunc is the local clock, used only to measure how long to sleep
	// until the next delayed job (whose due time the server reports
	// relative to its own clock). Its absolute value never matters, so a
	// skewed host clock changes nothing. Defaults to time.Now.
	NowFunc func() time.Time
}

// blocker is what waiting needs from a client or a dedicated connection.
type blocker interface {
	BZPopMin(ctx context.Context, timeout time.Duration, keys ...string) *redis.ZWithKeyCmd
	Do(ctx context.Context, args ...any) *redis.Cmd
}

var (
	_ blocker = (*redis.Conn)(nil)
	_ blocker = (redis.UniversalClient)(nil)
)

// Consumer takes jobs from one or more queues, sleeping on all their
// markers at once (one BZPOPMIN) when there is nothing to do, so an idle
// consumer does not poll. Delayed jobs are promoted by the fetch script on
// the server's clock; the consumer only sleeps until the next one is due.
//
// Next must not be called concurrently; Close waits for a running Next, so
// cancel Next's context first.
type Consumer struct {
	queues   []*Queue
	client   redis.UniversalClient
	markers  []string
	byMarker map[string]int
	cfg      ConsumerConfig

	mu     sync.Mutex
	closed bool
	conn   *redis.Conn // dedicated blocking connection, when the client has one
	connID int64
	// presence holds one idle connection per queue after the first, named
	// like conn, so that each queue lists this consumer as a worker.
	presence []*redis.Conn
	shared   bool        // no dedicated connection possible: wait on the client's pool
	stale    []bool      // fetch this queue at the next pass
	due      []time.Time // local time its next delayed job is due; zero: none
	rr       int
}

// NewConsumer returns a consumer of queues (at least one, all on the same
// Valkey: the first queue's client is used to wait). With a *redis.Client
// it waits on a dedicated connection so that cancelling Next's context
// interrupts the wait at once (CLIENT UNBLOCK); with other clients a
// cancelled Next returns within BlockTimeout.
func NewConsumer(queues []*Queue, cfg ConsumerConfig) (*Consumer, error) {
	if len(queues) == 0 {
		return nil, optErr("queues", "none")
	}
	if cfg.BlockTimeout == 0 {
		cfg.BlockTimeout = DefaultBlockTimeout
	}
	if cfg.BlockTimeout < time.Millisecond {
		return nil, optErr("ConsumerConfig.BlockTimeout", "must be at least 1ms")
	}
	if cfg.NowFunc == nil {
		cfg.NowFunc = time.Now
	}
	c := &Consumer{
		queues:   queues,
		client:   queues[0].client,
		byMarker: make(map[string]int, len(queues)),
		cfg:      cfg,
		stale:    make([]bool, len(queues)),
		due:      make([]time.Time, len(queues)),
	}
	for i, q := range queues {
		if q == nil {
			return nil, optErr("queues", "nil queue")
		}
		m := q.keys.marker()
		if _, dup := c.byMarker[m]; dup {
			return nil, optErr("queues", "%s given twice", q.name)
		}
		c.byMarker[m] = i
		c.markers = append(c.markers, m)
		c.stale[i] = true
	}
	return c, nil
}

// Next returns the next job of any queue, locked with token, and its
// queue. It blocks until there is one, ctx ends (ctx.Err()), or Close.
// Queues are served round-robin.
func (c *Consumer) Next(ctx context.Context, token string) (*Queue, *Job, error) {
	if token == "" {
		return nil, nil, optErr("token", "empty")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	n := len(c.queues)
	for {
		if c.closed {
			return nil, nil, ErrConsumerClosed
		}
		if err := ctx.Err(); err != nil {
			return nil, nil, err
		}
		if err := c.connect(ctx); err != nil {
			return nil, nil, err
		}
		start := c.rr
		c.rr = (c.rr + 1) % n
		for i := range n {
			idx := (start + i) % n
			if !c.stale[idx] && (c.due[idx].IsZero() || c.cfg.NowFunc().Before(c.due[idx])) {
				continue
			}
			q := c.queues[idx]
			f, err := q.fetch(ctx, token)
			if err != nil {
				return nil, nil, err
			}
			c.stale[idx] = false
			c.due[idx] = time.Time{}
			if f.nextDelay >= 0 {
				c.due[idx] = c.cfg.NowFunc().Add(f.nextDelay)
			}
			if f.job != nil {
				// More may be ready here, and the others deserve a turn.
				for j := range c.stale {
					c.stale[j] = true
				}
				return q, f.job, nil
			}
		}
		wait := c.cfg.BlockTimeout
		now := c.cfg.NowFunc()
		for _, d := range c.due {
			if !d.IsZero() && d.Sub(now) < wait {
				wait = d.Sub(now)
			}
		}
		if wait <= 0 {
			continue
		}
		woke, err := c.wait(ctx, wait, wait < c.cfg.BlockTimeout)
		if err != nil {
			return nil, nil, err
		}
		if woke >= 0 {
			c.stale[woke] = true
		} else if wait == c.cfg.BlockTimeout {
			for j := range c.stale {
				c.stale[j] = true
			}
		}
	}
}

// Close releases the consumer's dedicated connection. It waits for a
// running Next to return.
func (c *Consumer) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	// Close takes no context: the release is bounded by releaseConn's second.
	return c.dropConn(context.Background())
}

func (c *Consumer) dropConn(ctx context.Context) error {
	if c.conn == nil {
		return nil
	}
	err := releaseConn(ctx, c.conn)
	c.conn = nil
	for _, p := range c.presence {
		err = errors.Join(err, releaseConn(ctx, p))
	}
	c.presence = nil
	return err
}

// releaseConn returns a named connection to the client's pool without its
// name (a pooled connection keeps it, and would list a closed consumer).
// A broken connection fails to clear and is discarded by the pool.
func releaseConn(ctx context.Context, conn *redis.Conn) error {
	// The connection is released even when ctx has ended.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	_ = conn.ClientSetName(ctx, "").Err()
	return conn.Close()
}

// connect opens the dedicated blocking connection, once, and names it
// (and one idle connection for each further queue) the way BullMQ names a
// Worker's blocking connection, so that BullMQ's getWorkers() and Bull
// Board list this consumer under each of its queues. Next calls it before
// its first fetch: a consumer that never sleeps is listed too.
func (c *Consumer) connect(ctx context.Context) error {
	if c.conn != nil || c.shared {
		return nil
	}
	cl, ok := c.client.(*redis.Client)
	if !ok {
		c.shared = true
		return nil
	}
	conn := cl.Conn()
	id, err := conn.ClientID(ctx).Result()
	var rerr redis.Error
	switch {
	case errors.As(err, &rerr):
		// The server cannot name connections (CLIENT ID): wait on the
		// shared pool; cancellation then takes effect when the wait ends.
		_ = conn.Close()
		c.shared = true
		return nil
	case err != nil:
		_ = conn.Close()
		return fmt.Errorf("consumer connection: %w", err)
	}
	c.conn, c.connID = conn, id
	if err := nameConn(ctx, conn, c.queues[0]); err != nil {
		return err
	}
	for _, q := range c.queues[1:] {
		p := cl.Conn()
		c.presence = append(c.presence, p)
		if err := nameConn(ctx, p, q); err != nil {
			return err
		}
	}
	return nil
}

// nameConn gives conn q's worker connection name. A server that refuses
// the name (a worker name with spaces, or CLIENT SETNAME disabled) leaves
// the connection unnamed: being listed is not worth failing a consumer.
func nameConn(ctx context.Context, conn *redis.Conn, q *Queue) error {
	err := conn.ClientSetName(ctx, q.keys.workerName(q.cfg.WorkerName)).Err()
	var rerr redis.Error
	if err != nil && !errors.As(err, &rerr) {
		return fmt.Errorf("name consumer connection: %w", err)
	}
	return nil
}

// wait sleeps on every queue's marker for at most d and returns the index
// of the queue whose marker woke it, or -1 on timeout or cancellation.
//
// Valkey checks blocking timeouts on its own timer (hz, 100ms by default),
// so a BZPOPMIN timeout can fire that late. When timed is set (the wait
// ends when a delayed job is due) and a dedicated connection exists, the
// wait is ended by a local timer with CLIENT UNBLOCK instead, and the
// server-side timeout is only a backstop.
func (c *Consumer) wait(ctx context.Context, d time.Duration, timed bool) (int, error) {
	if dl, ok := ctx.Deadline(); ok {
		if left := time.Until(dl); left < d {
			d, timed = left, true
		}
	}
	if d <= 0 {
		return -1, ctx.Err()
	}
	if err := c.connect(ctx); err != nil {
		return -1, err
	}
	// The command itself must not be cut short by ctx: a read deadline
	// would break the connection. Cancellation unblocks it instead.
	bctx := context.WithoutCancel(ctx)
	if c.conn == nil {
		key, err := popMarker(bctx, c.client, c.markers, d)
		return c.woke(ctx, key, err)
	}
	key, err := c.block(ctx, d, timed)
	var rerr redis.Error
	if err != nil && !errors.Is(err, redis.Nil) && !errors.As(err, &rerr) && ctx.Err() == nil {
		// The dedicated connection sat idle while the server restarted (every
		// slot was busy, so no wait was in flight): it fails at its first use,
		// though the fetch just before it, on the pool, found the server
		// back. One fresh connection decides; a real outage fails it too.
		_ = c.dropConn(ctx)
		if err := c.connect(ctx); err != nil {
			return -1, err
		}
		key, err = c.block(ctx, d, timed)
	}
	return c.woke(ctx, key, err)
}

// block runs one BZPOPMIN on the dedicated connection, ended by CLIENT
// UNBLOCK when ctx ends or, when timed, when d has passed.
func (c *Consumer) block(ctx context.Context, d time.Duration, timed bool) (string, error) {
	wctx, cancel := ctx, context.CancelFunc(func() {})
	serverTimeout := d
	if timed {
		wctx, cancel = context.WithTimeout(ctx, d)
		serverTimeout = d.Truncate(time.Second) + time.Second
	}
	defer cancel()
	done, exited := make(chan struct{}), make(chan struct{})
	stop := context.AfterFunc(wctx, func() {
		defer close(exited)
		c.unblock(wctx, done)
	})
	key, err := popMarker(context.WithoutCancel(ctx), c.conn, c.markers, serverTimeout)
	close(done)
	if !stop() {
		<-exited
	}
	return key, err
}

// woke turns a wait's reply into the index of the queue whose marker woke
// it, or -1 on timeout or cancellation.
func (c *Consumer) woke(ctx context.Context, key string, err error) (int, error) {
	switch {
	case errors.Is(err, redis.Nil):
		return -1, nil
	case err != nil:
		_ = c.dropConn(ctx)
		if ctx.Err() != nil {
			return -1, ctx.Err()
		}
		return -1, fmt.Errorf("wait on queue markers: %w", err)
	}
	idx, ok := c.byMarker[key]
	if !ok {
		return -1, nil
	}
	return idx, nil
}

// unblock interrupts the dedicated connection's BZPOPMIN once ctx is done,
// retrying briefly in case the command has not reached the server yet.
func (c *Consumer) unblock(ctx context.Context, done <-chan struct{}) {
	uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for {
		n, err := c.client.ClientUnblock(uctx, c.connID).Result()
		if err != nil || n == 1 {
			return // unblocked, or the server cannot: the wait ends by its timeout
		}
		select {
		case <-done:
			return
		case <-uctx.Done():
			return
		case <-tick.C:
		}
	}
}

// popMarker runs one BZPOPMIN over keys for d. go-redis sends whole seconds
// only, so waits under a second are sent as a decimal timeout.
func popMarker(ctx context.Context, b blocker, keys []string, d time.Duration) (string, error) {
	if d >= time.Second {
		r, err := b.BZPopMin(ctx, d.Truncate(time.Second), keys...).Result()
		if err != nil {
			return "", err
		}
		return r.Key, nil
	}
	ms := max(d.Milliseconds(), 1)
	args := make([]any, 0, len(keys)+2)
	args = append(args, "BZPOPMIN")
	for _, k := range keys {
		args = append(args, k)
	}
	args = append(args, strconv.FormatFloat(float64(ms)/1000, 'f', 3, 64))
	res, err := b.Do(ctx, args...).Result()
	if err != nil {
		return "", err
	}
	if r, ok := res.([]any); ok && len(r) > 0 {
		k, _ := r[0].(string)
		return k, nil
	}
	return "", redis.Nil
}

// WaitAny blocks until one of the queues' markers says a job may be ready
// (it returns that queue) or timeout passes (nil). Call the queue's Fetch
// afterwards. It uses client for one BZPOPMIN; cancelling ctx takes effect
// when the wait ends. Consumer does this loop with fairness and delayed
// jobs; WaitAny is the primitive for callers with their own loop.
func WaitAny(ctx context.Context, client redis.UniversalClient, timeout time.Duration, queues ...*Queue) (*Queue, error) {
	if len(queues) == 0 {
		return nil, optErr("queues", "none")
	}
	if timeout < time.Millisecond {
		return nil, optErr("timeout", "must be at least 1ms")
	}
	keys := make([]string, len(queues))
	for i, q := range queues {
		keys[i] = q.keys.marker()
	}
	key, err := popMarker(ctx, client, keys, timeout)
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("wait on queue markers: %w", err)
	}
	for _, q := range queues {
		if q.keys.marker() == key {
			return q, nil
		}
	}
	return nil, nil
}
