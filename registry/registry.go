package registry

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/internal/bounded"
	"github.com/pidispatch/pidispatch/internal/reach"
	"github.com/redis/go-redis/v9"
)

// Defaults of Config.
const (
	DefaultTTL         = 90 * time.Second // six missed beats: a blip never evicts a working host
	DefaultInterval    = 15 * time.Second
	DefaultCallTimeout = 2 * time.Second
)

// Errors callers branch on.
var (
	// ErrUnreachable is a registry that could not be read or written (network,
	// timeout, server error). It wraps the cause. It is a different answer from
	// "no hosts", which is an empty slice and a nil error.
	ErrUnreachable = errors.New("host registry unreachable")
	// ErrClosed is returned by Start and Publish after Close.
	ErrClosed = errors.New("host registry closed")
)

// Config tunes a Registry. The zero value is valid; New applies the defaults to
// a copy.
type Config struct {
	// TTL is how long a row and the name claim outlive their last beat: the
	// crash backstop. Must exceed Interval. Defaults to 90s.
	TTL time.Duration
	// Interval is the beat period. Defaults to 15s.
	Interval time.Duration
	// CallTimeout bounds every Valkey call; a call that overruns fails open.
	// Defaults to 2s.
	CallTimeout time.Duration
	// Version is the worker's version, published as is (a token such as 1.2.3).
	Version string
	// Logger receives the registry's events, each with a host attribute.
	// Defaults to discarding.
	Logger *slog.Logger
	// Machine identifies this machine in the name claim, so a restart on the
	// same machine can take over its crashed predecessor's name. It is passed
	// through fleet.SanitizeName. Defaults to fleet.DefaultName() (the sanitized hostname).
	Machine string
	// Pid is this process's id in the row and the claim. Defaults to os.Getpid().
	Pid int
	// NowFunc is the local clock, used only for the claim's startedAt, which is
	// shown to an operator in a NameInUseError. Liveness never reads it: ages
	// come from the server's TIME. Defaults to time.Now.
	NowFunc func() time.Time
	// OnBeat, when set, is told of every beat: nil when it landed, else why
	// not. It is called from the beating goroutine and must not block.
	OnBeat func(err error)
	// FleetKey, when set, signs every row this host publishes (FieldSig), so
	// readers holding the key tell it from a row anyone could write.
	FleetKey fleet.Key
}

func (c Config) withDefaults() Config {
	c.TTL = cmp.Or(c.TTL, DefaultTTL)
	c.Interval = cmp.Or(c.Interval, DefaultInterval)
	c.CallTimeout = cmp.Or(c.CallTimeout, DefaultCallTimeout)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Machine == "" {
		c.Machine = fleet.DefaultName()
	}
	c.Machine = fleet.SanitizeName(c.Machine)
	c.Pid = cmp.Or(c.Pid, os.Getpid())
	if c.NowFunc == nil {
		c.NowFunc = time.Now
	}
	return c
}

func (c Config) validate() error {
	switch {
	case c.TTL < time.Millisecond:
		return fmt.Errorf("registry: TTL %s is below 1ms", c.TTL)
	case c.Interval <= 0:
		return fmt.Errorf("registry: Interval %s is not positive", c.Interval)
	case c.TTL <= c.Interval:
		return fmt.Errorf("registry: TTL %s must exceed Interval %s, or a row expires between beats", c.TTL, c.Interval)
	case c.CallTimeout <= 0:
		return fmt.Errorf("registry: CallTimeout %s is not positive", c.CallTimeout)
	case c.Pid < 0:
		return fmt.Errorf("registry: Pid %d is negative", c.Pid)
	}
	return nil
}

