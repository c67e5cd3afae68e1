package fleetstate

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/internal/bounded"
	"github.com/pidispatch/pidispatch/internal/check"
	"github.com/redis/go-redis/v9"
)

// Hold state: what a held job (one waiting on its waitFor conditions) has been
// through, kept on Valkey so any host that picks the job up continues where the
// last check left it. One HASH per job (WaitJobKey):
//
//	since      ms, server clock: when the hold began
//	checks     check rounds run
//	faults     consecutive rounds that faulted
//	throttles  consecutive rounds denied a check slot
//	met        bit i set: waitFor[i] (a profile condition) passed; never re-checked
//	dedupId    the job's dedup id, "" when none
//	released   "1": every condition met, the job may run (kept until it ends)
//	superseded "1": a newer delivery of the same dedup id took over the hold
//
// Every change is one script on the server's clock. The hash expires at the hold's
// deadline plus holdStateMargin, so a hold abandoned by every host (its job removed
// behind the worker's back) cannot live forever.

// holdStateMargin is how long hold state outlives the hold's deadline: a job
// picked up late (every host down at its deadline) still finds its state and is
// refused wait-timeout rather than starting a fresh hold.
const holdStateMargin = time.Hour

// maxDedupIDBytes bounds a dedup id read back from hold state before it names a
// key: junk written by a peer never becomes a huge key.
const maxDedupIDBytes = 1024

// DefaultHoldsCallTimeout bounds each Valkey call of a Holds.
const DefaultHoldsCallTimeout = 2 * time.Second

// holdStateLua is prepended to every hold script. Junk a peer wrote in a field
// reads as 0; the reply has one shape for every script:
// {status (1 ok, 0 lost), now, since, checks, faults, throttles, met, released,
// superseded, previous, afterAt, fresh}.
const holdStateLua = `
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function num(field)
  local v = tonumber(redis.call('HGET', KEYS[1], field))
  if v == nil or v ~= v or v < 0 or v > 1e15 then return 0 end
  return math.floor(v)
end
local function superseded()
  if redis.call('HGET', KEYS[1], 'superseded') == '1' then return 1 end
  if #KEYS >= 3 then
    local holder = redis.call('GET', KEYS[3])
    if holder and holder ~= ARGV[1] then return 1 end
  end
  return 0
end
local function reply(status, now, prev, afterAt, fresh)
  if status == 0 then return {0, now, 0, 0, 0, 0, 0, 0, 0, '', 0, 0} end
  local released = 0
  if redis.call('HGET', KEYS[1], 'released') == '1' then released = 1 end
  return {1, now, num('since'), num('checks'), num('faults'), num('throttles'),
    num('met'), released, superseded(), prev, afterAt, fresh}
end
local function ms(v) return string.format('%.0f', v) end
`

// holdBeginScript starts a hold or reads the one in progress, and expires it at
// its deadline plus the margin.
//
// KEYS[1] wait:job:<jobId>   the hold state (HASH)
// KEYS[2] wait:held          the SET of held job ids
// KEYS[3] wait:key:<dedupId> the dedup id's holder; only when the job has one
// ARGV[1] jobId
// ARGV[2] dedupId ("" when none)
// ARGV[3] the longest `after` delay in ms (0 none), counted from since
// ARGV[4] the latest `after` instant in epoch ms (0 none)
// ARGV[5] PI_WAIT_AFTER_MAX_MS
// ARGV[6] PI_WAIT_MAX_MS
// ARGV[7] margin ms past the deadline
//
// A fresh hold takes the dedup id over and reports the previous holder; a hold
// in progress re-takes a dedup id nobody holds unless it was superseded.
var holdBeginScript = redis.NewScript(holdStateLua + `
local now = now_ms()
local prev = ''
local fresh = 0
if redis.call('EXISTS', KEYS[1]) == 0 then
  fresh = 1
  redis.call('HSET', KEYS[1], 'since', ms(now), 'checks', 0, 'faults', 0, 'throttles', 0, 'met', 0, 'dedupId', ARGV[2])
  redis.call('SADD', KEYS[2], ARGV[1])
  if #KEYS >= 3 then
    local holder = redis.call('GET', KEYS[3])
    if holder and holder ~= ARGV[1] then prev = holder end
    redis.call('SET', KEYS[3], ARGV[1])
  end
elseif #KEYS >= 3 and redis.call('EXISTS', KEYS[3]) == 0 and redis.call('HGET', KEYS[1], 'superseded') ~= '1' then
  redis.call('SET', KEYS[3], ARGV[1])
end
local since = num('since')
if since == 0 then
  since = now
  redis.call('HSET', KEYS[1], 'since', ms(now))
end
local afterAt = 0
local delay = tonumber(ARGV[3]) or 0
if delay > 0 then afterAt = since + delay end
local at = tonumber(ARGV[4]) or 0
if at > afterAt then afterAt = at end
local anchor = since
local capped = math.min(afterAt, since + (tonumber(ARGV[5]) or 0))
if capped > anchor then anchor = capped end
local expireAt = anchor + (tonumber(ARGV[6]) or 0) + (tonumber(ARGV[7]) or 0)
redis.call('PEXPIREAT', KEYS[1], ms(expireAt))
if #KEYS >= 3 and redis.call('GET', KEYS[3]) == ARGV[1] then
  redis.call('PEXPIREAT', KEYS[3], ms(expireAt))
end
return reply(1, now, prev, afterAt, fresh)
`)

