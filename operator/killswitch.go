package operator

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/fleetstate"
	"github.com/pidispatch/pidispatch/queue"
	"github.com/pidispatch/pidispatch/registry"
	"github.com/pidispatch/pidispatch/valkey"
)

// FleetReadTimeout is the one budget the kill switch gives its two reads of
// the fleet (the host registry and the keyspace scan), which run
// concurrently. Past it, the kill switch acts on what it has and says so.
const FleetReadTimeout = 2 * time.Second

// QueueSet is every queue the kill switch acts on: the union of the
// registry's routing hosts and the host queues found in the keyspace, plus
// the shared queue. Both reads fail open (a Valkey blip must never make the
// kill switch refuse), but loudly: a degraded read is kept here so the
// operator is told, rather than shown a result indistinguishable from a
// complete one while a host keeps spending.
type QueueSet struct {
	// Names is fleet.SharedQueue first, then the host queues, sorted, unique.
	Names []string
	// RegistryErr is why the host registry could not be read; Names then
	// come from the keyspace alone. The registry answers who is live; the
	// keyspace answers which queues exist, which is what a kill switch
	// needs, so this is a warning, not a failure.
	RegistryErr error
	// DiscoveryErr is why the keyspace scan did not finish; Names then hold
	// the queues it saw before it stopped, plus the registry's.
	DiscoveryErr error
}

// Degraded reports whether either read failed.
func (s QueueSet) Degraded() bool { return s.RegistryErr != nil || s.DiscoveryErr != nil }

// FleetQueues reads the registry and scans the keyspace, concurrently, within
// FleetReadTimeout, and returns their union. The budget is enforced through
// ctx, so the client should honour context deadlines (ContextTimeoutEnabled)
// or have read timeouts no longer than the budget. Only the caller's own ctx
// ending is an error; failed reads are named in the set.
func FleetQueues(ctx context.Context, client redis.UniversalClient) (QueueSet, error) {
	if client == nil {
		return QueueSet{}, errors.New("dispatch: FleetQueues: nil client")
	}
	if err := ctx.Err(); err != nil {
		return QueueSet{}, err
	}
	rctx, cancel := context.WithTimeout(ctx, FleetReadTimeout)
	defer cancel()

	var (
		wg                  sync.WaitGroup
		hosts               []registry.Host
		found               []string
		regErr, discoverErr error
	)
	wg.Go(func() { hosts, regErr = registry.ReadLive(rctx, client, FleetReadTimeout) })
	wg.Go(func() {
		found, discoverErr = queue.Discover(rctx, client, queue.DefaultPrefix)
		var de *queue.DiscoveryError
		if errors.As(discoverErr, &de) {
			found = de.Found
		}
	})
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return QueueSet{}, err
	}

	set := QueueSet{RegistryErr: regErr, DiscoveryErr: discoverErr}
	var names []string
	for _, h := range hosts {
		if !h.Routes || fleet.ValidateName(h.Name) != nil {
			continue
		}
		names = append(names, fleet.HostQueueName(h.Name))
	}
	names = append(names, found...)
	names = slices.DeleteFunc(names, func(n string) bool {
		return n == fleet.SharedQueue || queue.ValidateQueueName(n) != nil
	})
	slices.Sort(names)
	set.Names = append([]string{fleet.SharedQueue}, slices.Compact(names)...)
	return set, nil
}

// QueueFailure is one queue a pause or resume could not change.
type QueueFailure struct {
	Queue string
	Err   error
}

// KillResult says what a Pause or Resume changed. All its parts are applied
// in one MULTI/EXEC round trip (queue.SetPausedWithFlag): the fleet flag
// first, then every queue. Each part succeeds or fails on its own, so a
// failure is never "halfway through a list": Changed and Failed together
// cover every queue, and the flag's own outcome is FlagChanged/FlagErr.
type KillResult struct {
	// Verb is "pause" or "resume".
	Verb string
	// Queues is the set acted on, in order.
	Queues []string
	// Changed are the queues now paused (resumed).
	Changed []string
	// Failed are the queues that refused, with the server's reason.
	Failed []QueueFailure
	// FlagChanged: PausedKey was set (pause) or deleted (resume).
	FlagChanged bool
	// FlagErr is why the flag could not be changed.
	FlagErr error
	// NotSent: the round trip changed nothing (the connection could not
	// be made, the server refused the client's authentication or the
	// transaction, or a name was refused first). With a transport error and
	// NotSent false, the transaction may or may not have run.
	NotSent bool
	// SweepErr is why the scan after the round trip (see Pause) did not
	// finish: a host queue declared during the call may have been missed.
	SweepErr error
}

