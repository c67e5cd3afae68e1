// Package inbox keeps every verified forge delivery until it is processed,
// so none is lost because Valkey stalled, a forge API said "later", a
// receiver crashed, or the forge does not deliver again.
//
// The receiver stores a delivery (Put) before it answers: in Valkey when
// Valkey answers within StoreTimeout, else in a local spool folder (written,
// fsynced and renamed before the answer). Only when neither takes it is the
// delivery answered 503. A drain loop moves the spool into Valkey, oldest
// first, once Valkey answers again; a processor loop takes each stored
// delivery under a lease, hands it to the forge intake (matching, the
// permission lookup, the enqueue), and ends it, or puts it back with a
// backoff that honours the forge's Retry-After and rate-limit reset, for at
// most MaxAge. Both loops are Run. A delivery is stored once by its Key, the
// digest of the body the forge signed, never by its unsigned id header, so a
// body replayed under a new id is a duplicate; it is processed at least
// once, and its effects are idempotent (its job id is its key), so it starts
// its jobs once.
package inbox

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/pidispatch/pidispatch/forge"
	"github.com/pidispatch/pidispatch/internal/bounded"
	"github.com/pidispatch/pidispatch/jobs"
)

// Defaults of Config.
const (
	DefaultStoreTimeout  = time.Second
	DefaultSpoolMax      = 256 << 20
	DefaultMaxBody       = 2 << 20
	DefaultLease         = time.Minute
	DefaultHandleTimeout = 20 * time.Second
	DefaultMaxAge        = 24 * time.Hour
	DefaultMinBackoff    = 5 * time.Second
	DefaultMaxBackoff    = 10 * time.Minute
	DefaultPoll          = time.Second
	DefaultConcurrency   = 4
	// opTimeout bounds each Valkey call of the loops (not a request's).
	opTimeout = 5 * time.Second
	// lengthEvery is how often the inbox length gauge is read.
	lengthEvery = 5 * time.Second
)

// Handler decides a delivery's event: a *forge.Intake. An error leaves the
// event undecided; it is handled again later.
type Handler interface {
	Handle(ctx context.Context, ev forge.Event) (forge.Outcome, error)
}

// Config configures an Inbox.
type Config struct {
	// Valkey holds the inbox. Required.
	Valkey redis.UniversalClient
	// Handler decides each delivery. Required by Run.
	Handler Handler
	// SpoolDir is the spool folder (RECEIVER_SPOOL_DIR). Required.
	SpoolDir string
	// SpoolMax bounds the spool's files in bytes (RECEIVER_SPOOL_MAX).
	// Default 256 MiB.
	SpoolMax int64
	// MaxBody bounds one delivery's body: the receiver's body limit.
	// Default 2 MiB.
	MaxBody int64
	// StoreTimeout is how long Put waits for Valkey before it spools
	// (RECEIVER_STORE_TIMEOUT). Default 1 s.
	StoreTimeout time.Duration
	// MaxLength bounds each forge's inbox in Valkey (RECEIVER_INBOX_MAX).
	// Default 10000.
	MaxLength int
	// SeenTTL is how long a delivery's key is remembered. Default 35 days.
	SeenTTL time.Duration
	// Lease is how long a processor holds a delivery before another may
	// take it again. Default 1 minute.
	Lease time.Duration
	// HandleTimeout bounds one Handle call; under Lease. Default 20 s.
	HandleTimeout time.Duration
	// MaxAge is how long a delivery is retried, counted from when Valkey
	// stored it; then it is given up (forge_delivery_abandoned). Default 24 h.
	MaxAge time.Duration
	// MinBackoff and MaxBackoff bound the wait before a retry the forge
	// did not time: MinBackoff doubled per try, at most MaxBackoff, plus up
	// to a quarter. Defaults 5 s and 10 min.
	MinBackoff, MaxBackoff time.Duration
	// Poll is how often an idle loop looks again. Default 1 s.
	Poll time.Duration
	// Concurrency is how many deliveries are processed at once. Default 4.
	Concurrency int
	// Forges are the forges whose inboxes are processed. Default all.
	Forges []jobs.Forge
	// Now is the clock of the retry delays (a forge's reset is a wall-clock
	// time). Due times and ages are the Valkey server's. Default time.Now.
	Now func() time.Time
	// Logger receives receiver_* and forge_delivery_* events; Host is on
	// every line.
	Logger *slog.Logger
	Host   string
}