// holdThrottledScript counts a round denied a check slot.
//
// KEYS[1] wait:job:<jobId>; KEYS[2] wait:held; KEYS[3] wait:key:<dedupId> (optional)
// ARGV[1] jobId
var holdThrottledScript = redis.NewScript(holdStateLua + `
local now = now_ms()
if redis.call('EXISTS', KEYS[1]) == 0 then return reply(0, now, '', 0, 0) end
if superseded() == 0 then
  redis.call('HSET', KEYS[1], 'throttles', num('throttles') + 1)
end
return reply(1, now, '', 0, 0)
`)

// holdCheckedScript records one check round. A superseded hold records nothing.
// When every condition is met the hold is released: marked, and no longer
// counted as held.
//
// KEYS[1] wait:job:<jobId>; KEYS[2] wait:held; KEYS[3] wait:key:<dedupId> (optional)
// ARGV[1] jobId
// ARGV[2] "1" when the round faulted
// ARGV[3] met bits after the round (0..15)
// ARGV[4] "1" when every condition is met
var holdCheckedScript = redis.NewScript(holdStateLua + `
local now = now_ms()
if redis.call('EXISTS', KEYS[1]) == 0 then return reply(0, now, '', 0, 0) end
if superseded() == 1 then return reply(1, now, '', 0, 0) end
local faults = 0
if ARGV[2] == '1' then faults = num('faults') + 1 end
redis.call('HSET', KEYS[1], 'checks', num('checks') + 1, 'faults', faults, 'throttles', 0, 'met', ARGV[3])
if ARGV[4] == '1' then
  redis.call('HSET', KEYS[1], 'released', '1')
  redis.call('SREM', KEYS[2], ARGV[1])
end
return reply(1, now, '', 0, 0)
`)

// holdReleaseScript releases a hold whose conditions need no check (its `after`
// passed, its profiles passed in earlier rounds).
//
// KEYS[1] wait:job:<jobId>; KEYS[2] wait:held; KEYS[3] wait:key:<dedupId> (optional)
// ARGV[1] jobId
var holdReleaseScript = redis.NewScript(holdStateLua + `
local now = now_ms()
if redis.call('EXISTS', KEYS[1]) == 0 then return reply(0, now, '', 0, 0) end
if superseded() == 0 then
  redis.call('HSET', KEYS[1], 'released', '1')
  redis.call('SREM', KEYS[2], ARGV[1])
end
return reply(1, now, '', 0, 0)
`)

// holdSupersedeScript marks another job's hold superseded, if it still exists.
//
// KEYS[1] wait:job:<jobId of the older hold>
// ARGV: none
var holdSupersedeScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], 'superseded', '1')
return 1
`)

// holdEndScript deletes a hold: its state, its membership of the held set and,
// when it is still this job's, its dedup id's holder.
//
// KEYS[1] wait:job:<jobId>; KEYS[2] wait:held; KEYS[3] wait:key:<dedupId> (optional)
// ARGV[1] jobId
var holdEndScript = redis.NewScript(`
redis.call('DEL', KEYS[1])
redis.call('SREM', KEYS[2], ARGV[1])
if #KEYS >= 3 and redis.call('GET', KEYS[3]) == ARGV[1] then
  redis.call('DEL', KEYS[3])