// Complete reports whether every queue and the flag changed.
func (r KillResult) Complete() bool {
	return len(r.Failed) == 0 && r.FlagChanged && len(r.Changed) == len(r.Queues)
}

// KillError is a pause or resume that reached Valkey and was refused in part.
type KillError struct {
	Result KillResult
}

func (e *KillError) Error() string {
	r := e.Result
	var b strings.Builder
	fmt.Fprintf(&b, "%s incomplete: ", r.Verb)
	if len(r.Changed) == 0 && !r.FlagChanged {
		b.WriteString("nothing changed")
	} else {
		fmt.Fprintf(&b, "%sd [%s], fleet flag changed=%t", r.Verb, strings.Join(r.Changed, ", "), r.FlagChanged)
	}
	for _, f := range r.Failed {
		fmt.Fprintf(&b, "; failed at %s: %v", f.Queue, f.Err)
	}
	if r.FlagErr != nil {
		fmt.Fprintf(&b, "; fleet flag: %v", r.FlagErr)
	}
	return b.String()
}

// Pause pauses every queue of set and sets the fleet pause flag (PausedKey),
// so a host queue declared later (DeclareHostQueue) starts paused. A second
// scan after the round trip pauses any host queue declared since set was read
// (KillResult.Queues then lists more than set.Names). Jobs already running
// run on; producers can still enqueue. A refusal of any part
// is a *KillError holding the KillResult (also returned); a transport failure
// is returned wrapped, with KillResult.NotSent saying whether nothing can
// have changed.
func Pause(ctx context.Context, client redis.UniversalClient, set QueueSet) (KillResult, error) {
	return setFleetPaused(ctx, client, set, true)
}

// Resume undoes Pause: it resumes every queue of set and deletes the flag.
func Resume(ctx context.Context, client redis.UniversalClient, set QueueSet) (KillResult, error) {
	return setFleetPaused(ctx, client, set, false)
}

func setFleetPaused(ctx context.Context, client redis.UniversalClient, set QueueSet, paused bool) (KillResult, error) {
	r := KillResult{Verb: "resume"}
	if paused {
		r.Verb = "pause"
	}
	if client == nil {
		return r, errors.New("dispatch: nil client")
	}
	names := set.Names
	if len(names) == 0 {
		names = []string{fleet.SharedQueue}
	}
	for _, name := range names {
		if err := queue.ValidateQueueName(name); err != nil { // not from FleetQueues
			r.Queues = slices.Clone(names)
			r.NotSent = true
			return r, fmt.Errorf("%s: %w", r.Verb, err)
		}
	}
	if err := r.apply(ctx, client, paused, names); err != nil {
		r.NotSent = nothingRan(err)
		return r, fmt.Errorf("%s: %w", r.Verb, err)
	}

	// The sweep: a host queue declared between the caller's scan and the
	// round trip above was declared under the flag as it was before (an
	// unpaused queue during a pause, a paused one during a resume) and is
	// in no set. Every queue declared before the round trip is visible to
	// this scan, and every one declared after it follows the flag, so
	// nothing is missed.
	sctx, cancel := context.WithTimeout(ctx, FleetReadTimeout)
	found, derr := queue.Discover(sctx, client, queue.DefaultPrefix)
	cancel()
	var de *queue.DiscoveryError
	if errors.As(derr, &de) {
		found = de.Found
	}
	r.SweepErr = derr
	extra := slices.DeleteFunc(found, func(n string) bool { return slices.Contains(r.Queues, n) })
	if len(extra) > 0 {
		if err := r.apply(ctx, client, paused, extra); err != nil {
			if !nothingRan(err) { // state unknown: not confirmed changed
				err = fmt.Errorf("outcome unknown: %w", err)
			}
			for _, n := range extra {
				r.Queues = append(r.Queues, n)
				r.Failed = append(r.Failed, QueueFailure{Queue: n, Err: err})
			}
		}
	}
	if !r.Complete() {
		return r, &KillError{Result: r}
	}
	return r, nil
}

