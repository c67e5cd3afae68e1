package queue

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/redis/go-redis/v9"
)

// The fleet pause flag is a key owned by the caller (package dispatch formats
// it); this file only reads, sets and deletes the key it is given, in the
// same atomic call as the queue changes it belongs with.

// declarePausedScript declares a queue and pauses it when the fleet pause
// flag is set. It reuses pause.lua's body unchanged, as a local function, so
// what "paused" means stays in one script.
var declarePausedScript = func() layoutScript {
	lib, err := luaFiles.ReadFile("lua/lib.lua")
	if err != nil {
		panic(err) // embedded at build time; cannot happen
	}
	pause, err := luaFiles.ReadFile("lua/pause.lua")
	if err != nil {
		panic(err)
	}
	return layoutScripts(string(lib) + "\n" + declarePausedHead +
		"local function pauseQueue()\n" + string(pause) + "\nend\n" + declarePausedBody)
}()

const declarePausedHead = `--[[
  declare_paused: declare the queue (its meta hash, as Queue.Declare does)
  and, when the fleet pause flag exists, pause it (pause.lua's body, below as
  pauseQueue), in one atomic call: a host queue created while the fleet is
  paused never has an unpaused instant in which a consumer could take a job.

  KEYS[1..14] the queue keys, see lib.lua
  KEYS[15]    the fleet pause flag (any type; only its existence is read)
  ARGV[1]     job key prefix (unused; kept for the common layout)
  ARGV[2]     "pause" (read by pauseQueue)

  Returns 1 when the queue is paused after the call (already, or now by the
  flag), 0 when it is not.
]]
`

const declarePausedBody = `
local k = K()
-- meta() writes opts.maxLenEvents when absent: that is the declaration.
if meta(k).paused then return 1 end
if rcall("EXISTS", KEYS[15]) == 0 then return 0 end
pauseQueue()
return 1
`

// DeclarePausedIf declares the queue (see Declare) and pauses it when the key
// flagKey exists, in one script call. It reports whether the queue is paused
// afterwards: already paused, or paused now because of the flag. A worker
// declares its host queue with it at boot, so that a fleet-wide pause also
// holds for a host queue that did not exist when the pause ran.
func (q *Queue) DeclarePausedIf(ctx context.Context, flagKey string) (bool, error) {
	if flagKey == "" {
		return false, optErr("flagKey", "empty")
	}
	if err := checkString("flagKey", flagKey, 512); err != nil {
		return false, err
	}
	res, err := declarePausedScript.of(q.cfg.Layout).Run(ctx, q.client, q.keys.scriptKeys(flagKey), q.keys.jobPrefix(), "pause").Result()
	if err != nil {
		return false, fmt.Errorf("declare %s: %w", q.name, err)
	}
	code, _ := res.(int64)
	return code == 1, nil
}

// FlagPauseOutcome reports a SetPausedWithFlag call that reached Valkey, part
// by part.
type FlagPauseOutcome struct {
	// Queues holds one entry per queue, in the order given: nil when the
	// queue was paused (resumed), else the error its script returned. A
	// failed queue's script may have stopped after moving its ready jobs
	// between the wait and paused lists, but its pause flag (what consumers
	// read) was not changed.
	Queues []error
	// Flag is nil when the flag key was set (deleted), else its error.
	Flag error
}