func (c *Config) defaults() {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&c.StoreTimeout, DefaultStoreTimeout)
	def(&c.Lease, DefaultLease)
	def(&c.HandleTimeout, DefaultHandleTimeout)
	def(&c.MaxAge, DefaultMaxAge)
	def(&c.MinBackoff, DefaultMinBackoff)
	def(&c.MaxBackoff, DefaultMaxBackoff)
	def(&c.Poll, DefaultPoll)
	def(&c.SeenTTL, DefaultSeenTTL)
	if c.HandleTimeout >= c.Lease {
		c.HandleTimeout = c.Lease / 2
	}
	if c.SpoolMax <= 0 {
		c.SpoolMax = DefaultSpoolMax
	}
	if c.MaxBody <= 0 {
		c.MaxBody = DefaultMaxBody
	}
	if c.MaxLength <= 0 {
		c.MaxLength = DefaultMaxLength
	}
	if c.Concurrency <= 0 {
		c.Concurrency = DefaultConcurrency
	}
	if len(c.Forges) == 0 {
		c.Forges = Forges
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// Inbox is the durable inbox of one receiver.
type Inbox struct {
	cfg   Config
	log   *slog.Logger
	store *Store
	spool *Spool
	m     *metrics
	calls bounded.Calls

	wakeProc, wakeDrain chan struct{}

	mu      sync.Mutex
	holds   map[jobs.Forge]time.Time // a forge's rate limit: not asked before
	down    bool                     // the processor's Valkey calls fail
	spooled bool                     // the spool took a delivery since it was last empty
}

// Open checks cfg and opens the spool folder (taking its lock). It dials
// nothing: Valkey may be down.
func Open(cfg Config) (*Inbox, error) {
	if cfg.Valkey == nil || cfg.SpoolDir == "" {
		return nil, errors.New("inbox: Valkey and SpoolDir are required")
	}
	cfg.defaults()
	log := cfg.Logger.With("host", cfg.Host)
	spool, err := OpenSpool(cfg.SpoolDir, cfg.SpoolMax, cfg.MaxBody, log)
	if err != nil {
		return nil, err
	}
	ib := &Inbox{
		cfg: cfg, log: log, spool: spool,
		store:    &Store{Client: cfg.Valkey, SeenTTL: cfg.SeenTTL, EntryTTL: cfg.MaxAge + 24*time.Hour, MaxLength: cfg.MaxLength, MaxBody: cfg.MaxBody},
		wakeProc: make(chan struct{}, 1), wakeDrain: make(chan struct{}, 1),
		holds: map[jobs.Forge]time.Time{},
	}
	ib.m = newMetrics(spool)
	return ib, nil
}

// Collectors are the inbox's metrics, for the receiver's registry.
func (ib *Inbox) Collectors() []prometheus.Collector { return ib.m.collectors() }

// Spool is the inbox's spool.
func (ib *Inbox) Spool() *Spool { return ib.spool }

// Store is the inbox's Valkey side.
func (ib *Inbox) Store() *Store { return ib.store }

// MaxBody is the bound of one delivery's body.
func (ib *Inbox) MaxBody() int64 { return ib.cfg.MaxBody }

// StoreTimeout is how long Put waits for Valkey.
func (ib *Inbox) StoreTimeout() time.Duration { return ib.cfg.StoreTimeout }

// Close releases the spool folder. Run must have returned.
func (ib *Inbox) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*ib.cfg.StoreTimeout)
	_ = ib.calls.Wait(ctx)
	cancel()
	ib.spool.Close()
}