// apply runs one transaction over names (valid queue names) and the flag, and
// adds its outcome to r. A transport error is returned and changes nothing in r.
func (r *KillResult) apply(ctx context.Context, client redis.UniversalClient, paused bool, names []string) error {
	qs := make([]*queue.Queue, len(names))
	for i, name := range names {
		q, err := queue.New(client, name, queue.Config{})
		if err != nil {
			return err
		}
		qs[i] = q
	}
	out, err := queue.SetPausedWithFlag(ctx, paused, fleetstate.PausedKey, qs...)
	if err != nil {
		return err
	}
	r.Queues = append(r.Queues, names...)
	for i, qerr := range out.Queues {
		if qerr != nil {
			r.Failed = append(r.Failed, QueueFailure{Queue: names[i], Err: qerr})
		} else {
			r.Changed = append(r.Changed, names[i])
		}
	}
	// Either transaction having written the flag is enough.
	if out.Flag == nil {
		r.FlagChanged, r.FlagErr = true, nil
	} else if !r.FlagChanged {
		r.FlagErr = out.Flag
	}
	return nil
}

// nothingRan reports an error after which nothing can have changed: a
// connection that could not be made, a server that refused the client's
// authentication (it serves no command of that connection), or a
// transaction refused as a whole.
func nothingRan(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial" ||
		valkey.IsAuthRefused(err) || errors.Is(err, queue.ErrTxRefused)
}

// StatusReport is the kill switch's status: the real pause state of every
// queue of the set and their job counts, summed. Its JSON is the original's
// status line (same field names), extended.
type StatusReport struct {
	// PausedState is true when every queue is paused.
	PausedState bool `json:"pausedState"`
	// PausedPartial is the third state: some queues paused, some not. The
	// dangerous one: a pause that missed a host leaves it spending.
	PausedPartial bool `json:"pausedPartial,omitempty"`
	// PausedQueues names the paused queues, only when PausedPartial.
	PausedQueues []string `json:"pausedQueues,omitempty"`
	Waiting      int64    `json:"waiting"`
	Active       int64    `json:"active"`
	// Paused counts ready jobs in the paused list: a paused queue's backlog
	// in BullMQ 5's layout. In 6's (the default) it stays in Waiting.
	Paused  int64 `json:"paused"`
	Delayed int64 `json:"delayed"`
	Failed  int64 `json:"failed"`
	// Completed, Refused and Cancelled split the queue's completed set by
	// outcome (FinishedOutcome): a refusal and a cancel complete a job too,
	// so that it is never retried.
	Completed   int64 `json:"completed"`
	Refused     int64 `json:"refused"`
	Cancelled   int64 `json:"cancelled"`
	Prioritized int64 `json:"prioritized"`
	// PerQueue holds each queue's own state and counts, in the set's order.
	PerQueue []QueueStatus `json:"perQueue,omitempty"`
	// Fleet names a registry that could not be read (only then).
	Fleet string `json:"fleet,omitempty"`
	// Spend is where spend stands against the caps, when the caller read it
	// (Spend).
	Spend *SpendReport `json:"spend,omitempty"`
	// Discovery names a keyspace scan that did not finish (only then).
	Discovery string `json:"discovery,omitempty"`
	// PauseFlag is the fleet pause flag: set, a host queue declared from
	// now on starts paused.
	PauseFlag bool `json:"pauseFlag"`
	// Queues is how many queues were read.
	Queues int `json:"queues"`
	// Held counts jobs held on their wait conditions, fleet-wide.
	Held int `json:"held"`
	// PullRequests are the pull requests of the newest forge runs, when
	// the caller read them (RecentPullRequests).
	PullRequests []PullRequestRun `json:"pullRequests,omitempty"`
}