// Registry publishes one host's row and reads its peers'. It is safe for
// concurrent use. New does not take ownership of the client; Close does not
// close it.
type Registry struct {
	client   redis.UniversalClient
	name     string
	facts    Facts
	cfg      Config
	log      *slog.Logger
	instance string
	boot     string // this kernel's boot id, "" when unknown
	claim    string // our claim value (JSON)

	health  *reach.Tracker // logs reachability transitions, once each, never per call
	refused onceSet        // field+value pairs already logged as refused
	dropped onceSet        // peer rows already logged as refused

	calls bounded.Calls // Valkey calls, including ones that overran their bound

	beatMu    sync.Mutex
	startedAt string          // ms, from the first successful beat
	held      bool            // this instance has held the name at least once
	failing   map[string]bool // facts whose failure was logged
	closed    bool

	lifeMu  sync.Mutex
	started bool
	closing bool
	cancel  context.CancelFunc
	done    chan struct{}
}

// New returns a Registry for the host called name. name must pass
// fleet.ValidateName; the error is then a *fleet.NameError. Nothing is written until Start
// or Publish.
func New(client redis.UniversalClient, name string, facts Facts, cfg Config) (*Registry, error) {
	if client == nil {
		return nil, errors.New("registry: nil client")
	}
	if err := fleet.ValidateName(name); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	instance, err := newInstanceID()
	if err != nil {
		return nil, err
	}
	boot := bootID()
	claimJSON, err := json.Marshal(claim{
		Instance:  instance,
		Machine:   cfg.Machine,
		Boot:      boot,
		Pid:       cfg.Pid,
		StartedAt: cfg.NowFunc().UnixMilli(),
	})
	if err != nil {
		return nil, fmt.Errorf("registry: encode claim: %w", err)
	}
	log := cfg.Logger.With("host", name)
	r := &Registry{
		client:   client,
		name:     name,
		facts:    facts,
		cfg:      cfg,
		log:      log,
		instance: instance,
		boot:     boot,
		claim:    string(claimJSON),
		failing:  map[string]bool{},
	}
	r.health = reach.New(log, reach.Events{
		Down: "host_registry_unreachable", DownLevel: slog.LevelWarn, ErrKey: "reason",
		Up: "host_registry_restored",
	})
	return r, nil
}