// SetPausedWithFlag pauses (resumes) every queue and sets (deletes) flagKey,
// all in one MULTI/EXEC round trip: no other client sees a state in between.
// Each part succeeds or fails on its own, as a transaction's commands do, and
// FlagPauseOutcome says which. The returned error is non-nil only when the
// round trip itself failed: wrapping ErrTxRefused when the server refused
// the transaction as a whole (nothing ran), else a transport error (the
// transaction may or may not have run, unless the connection was never
// made). The queues must share one Valkey: the first queue's client is used.
func SetPausedWithFlag(ctx context.Context, paused bool, flagKey string, queues ...*Queue) (FlagPauseOutcome, error) {
	if flagKey == "" {
		return FlagPauseOutcome{}, optErr("flagKey", "empty")
	}
	if err := checkString("flagKey", flagKey, 512); err != nil {
		return FlagPauseOutcome{}, err
	}
	if len(queues) == 0 {
		return FlagPauseOutcome{}, errors.New("queue: SetPausedWithFlag: no queues")
	}
	verb := "resume"
	if paused {
		verb = "pause"
	}
	exec := func(eval bool) ([]redis.Cmder, *redis.StatusCmd, *redis.IntCmd, error) {
		var setCmd *redis.StatusCmd
		var delCmd *redis.IntCmd
		cmds := make([]redis.Cmder, len(queues))
		_, err := queues[0].client.TxPipelined(ctx, func(p redis.Pipeliner) error {
			// The flag first: a pause that is cut short still makes every
			// queue declared afterwards start paused.
			if paused {
				setCmd = p.Set(ctx, flagKey, "1", 0)
			}
			for i, q := range queues {
				keys := q.keys.scriptKeys()
				if eval {
					cmds[i] = pauseScript.of(q.cfg.Layout).Eval(ctx, p, keys, q.keys.jobPrefix(), verb)
				} else {
					cmds[i] = pauseScript.of(q.cfg.Layout).EvalSha(ctx, p, keys, q.keys.jobPrefix(), verb)
				}
			}
			if !paused {
				delCmd = p.Del(ctx, flagKey)
			}
			return nil
		})
		return cmds, setCmd, delCmd, err
	}
	cmds, setCmd, delCmd, err := exec(false)
	if err != nil && anyNoScript(cmds) {
		// The script is not cached on this server yet. Every part is
		// idempotent, so running the whole transaction again is safe.
		cmds, setCmd, delCmd, err = exec(true)
	}
	parts := slices.Clone(cmds)
	if setCmd != nil {
		parts = append(parts, setCmd)
	}
	if delCmd != nil {
		parts = append(parts, delCmd)
	}
	switch {
	case err != nil && !isReply(err):
		return FlagPauseOutcome{}, fmt.Errorf("%s %d queue(s): %w", verb, len(queues), err)
	case err != nil && !carried(err, parts):
		return FlagPauseOutcome{}, fmt.Errorf("%s %d queue(s): %w: %w", verb, len(queues), ErrTxRefused, err)
	}
	out := FlagPauseOutcome{Queues: make([]error, len(queues))}
	for i, c := range cmds {
		if c.Err() != nil {
			out.Queues[i] = fmt.Errorf("%s %s: %w", verb, queues[i].name, c.Err())
		}
	}
	if setCmd != nil && setCmd.Err() != nil {
		out.Flag = fmt.Errorf("set %s: %w", flagKey, setCmd.Err())
	}
	if delCmd != nil && delCmd.Err() != nil {
		out.Flag = fmt.Errorf("delete %s: %w", flagKey, delCmd.Err())
	}
	return out, nil
}

// carried reports whether a transaction's error reply is one of its
// commands' own (EXEC ran, and that command failed inside it). An error reply
// no command carries was MULTI's or EXEC's, or failed the connection before
// anything was sent (a handshake refused: NOAUTH, WRONGPASS): the
// transaction did not run, and reading the commands' empty outcomes as
// successes would report changes that never happened.
func carried(err error, cmds []redis.Cmder) bool {
	for _, c := range cmds {
		if c != nil && c.Err() != nil && errors.Is(err, c.Err()) {
			return true
		}
	}
	return false
}

func anyNoScript(cmds []redis.Cmder) bool {
	for _, c := range cmds {
		if c != nil && c.Err() != nil && redis.HasErrorPrefix(c.Err(), "NOSCRIPT") {
			return true
		}
	}
	return false
}

// isReply reports whether err is an error reply of the server (the command
// reached it and was refused), as opposed to a transport failure.
func isReply(err error) bool {
	var rerr redis.Error
	return errors.As(err, &rerr)
}