// StoreError is a delivery stored nowhere: Valkey did not take it (or the
// spool held earlier ones) and the spool could not.
type StoreError struct {
	Valkey, Spool error
}

// errSpoolFirst: earlier deliveries wait in the spool, so this one joins
// them rather than pass them.
var errSpoolFirst = errors.New("earlier deliveries wait in the spool")

func (e *StoreError) Error() string {
	return fmt.Sprintf("valkey: %v; spool: %v", e.Valkey, e.Spool)
}

// Reason is the fixed token logged with a 503: spool-full or
// spool-unwritable.
func (e *StoreError) Reason() string {
	if errors.Is(e.Spool, ErrSpoolFull) {
		return "spool-full"
	}
	return "spool-unwritable"
}

func (e *StoreError) Unwrap() []error { return []error{e.Valkey, e.Spool} }

// Put stores d durably and says where: Stored (Valkey), Spooled (the local
// spool, because Valkey did not answer within StoreTimeout or the spool
// holds earlier deliveries), Duplicate (its body was stored before, under
// any id; nothing stored) or Full (the forge's inbox holds MaxLength; nothing stored). An
// error, a *StoreError, means it was stored nowhere. Put returns within about
// StoreTimeout plus one spool write, whatever Valkey does.
func (ib *Inbox) Put(ctx context.Context, d Delivery) (Outcome, error) {
	if err := d.check(ib.cfg.MaxBody); err != nil {
		return "", err
	}
	if ib.spool.Has(d) {
		return Duplicate, nil
	}
	verr := errSpoolFirst
	if ib.spool.Files() == 0 {
		out, err := ib.putValkey(ctx, d)
		if err == nil {
			if out == Stored {
				wake(ib.wakeProc)
			}
			return out, nil
		}
		verr = err
	}
	if err := ib.spool.Put(d); err != nil {
		return "", &StoreError{Valkey: verr, Spool: err}
	}
	ib.mu.Lock()
	ib.spooled = true
	ib.mu.Unlock()
	ib.log.Warn("receiver_spooled", "forge", d.Forge, "delivery", d.Key(), "forgeDelivery", d.ID, "why", verr.Error(),
		"files", ib.spool.Files(), "bytes", ib.spool.Bytes())
	wake(ib.wakeDrain)
	return Spooled, nil
}

// putValkey stores d in Valkey within StoreTimeout, whatever the client's own
// timeouts. A store that answers late still counts: the processor is woken.
func (ib *Inbox) putValkey(ctx context.Context, d Delivery) (Outcome, error) {
	late := func(out Outcome, err error) {
		if err == nil && out == Stored {
			wake(ib.wakeProc)
		}
	}
	return bounded.Call(ctx, ib.cfg.StoreTimeout, &ib.calls, late, func(ctx context.Context) (Outcome, error) {
		return ib.store.Put(ctx, d)
	})
}

func wake(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// Run drains the spool and processes the inbox until ctx ends; deliveries
// being handled then are finished first (each within HandleTimeout).
func (ib *Inbox) Run(ctx context.Context) error {
	if ib.cfg.Handler == nil {
		return errors.New("inbox: Run needs a Handler")
	}
	var wg sync.WaitGroup
	wg.Go(func() { ib.drainLoop(ctx) })
	wg.Go(func() { ib.processLoop(ctx) })
	wg.Wait()
	return nil
}

// Drain moves the spool into Valkey once, oldest first, and says how many
// deliveries it moved; an error says why it stopped early.
func (ib *Inbox) Drain(ctx context.Context) (int, error) {
	n, err := ib.spool.Drain(ctx, ib.putValkey)
	if n > 0 {
		wake(ib.wakeProc)
	}
	if err == nil && ib.spool.Files() == 0 {
		ib.mu.Lock()
		was := ib.spooled
		ib.spooled = false
		ib.mu.Unlock()
		if was || n > 0 {
			ib.log.Info("receiver_spool_drained", "moved", n)
		}
	}
	return n, err
}

// drainLoop drains whenever the spool holds something, backing off while
// Valkey does not take it.
func (ib *Inbox) drainLoop(ctx context.Context) {
	backoff := ib.cfg.Poll / 4
	for ctx.Err() == nil {
		if ib.spool.Files() > 0 {
			if _, err := ib.Drain(ctx); err == nil {
				backoff = ib.cfg.Poll / 4
				continue
			}
			sleep(ctx, backoff, nil)
			backoff = min(backoff*2, 5*ib.cfg.Poll)
			continue
		}
		sleep(ctx, ib.cfg.Poll, ib.wakeDrain)
	}
}

// sleep waits d, or until woken or ctx ends.
func sleep(ctx context.Context, d time.Duration, woken <-chan struct{}) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	case <-woken:
	}
}