// newInstanceID is 16 random bytes in hex: unique per process start.
func newInstanceID() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("registry: instance id: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// Name is the host name this Registry publishes.
func (r *Registry) Name() string { return r.name }

// Instance is this process's random instance id, as published in the row and
// the name claim.
func (r *Registry) Instance() string { return r.instance }

// Start claims the name and beats at once, then every Interval from one
// goroutine until Close or until ctx is done. Cancelling ctx stops beating
// without a clean leave: the row expires one TTL after the last beat, as after
// a crash.
//
// A name held by another live instance fails Start with a *NameInUseError
// (errors.Is ErrNameInUse) and nothing is written or started. An unreachable
// Valkey does not fail Start (boot must not wait on Valkey): it is logged, and
// each later beat tries the claim again. If a later beat finds the name held by
// another instance, it logs host_name_conflict and keeps trying, never taking
// the name from a live holder.
func (r *Registry) Start(ctx context.Context) error {
	r.lifeMu.Lock()
	switch {
	case r.closing:
		r.lifeMu.Unlock()
		return ErrClosed
	case r.started:
		r.lifeMu.Unlock()
		return errors.New("registry: already started")
	}
	r.started = true
	r.lifeMu.Unlock()

	if err := r.Publish(ctx); err != nil {
		var inUse *NameInUseError
		if errors.As(err, &inUse) || errors.Is(err, ErrClosed) {
			return err
		}
		// Unreachable: already logged by the health transition; keep beating.
	}

	r.lifeMu.Lock()
	defer r.lifeMu.Unlock()
	if r.closing {
		return ErrClosed
	}
	loopCtx, cancel := context.WithCancel(ctx)
	r.cancel = cancel
	r.done = make(chan struct{})
	go r.loop(loopCtx, r.done)
	return nil
}

// loop beats every Interval until ctx is done.
func (r *Registry) loop(ctx context.Context, done chan<- struct{}) {
	defer close(done)
	t := time.NewTicker(r.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		err := r.Publish(ctx)
		var inUse *NameInUseError
		if errors.As(err, &inUse) {
			r.log.Error("host_name_conflict", "holderMachine", inUse.Machine, "holderPid", inUse.Pid,
				"holderInstance", inUse.Instance, "reason", inUse.Error())
		}
	}
}

// Publish beats now: every Fact is evaluated again and the row rewritten. The
// cron gate calls it before reading its peers, so they see this host's current
// fingerprint. An unreachable Valkey returns an error wrapping ErrUnreachable
// (and logs the transition once); a name held by another instance returns a
// *NameInUseError.
func (r *Registry) Publish(ctx context.Context) error {
	r.beatMu.Lock()
	defer r.beatMu.Unlock()
	if r.closed {
		return ErrClosed
	}
	args := r.rowArgs()
	holder, err := r.beat(ctx, args, "")
	if err != nil || holder == nil {
		return err
	}
	c, ok := parseClaim(*holder)
	if ok && !r.held && r.crashedHere(c) {
		// A crashed predecessor on this machine: take its name over now rather
		// than make a supervisor's restart wait out the TTL. Only before this
		// instance has held the name: one that held it and lost it never takes it
		// back, so two processes that each believe the other dead cannot trade
		// the name every beat; the loser logs host_name_conflict instead.
		r.log.Info("host_name_taken_over", "holderPid", c.Pid, "holderInstance", c.Instance)
		holder, err = r.beat(ctx, args, *holder)
		if err != nil || holder == nil {
			return err
		}
		c, ok = parseClaim(*holder)
	}
	return inUseError(r.name, c, ok)
}

// crashedHere reports whether the holder c is a dead process of this machine:
// same machine name and kernel boot, and a pid that is ours (a restarted
// container is pid 1 again) or no longer runs. Machine must name a pid
// namespace for this to hold; containers on one machine given one hostname do
// not, and should not share a worker name either.
func (r *Registry) crashedHere(c claim) bool {
	return c.Machine == r.cfg.Machine && c.Boot == r.boot && (c.Pid == r.cfg.Pid || processGone(c.Pid))
}

// beat runs one beat script. It returns the holder's claim value when another
// instance holds the name (nothing was written), nil when the row was written.
func (r *Registry) onBeat(err error) {
	if r.cfg.OnBeat != nil {
		r.cfg.OnBeat(err)
	}
}

func (r *Registry) beat(ctx context.Context, args []any, replace string) (*string, error) {
	argv := make([]any, 0, 5+len(args))
	argv = append(argv, r.name, r.cfg.TTL.Milliseconds(), r.claim, replace, r.startedAt)
	argv = append(argv, args...)
	keys := []string{HostKey(r.name), LiveKey, ClaimKey(r.name)}
	res, err := bounded.Call(ctx, r.cfg.CallTimeout, &r.calls, nil, func(ctx context.Context) (any, error) {
		return beatScript.Run(ctx, r.client, keys, argv...).Result()
	})
	if err != nil {
		if ctx.Err() == nil {
			// A cancelled caller says nothing about Valkey.
			r.health.Fail(err)
			r.onBeat(err)
		}
		return nil, fmt.Errorf("%w: beat: %w", ErrUnreachable, err)
	}
	r.health.OK()
	r.onBeat(nil)
	out, ok := res.([]any)
	if !ok || len(out) < 2 {
		return nil, fmt.Errorf("%w: beat: unexpected reply %T", ErrUnreachable, res)
	}
	if status, _ := out[0].(int64); status != 1 {
		holder, _ := out[1].(string)
		return &holder, nil
	}
	if len(out) >= 3 && r.startedAt == "" {
		r.startedAt, _ = out[2].(string)
	}
	r.held = true
	return nil, nil
}

// rowArgs evaluates every fact and applies the content rule, returning the
// script's field, value pairs. It runs under beatMu.
func (r *Registry) rowArgs() []any {
	pairs := []any{
		FieldName, r.name,
		FieldVersion, r.publishable(FieldVersion, r.cfg.Version),
		FieldPid, strconv.Itoa(r.cfg.Pid),
		FieldInstance, r.instance,
	}
	for _, f := range r.facts.evaluate() {
		if f.err != nil {
			if !r.failing[f.field] {
				r.failing[f.field] = true
				r.log.Warn("host_registry_fact_failed", "field", f.field, "reason", f.err.Error())
			}
			pairs = append(pairs, f.field, "")
			continue
		}
		if r.failing[f.field] {
			delete(r.failing, f.field)
			r.log.Info("host_registry_fact_restored", "field", f.field)
		}
		pairs = append(pairs, f.field, r.publishable(f.field, f.value))
	}
	if r.cfg.FleetKey.IsSet() {
		written := make(map[string]string, len(pairs)/2)
		for i := 0; i+1 < len(pairs); i += 2 {
			written[pairs[i].(string)] = pairs[i+1].(string)
		}
		if sig, err := r.cfg.FleetKey.SignRow(signedFields(func(f string) string { return written[f] })); err == nil {
			pairs = append(pairs, FieldSig, sig)
		}
	}
	return pairs
}

// publishable applies the content rule to one value: a refused value is
// published empty and logged once per field and value. The log names the rule,
// never the value, which could be a secret that strayed into a fact.
func (r *Registry) publishable(field, v string) string {
	rule := refuseRule(field, v)
	if rule == "" {
		switch field {
		case FieldCaps:
			if clean := cleanCaps(v); clean != v {
				r.refusedOnce(field, v, ruleCapsToken)
				return clean
			}
		case FieldConcurrency, FieldCronCount:
			if isNegativeInt(v) {
				rule = ruleNegative
			}
		}
	}
	if rule == "" {
		return v
	}
	r.refusedOnce(field, v, rule)
	return ""
}

func (r *Registry) refusedOnce(field, v, rule string) {
	if r.refused.first(field + "\x00" + v) {
		r.log.Warn("host_registry_field_refused", "field", field, "rule", rule)
	}
}

// Close stops beating and leaves cleanly: it deletes the row, the live member
// and the name claim, but only while they are still this instance's. It is
// idempotent; calls after the first return nil. It waits for the beat goroutine
// and for any Valkey call that overran its bound.
func (r *Registry) Close(ctx context.Context) error {
	r.lifeMu.Lock()
	if r.closing {
		r.lifeMu.Unlock()
		return nil
	}
	r.closing = true
	cancel, done := r.cancel, r.done
	r.lifeMu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}

	r.beatMu.Lock()
	r.closed = true
	r.beatMu.Unlock()

	keys := []string{HostKey(r.name), LiveKey, ClaimKey(r.name)}
	_, err := bounded.Call(ctx, r.cfg.CallTimeout, &r.calls, nil, func(ctx context.Context) (any, error) {
		return leaveScript.Run(ctx, r.client, keys, r.name, r.claim, r.instance).Result()
	})
	_ = r.calls.Wait(context.WithoutCancel(ctx))
	if err != nil {
		return fmt.Errorf("%w: leave: %w", ErrUnreachable, err)
	}
	return nil
}

// onceSet remembers which keys were seen, so an event is logged once per key.
// It forgets everything past onceSetMax entries: a value that changes every
// beat is logged again now and then rather than growing memory without bound.
type onceSet struct {
	mu   sync.Mutex
	seen map[[32]byte]struct{}
}

const onceSetMax = 1024

// first reports whether key was not seen before, and records it. Keys are
// stored hashed, so a refused value is not kept in memory.
func (s *onceSet) first(key string) bool {
	sum := sha256.Sum256([]byte(key))
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.seen[sum]; ok {
		return false
	}
	if s.seen == nil || len(s.seen) >= onceSetMax {
		s.seen = map[[32]byte]struct{}{}
	}
	s.seen[sum] = struct{}{}
	return true
}