end
return 1
`)

// HoldsConfig tunes a Holds. The zero value is valid.
type HoldsConfig struct {
	// CallTimeout bounds every Valkey call. Defaults to 2s.
	CallTimeout time.Duration
}

// Holds keeps held jobs' hold state on Valkey, shared by the fleet. It is safe
// for concurrent use and does not own the client.
type Holds struct {
	client redis.UniversalClient
	cfg    HoldsConfig
	calls  bounded.Calls
}

var _ dispatch.HoldStore = (*Holds)(nil)

// NewHolds returns a Holds over client.
func NewHolds(client redis.UniversalClient, cfg HoldsConfig) *Holds {
	cfg.CallTimeout = cmp.Or(cfg.CallTimeout, DefaultHoldsCallTimeout)
	return &Holds{client: client, cfg: cfg}
}

// holdKeys are the keys of a job's hold scripts: its state, the held set and,
// with a dedup id, the dedup id's holder.
func holdKeys(jobID, dedupID string) []string {
	keys := []string{WaitJobKey(jobID), WaitHeldKey}
	if dedupID != "" && len(dedupID) <= maxDedupIDBytes {
		keys = append(keys, WaitDedupKey(dedupID))
	}
	return keys
}

// Begin starts the job's hold, or reads the one in progress (another host may
// have run its earlier checks).
func (h *Holds) Begin(ctx context.Context, jobID, dedupID string, b dispatch.HoldBounds) (dispatch.HoldState, error) {
	var at int64
	if !b.AfterAt.IsZero() {
		at = max(b.AfterAt.UnixMilli(), 0)
	}
	return h.run(ctx, "begin", holdBeginScript, holdKeys(jobID, dedupID), jobID, dedupID,
		max(b.AfterDelay.Milliseconds(), 0), at, b.AfterMax.Milliseconds(), b.WaitMax.Milliseconds(), holdStateMargin.Milliseconds())
}

// Throttled counts a round that was denied a check slot.
func (h *Holds) Throttled(ctx context.Context, jobID, dedupID string) (dispatch.HoldState, error) {
	return h.run(ctx, "throttled", holdThrottledScript, holdKeys(jobID, dedupID), jobID)
}

// Checked records a check round; with AllMet it releases the hold.
func (h *Holds) Checked(ctx context.Context, jobID, dedupID string, o dispatch.CheckOutcome) (dispatch.HoldState, error) {
	return h.run(ctx, "checked", holdCheckedScript, holdKeys(jobID, dedupID), jobID,
		boolArg(o.Fault), int(o.Met&0x0F), boolArg(o.AllMet))
}

// Release releases a hold whose conditions are all met without a check.
func (h *Holds) Release(ctx context.Context, jobID, dedupID string) (dispatch.HoldState, error) {
	return h.run(ctx, "release", holdReleaseScript, holdKeys(jobID, dedupID), jobID)
}

// Supersede marks jobID's hold (an older delivery's) superseded: it is refused
// wait-superseded at its next check. A hold that no longer exists is left alone.
func (h *Holds) Supersede(ctx context.Context, jobID string) error {
	_, err := bounded.Call(ctx, h.cfg.CallTimeout, &h.calls, nil, func(ctx context.Context) (any, error) {
		return holdSupersedeScript.Run(ctx, h.client, []string{WaitJobKey(jobID)}).Result()
	})
	if err != nil {
		return fmt.Errorf("hold supersede %s: %w", check.Quote(jobID), err)
	}
	return nil
}

// End deletes jobID's hold state, its held-set membership and its dedup id's
// holder when that is still jobID. Ending a job that holds nothing does nothing.
func (h *Holds) End(ctx context.Context, jobID string) error {
	dedupID, err := bounded.Call(ctx, h.cfg.CallTimeout, &h.calls, nil, func(ctx context.Context) (string, error) {
		return h.client.HGet(ctx, WaitJobKey(jobID), "dedupId").Result()
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("hold end %s: %w", check.Quote(jobID), err)
	}
	_, err = bounded.Call(ctx, h.cfg.CallTimeout, &h.calls, nil, func(ctx context.Context) (any, error) {
		return holdEndScript.Run(ctx, h.client, holdKeys(jobID, dedupID), jobID).Result()
	})
	if err != nil {
		return fmt.Errorf("hold end %s: %w", check.Quote(jobID), err)
	}
	return nil
}

// Close waits, until ctx ends, for calls that overran CallTimeout and still run
// in the background. It does not close the client.
func (h *Holds) Close(ctx context.Context) error { return h.calls.Wait(ctx) }

func (h *Holds) run(ctx context.Context, op string, s *redis.Script, keys []string, args ...any) (dispatch.HoldState, error) {
	res, err := bounded.Call(ctx, h.cfg.CallTimeout, &h.calls, nil, func(ctx context.Context) (any, error) {
		return s.Run(ctx, h.client, keys, args...).Result()
	})
	if err != nil {
		return dispatch.HoldState{}, fmt.Errorf("hold %s: %w", op, err)
	}
	st, err := parseHoldReply(res)
	if err != nil {
		return dispatch.HoldState{}, fmt.Errorf("hold %s: %w", op, err)
	}
	return st, nil
}

// parseHoldReply reads the hold scripts' common reply (see holdStateLua).
func parseHoldReply(res any) (dispatch.HoldState, error) {
	arr, ok := res.([]any)
	if !ok || len(arr) != 12 {
		return dispatch.HoldState{}, fmt.Errorf("unexpected reply %v", res)
	}
	n := make([]int64, 12)
	for i, v := range arr {
		if i == 9 {
			continue
		}
		x, ok := v.(int64)
		if !ok {
			return dispatch.HoldState{}, fmt.Errorf("unexpected reply %v", res)
		}
		n[i] = x
	}
	prev, ok := arr[9].(string)
	if !ok {
		return dispatch.HoldState{}, fmt.Errorf("unexpected reply %v", res)
	}
	st := dispatch.HoldState{
		Now:        time.UnixMilli(n[1]),
		Lost:       n[0] == 0,
		Checks:     int(min(n[3], 1<<31-1)),
		Faults:     int(min(n[4], 1<<31-1)),
		Throttles:  int(min(n[5], 1<<31-1)),
		Met:        uint8(n[6] & 0x0F),
		Released:   n[7] == 1,
		Superseded: n[8] == 1,
		Previous:   prev,
		Fresh:      n[11] == 1,
	}
	if !st.Lost {
		st.Since = time.UnixMilli(n[2])
	}
	if n[10] > 0 {
		st.AfterAt = time.UnixMilli(n[10])
	}
	return st, nil
}

func boolArg(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// heldScanBatch is how many members of the held set HeldCount reads per round
// trip.
const heldScanBatch = 500

// HeldCount returns how many jobs are held (waiting on their waitFor conditions)
// fleet-wide. It prunes the held set of ids whose hold state is gone (expired, or
// left by a host that crashed between the two), as the registry's readers prune
// host:live, so the count is of holds that exist.
func HeldCount(ctx context.Context, client redis.UniversalClient) (int, error) {
	if client == nil {
		return 0, errors.New("dispatch: nil client")
	}
	seen := map[string]bool{}
	var cursor uint64
	for {
		ids, next, err := client.SScan(ctx, WaitHeldKey, cursor, "", heldScanBatch).Result()
		if err != nil {
			return 0, fmt.Errorf("held count: %w", err)
		}
		var fresh []string
		for _, id := range ids {
			if _, dup := seen[id]; !dup {
				seen[id] = false
				fresh = append(fresh, id)
			}
		}
		if len(fresh) > 0 {
			pipe := client.Pipeline()
			exists := make([]*redis.IntCmd, len(fresh))
			for i, id := range fresh {
				exists[i] = pipe.Exists(ctx, WaitJobKey(id))
			}
			if _, err := pipe.Exec(ctx); err != nil {
				return 0, fmt.Errorf("held count: %w", err)
			}
			var gone []any
			for i, id := range fresh {
				if exists[i].Val() == 1 {
					seen[id] = true
				} else {
					gone = append(gone, id)
				}
			}
			if len(gone) > 0 {
				if err := client.SRem(ctx, WaitHeldKey, gone...).Err(); err != nil {
					return 0, fmt.Errorf("held count: prune: %w", err)
				}
			}
		}
		cursor = next
		if cursor == 0 {
			break
		}
	}
	n := 0
	for _, held := range seen {
		if held {
			n++
		}
	}
	return n, nil
}

// RemoveHold deletes jobID's hold state (see Holds.End). The operator's cancel
// calls it after removing a held job from its queue, so the job no longer counts
// as held and a newer delivery of its dedup id starts clean. Removing the hold of
// a job that holds nothing does nothing.
func RemoveHold(ctx context.Context, client redis.UniversalClient, jobID string) error {
	if client == nil {
		return errors.New("dispatch: nil client")
	}
	return NewHolds(client, HoldsConfig{}).End(ctx, jobID)
}