// processLoop claims due deliveries, Concurrency at a time, round-robin
// over the forges, and gives back the ones whose lease ended.
func (ib *Inbox) processLoop(ctx context.Context) {
	sem := make(chan struct{}, ib.cfg.Concurrency)
	var wg sync.WaitGroup
	defer wg.Wait()
	var lastRequeue, lastLength time.Time
	next := 0
	for ctx.Err() == nil {
		if now := time.Now(); now.Sub(lastRequeue) >= ib.cfg.Poll {
			lastRequeue = now
			ib.requeue(ctx)
			if now.Sub(lastLength) >= lengthEvery {
				lastLength = now
				ib.readLengths(ctx)
			}
		}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return
		}
		c, wait := ib.claimNext(ctx, &next)
		if c == nil {
			<-sem
			sleep(ctx, min(max(wait, time.Millisecond), ib.cfg.Poll), ib.wakeProc)
			continue
		}
		wg.Go(func() {
			defer func() { <-sem }()
			ib.process(ctx, c)
		})
	}
}

// op runs one Valkey call of the loops, bounded, and tracks whether Valkey
// answers: forge_inbox_unavailable once when it stops, forge_inbox_restored
// when it answers again.
func op[T any](ctx context.Context, ib *Inbox, fn func(context.Context) (T, error)) (T, error) {
	v, err := bounded.Call(ctx, opTimeout, &ib.calls, nil, fn)
	if ctx.Err() != nil {
		return v, err
	}
	ib.mu.Lock()
	defer ib.mu.Unlock()
	switch {
	case err != nil && !ib.down:
		ib.down = true
		ib.log.Error("forge_inbox_unavailable", "err", err.Error())
	case err == nil && ib.down:
		ib.down = false
		ib.log.Info("forge_inbox_restored")
	}
	return v, err
}

func (ib *Inbox) requeue(ctx context.Context) {
	for _, f := range ib.cfg.Forges {
		n, err := op(ctx, ib, func(ctx context.Context) (int, error) { return ib.store.Requeue(ctx, f, 100) })
		if err == nil && n > 0 {
			ib.log.Warn("forge_delivery_lease_expired", "forge", f, "deliveries", n)
			ib.m.processed.WithLabelValues(string(f), "lease-expired").Add(float64(n))
		}
	}
}

func (ib *Inbox) readLengths(ctx context.Context) {
	for _, f := range ib.cfg.Forges {
		if n, err := op(ctx, ib, func(ctx context.Context) (int64, error) { return ib.store.Length(ctx, f) }); err == nil {
			ib.m.length.WithLabelValues(string(f)).Set(float64(n))
		}
	}
}

