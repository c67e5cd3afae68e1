package lease

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"
	"unicode/utf16"

	"github.com/pidispatch/pidispatch/internal/bounded"
	"github.com/pidispatch/pidispatch/internal/reach"
	"github.com/redis/go-redis/v9"
)

// DefaultCallTimeout bounds every Valkey call of a Lease.
const DefaultCallTimeout = 2 * time.Second

// Config tunes a Lease. The zero value is valid; New applies the defaults to a
// copy.
type Config struct {
	// CallTimeout bounds every Valkey call; an Acquire that overruns grants a
	// degraded Handle. Defaults to 2s.
	CallTimeout time.Duration
	// Logger receives fleet_lease_unavailable, fleet_lease_restored and the
	// sweep's events, each with a host attribute (the worker). Defaults to
	// discarding.
	Logger *slog.Logger
}

// Lease takes fleet-wide slots for one worker. It is safe for concurrent use.
// New does not take ownership of the client.
type Lease struct {
	client redis.UniversalClient
	worker string
	cfg    Config
	log    *slog.Logger

	// health logs reachability transitions once each: the last Acquire hit a
	// Valkey fault, or it did not.
	health *reach.Tracker
}

// New returns a Lease whose holder values are "<worker>#<id>". worker must be
// a valid worker name (fleet.ValidateName): its alphabet has no '#', which
// is what lets SweepOwnClaims recognise this worker's claims.
func New(client redis.UniversalClient, worker string, cfg Config) *Lease {
	cfg.CallTimeout = cmp.Or(cfg.CallTimeout, DefaultCallTimeout)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	log := cfg.Logger.With("host", worker)
	health := reach.New(log, reach.Events{
		Down: "fleet_lease_unavailable", DownLevel: slog.LevelWarn, ErrKey: "reason",
		Up: "fleet_lease_restored",
	})
	return &Lease{client: client, worker: worker, cfg: cfg, log: log, health: health}
}

// Handle is one acquired slot. Its methods act only on the key this Acquire
// won, and only while its value is still this holder's.
type Handle struct {
	lease    *Lease
	key      string // "" for a degraded or unbounded grant
	holder   string
	degraded bool
}

// Key is the slot key this handle holds, "" for a degraded grant or an
// unbounded one (slots < 1).
func (h *Handle) Key() string { return h.key }

// Degraded reports a grant made because Valkey could not be asked: no slot is
// held, and the caller's in-process bound is the only bound.
func (h *Handle) Degraded() bool { return h.degraded }

// Acquire takes one of slots slot keys, keyFor(0) .. keyFor(slots-1), for the
// job or check id, with a TTL of ttl. It is one round trip: a script probes the
// slots starting at a hash of id (wrapping) and sets the first free one with
// SET NX PX. It returns nil and no error when every slot is held.
//
// The start index is the original's Java-style string hash (h = h*31 + c over
// the UTF-16 code units of id, as int32), absolute, modulo slots, so a Go and a
// Node worker probe one id from the same slot. Starting at a spread rather than
// at 0 keeps every host from queueing behind slot 0 while a later one is free.
//
// As in the original, a slot already holding this exact holder value is not
// reused: SET NX skips it, so two concurrent Acquires for one id hold two
// slots and can never share (and doubly release) one.
//
// slots < 1 means unbounded: a Handle with no key is returned and Valkey is not
// asked. A Valkey fault (or an overrun of CallTimeout) grants a Degraded Handle.
// An error is returned only for invalid arguments or when ctx itself is done.
func (l *Lease) Acquire(ctx context.Context, id string, slots int, ttl time.Duration, keyFor func(i int) string) (*Handle, error) {
	if l.client == nil {
		return nil, errors.New("lease: nil client")
	}
	holder := l.worker + "#" + id
	if slots < 1 {
		return &Handle{lease: l, holder: holder}, nil
	}
	if ttl <= 0 {
		return nil, fmt.Errorf("lease: ttl %s is not positive", ttl)
	}
	if keyFor == nil {
		return nil, errors.New("lease: nil keyFor")
	}
	start := startIndex(id, slots)
	keys := make([]string, slots)
	for n := range slots {
		keys[n] = keyFor((start + n) % slots)
	}
	ms := max(ttl.Milliseconds(), 1)
	detached := context.WithoutCancel(ctx)
	// A script that answers after we granted degraded gives back the slot it
	// took, or it would stay held for a whole TTL by nobody.
	giveBack := func(late int64, err error) {
		if err == nil && late > 0 && int(late) <= len(keys) {
			h := &Handle{lease: l, key: keys[late-1], holder: holder}
			ctx, cancel := context.WithTimeout(detached, l.cfg.CallTimeout)
			defer cancel()
			_ = h.Release(ctx)
		}
	}
	won, err := bounded.Call(ctx, l.cfg.CallTimeout, nil, giveBack, func(ctx context.Context) (int64, error) {
		return acquireScript.Run(ctx, l.client, keys, holder, ms).Int64()
	})
	if err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil {
			return nil, fmt.Errorf("lease: acquire: %w", ctxErr)
		}
		l.health.Fail(err)
		return &Handle{lease: l, holder: holder, degraded: true}, nil
	}
	l.health.OK()
	if won < 1 || int(won) > len(keys) {
		return nil, nil
	}
	return &Handle{lease: l, key: keys[won-1], holder: holder}, nil
}

// Release gives the slot back if it is still ours. It is idempotent: a second
// Release, or one after the slot expired and another holder took it, deletes
// nothing. A degraded or unbounded handle does nothing. An error (Valkey
// unreachable) is returned for the caller to log; the TTL frees the slot.
func (h *Handle) Release(ctx context.Context) error {
	if h == nil || h.key == "" {
		return nil
	}
	l := h.lease
	_, err := bounded.Call(ctx, l.cfg.CallTimeout, nil, nil, func(ctx context.Context) (int64, error) {
		return releaseScript.Run(ctx, l.client, []string{h.key}, h.holder).Int64()
	})
	if err != nil {
		return fmt.Errorf("lease: release %s: %w", h.key, err)
	}
	return nil
}

// Refresh extends the slot's TTL to ttl if it is still ours, and reports
// whether it was. false means the slot expired (and may be held by another
// holder now). A degraded or unbounded handle reports true. On a Valkey fault
// it reports true with the error: a blip is no evidence that the slot was lost.
func (h *Handle) Refresh(ctx context.Context, ttl time.Duration) (bool, error) {
	if h == nil || h.key == "" {
		return true, nil
	}
	if ttl <= 0 {
		return true, fmt.Errorf("lease: ttl %s is not positive", ttl)
	}
	l := h.lease
	ms := max(ttl.Milliseconds(), 1)
	ours, err := bounded.Call(ctx, l.cfg.CallTimeout, nil, nil, func(ctx context.Context) (int64, error) {
		return refreshScript.Run(ctx, l.client, []string{h.key}, h.holder, ms).Int64()
	})
	if err != nil {
		return true, fmt.Errorf("lease: refresh %s: %w", h.key, err)
	}
	return ours == 1, nil
}

// startIndex is |javaHash(id)| mod slots, javaHash being h = h*31 + c over
// UTF-16 code units with int32 overflow, as the original computes it.
func startIndex(id string, slots int) int {
	var h int32
	for _, c := range utf16.Encode([]rune(id)) {
		h = h*31 + int32(c)
	}
	a := int64(h)
	if a < 0 {
		a = -a
	}
	return int(a % int64(slots))
}