// PullRequestRun is a forge run and the pull request it opened or added to.
type PullRequestRun struct {
	JobID          string    `json:"jobId"`
	Target         string    `json:"target"`
	Outcome        string    `json:"outcome"`
	EndedAt        time.Time `json:"endedAt"`
	PullRequestURL string    `json:"pullRequestUrl"`
}

// RecentPullRequests answers the pull requests of the newest forge runs of
// the fleet's run mirror (at most limit, newest first): where an operator
// finds what the agent opened.
func RecentPullRequests(ctx context.Context, client redis.UniversalClient, limit int) ([]PullRequestRun, error) {
	recs, _, err := Runs(ctx, client, RunsFilter{Limit: DefaultRunsLimit})
	if err != nil {
		return nil, err
	}
	var out []PullRequestRun
	for _, r := range recs {
		if r.PullRequestURL == "" {
			continue
		}
		out = append(out, PullRequestRun{JobID: r.JobID, Target: r.Target, Outcome: r.Outcome,
			EndedAt: r.EndedAt.UTC(), PullRequestURL: r.PullRequestURL})
		if len(out) == limit {
			break
		}
	}
	return out, nil
}

// Status reads the pause state and the counts of every queue of set, and the
// fleet pause flag. A queue that cannot be read fails the whole status (a sum
// without it would understate the backlog), naming the queue. PerQueue is
// left empty; StatusPerQueue fills it.
func Status(ctx context.Context, client redis.UniversalClient, set QueueSet) (StatusReport, error) {
	rep, err := StatusPerQueue(ctx, client, set)
	rep.PerQueue = nil
	return rep, err
}

// StatusPerQueue is Status with each queue's own row in PerQueue.
func StatusPerQueue(ctx context.Context, client redis.UniversalClient, set QueueSet) (StatusReport, error) {
	var rep StatusReport
	if client == nil {
		return rep, errors.New("dispatch: nil client")
	}
	names := set.Names
	if len(names) == 0 {
		names = []string{fleet.SharedQueue}
	}
	flag, err := client.Exists(ctx, fleetstate.PausedKey).Result()
	if err != nil {
		return rep, fmt.Errorf("status: read %s: %w", fleetstate.PausedKey, err)
	}
	rep.PauseFlag = flag == 1
	var paused []string
	for _, name := range names {
		q, err := queue.New(client, name, queue.Config{})
		if err != nil {
			return rep, fmt.Errorf("status: %w", err)
		}
		isPaused, err := q.IsPaused(ctx)
		if err != nil {
			return rep, fmt.Errorf("status: %w", err)
		}
		qs, err := queueStatus(ctx, q, isPaused)
		if err != nil {
			return rep, fmt.Errorf("status: %w", err)
		}
		if isPaused {
			paused = append(paused, name)
		}
		rep.add(qs)
	}
	held, err := fleetstate.HeldCount(ctx, client)
	if err != nil {
		return rep, fmt.Errorf("status: held jobs: %w", err)
	}
	rep.Held = held
	rep.Queues = len(names)
	rep.PausedState = len(paused) == len(names)
	if len(paused) > 0 && !rep.PausedState {
		rep.PausedPartial = true
		rep.PausedQueues = paused
	}
	if set.RegistryErr != nil {
		rep.Fleet = set.RegistryErr.Error()
	}
	if set.DiscoveryErr != nil {
		rep.Discovery = set.DiscoveryErr.Error()
	}
	return rep, nil
}

// Hosts returns every live registry row, sorted by name, for the operator's
// host list (registry.ReadLive bounded by FleetReadTimeout). An unreadable
// registry is an error wrapping registry.ErrUnreachable, never an empty list.
func Hosts(ctx context.Context, client redis.UniversalClient) ([]registry.Host, error) {
	if client == nil {
		return nil, errors.New("dispatch: nil client")
	}
	return registry.ReadLive(ctx, client, FleetReadTimeout)
}