// claimNext claims the next due delivery of the forges not held by a rate
// limit, starting after the forge that gave the last one. nil: none is due;
// wait says when the first is.
func (ib *Inbox) claimNext(ctx context.Context, next *int) (*Claimed, time.Duration) {
	wait := ib.cfg.Poll
	n := len(ib.cfg.Forges)
	for i := range n {
		f := ib.cfg.Forges[(*next+i)%n]
		if until, held := ib.held(f); held {
			wait = min(wait, until)
			continue
		}
		type claim struct {
			c    *Claimed
			wait time.Duration
		}
		r, err := op(ctx, ib, func(ctx context.Context) (claim, error) {
			c, w, err := ib.store.Claim(ctx, f, newToken(), ib.cfg.Lease)
			return claim{c, w}, err
		})
		if err != nil {
			continue
		}
		if r.c != nil {
			*next = (*next + i + 1) % n
			return r.c, 0
		}
		if r.wait > 0 {
			wait = min(wait, r.wait)
		}
	}
	return nil, wait
}

// held says whether f is held by a rate limit, and for how much longer.
func (ib *Inbox) held(f jobs.Forge) (time.Duration, bool) {
	ib.mu.Lock()
	defer ib.mu.Unlock()
	until, ok := ib.holds[f]
	if !ok {
		return 0, false
	}
	left := until.Sub(ib.cfg.Now())
	if left <= 0 {
		delete(ib.holds, f)
		return 0, false
	}
	return left, true
}

func (ib *Inbox) hold(f jobs.Forge, d time.Duration) {
	ib.mu.Lock()
	defer ib.mu.Unlock()
	if until := ib.cfg.Now().Add(d); until.After(ib.holds[f]) {
		ib.holds[f] = until
	}
}

func newToken() string {
	b := make([]byte, 12)
	_, _ = crand.Read(b)
	return hex.EncodeToString(b)
}

// process decides one claimed delivery and ends it, or puts it back.
func (ib *Inbox) process(ctx context.Context, c *Claimed) {
	attrs := []any{"forge", c.Forge, "delivery", c.ID, "tries", c.Tries}
	d, err := Decode(c.Env, ib.cfg.MaxBody)
	// An entry stored before keys existed is under its delivery id, and its
	// jobs are named after it: processed as it was stored.
	if err == nil && (d.Forge != c.Forge || (c.ID != d.Key() && c.ID != d.ID)) {
		err = invalid("stored under another forge or key")
	}
	if err != nil {
		ib.abandon(ctx, c, attrs, "invalid", err)
		return
	}
	attrs = append(attrs, "forgeDelivery", d.ID)
	ev, err := parseAs(d, c.ID)
	if err != nil {
		ib.abandon(ctx, c, attrs, forge.ReasonMalformed, err)
		return
	}
	hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ib.cfg.HandleTimeout)
	out, err := ib.cfg.Handler.Handle(hctx, ev)
	cancel()
	if err == nil {
		if ib.end(ctx, c, attrs) {
			ib.m.processed.WithLabelValues(string(c.Forge), out.Status).Inc()
		}
		return
	}
	reason := retryReason(err)
	delay, forgeSaid := ib.retryDelay(c.Tries, err)
	if c.Age()+delay > ib.cfg.MaxAge {
		ib.abandon(ctx, c, attrs, reason, err)
		return
	}
	ok, rerr := op(context.WithoutCancel(ctx), ib, func(ctx context.Context) (bool, error) {
		return ib.store.Retry(ctx, c, delay, reason)
	})
	switch {
	case rerr != nil:
		// The lease ends and the delivery is taken again: sooner, not lost.
		ib.log.Error("forge_delivery_retry_failed", append(attrs, "reason", reason, "err", rerr.Error())...)
	case !ok:
		ib.leaseLost(c, attrs)
	default:
		ib.m.processed.WithLabelValues(string(c.Forge), "retry").Inc()
		ib.m.retries.WithLabelValues(string(c.Forge), reason).Inc()
		ib.log.Warn("forge_delivery_retry", append(attrs, "reason", reason, "in", delay.Round(time.Millisecond).String(), "err", err.Error())...)
	}
	if forgeSaid {
		ib.hold(c.Forge, delay)
	}
}

// end marks c done; false when it could not (logged).
func (ib *Inbox) end(ctx context.Context, c *Claimed, attrs []any) bool {
	ok, err := op(context.WithoutCancel(ctx), ib, func(ctx context.Context) (bool, error) { return ib.store.Done(ctx, c) })
	switch {
	case err != nil:
		// Its effects are idempotent: taken again after the lease, it converges.
		ib.log.Error("forge_delivery_done_failed", append(attrs, "err", err.Error())...)
		return false
	case !ok:
		ib.leaseLost(c, attrs)
		return false
	}
	return true
}

func (ib *Inbox) leaseLost(c *Claimed, attrs []any) {
	ib.m.processed.WithLabelValues(string(c.Forge), "lease-lost").Inc()
	ib.log.Warn("forge_delivery_lease_lost", attrs...)
}

// abandon gives c up for good: forge_delivery_abandoned with the reason.
func (ib *Inbox) abandon(ctx context.Context, c *Claimed, attrs []any, reason string, err error) {
	if !ib.end(ctx, c, attrs) {
		return
	}
	ib.m.processed.WithLabelValues(string(c.Forge), "abandoned").Inc()
	ib.log.Error("forge_delivery_abandoned", append(attrs, "reason", reason,
		"age", c.Age().Round(time.Second).String(), "err", err.Error())...)
}

// retryReason is the fixed token of why a delivery is retried.
func retryReason(err error) string {
	switch {
	case errors.Is(err, forge.ErrRateLimited):
		return "rate-limited"
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, forge.ErrLookup):
		return "lookup-failed"
	case errors.Is(err, forge.ErrEnqueue):
		return "enqueue-failed"
	}
	return "failed"
}

// retryDelay is how long a delivery waits after its tries-th try failed with
// err. When the forge said when (Retry-After, a rate limit's reset), that
// time plus a second, and forgeSaid; else MinBackoff doubled per try, at most
// MaxBackoff, plus up to a quarter of it so retries spread.
func (ib *Inbox) retryDelay(tries int, err error) (delay time.Duration, forgeSaid bool) {
	now := ib.cfg.Now()
	if at, ok := forge.RetryAt(err, now); ok {
		return at.Sub(now) + time.Second, true
	}
	d := ib.cfg.MinBackoff
	for i := 1; i < tries && d < ib.cfg.MaxBackoff; i++ {
		d *= 2
	}
	d = min(d, ib.cfg.MaxBackoff)
	return d + time.Duration(mrand.Int64N(int64(d)/4+1)), false
}

// metrics are the inbox's, registered on the receiver's registry.
type metrics struct {
	processed *prometheus.CounterVec
	retries   *prometheus.CounterVec
	length    *prometheus.GaugeVec
	spool     []prometheus.Collector
}

func newMetrics(s *Spool) *metrics {
	return &metrics{
		processed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pidispatch_receiver_inbox_processed_total",
			Help: "Stored deliveries processed, by forge and outcome: enqueued, refused, dropped, ignored, retry, abandoned, lease-lost, lease-expired.",
		}, []string{"forge", "outcome"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pidispatch_receiver_inbox_retries_total",
			Help: "Stored deliveries put back to retry, by forge and reason: rate-limited, lookup-failed, enqueue-failed, timeout, failed.",
		}, []string{"forge", "reason"}),
		length: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "pidispatch_receiver_inbox_length",
			Help: "Deliveries in a forge's inbox in Valkey (waiting and being processed), read every few seconds.",
		}, []string{"forge"}),
		spool: []prometheus.Collector{
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "pidispatch_receiver_spool_bytes",
				Help: "Bytes of the deliveries waiting in the local spool for Valkey.",
			}, func() float64 { return float64(s.Bytes()) }),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "pidispatch_receiver_spool_files",
				Help: "Deliveries waiting in the local spool for Valkey.",
			}, func() float64 { return float64(s.Files()) }),
		},
	}
}

func (m *metrics) collectors() []prometheus.Collector {
	return append([]prometheus.Collector{m.processed, m.retries, m.length}, m.spool...)
}
