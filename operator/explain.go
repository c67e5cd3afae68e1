package operator

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pidispatch/pidispatch/config"
	"github.com/pidispatch/pidispatch/dispatch/policy"
	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/jobs"
	"github.com/pidispatch/pidispatch/queue"
)

// Explain answers "why is my job not running": where the job is, and what
// holds it. It reads the state the worker's gates decide on (the queue, the
// pause flag, the hold store, the slot leases, the budget counts, the
// registry) and evaluates the policy files with dispatch's own parser and
// matcher, so its answer and the worker's decision come from one rule.

// Finding codes, most important first (Explanation.Findings is sorted so).
const (
	FindRunning       = "running"               // active, its lock held
	FindStalled       = "stalled"               // active, its lock expired: the stalled check fails it
	FindFinished      = "finished"              // completed or failed
	FindFleetPaused   = "fleet-paused"          // the fleet pause flag (pi:paused) is set
	FindQueuePaused   = "queue-paused"          // its queue is paused
	FindHostGone      = "host-gone"             // on a host queue whose host has no registry row
	FindHostStale     = "host-stale"            // on a host queue whose host's row is old or undatable
	FindNoHosts       = "no-hosts"              // no worker has a registry row
	FindNotCapable    = "not-capable"           // hosts draining its queue lack a profile it names
	FindInvalidJob    = "invalid-job"           // its data does not parse: it will be refused
	FindJobUnsigned   = "job-unsigned"          // the fleet key did not sign it for its queue: it will be refused
	FindHostUntrusted = "host-untrusted"        // on a host queue whose host's row the fleet key did not sign
	FindPauseWindow   = "pause-window"          // a pause window matches its scope
	FindWaitHold      = "wait-hold"             // held on its waitFor conditions
	FindScopeBusy     = "scope-busy"            // its scope's fleet-wide slots are all held
	FindThreadBusy    = "thread-busy"           // an older job of its issue or pull request runs or waits first
	FindScopeLocal    = "scope-local"           // one job per folder, counted on each host only
	FindRateLimited   = "rate-limited"          // its provider is suspended by a rate limit: deferred to the reset
	FindBudgetFull    = "budget-full"           // a count window is at its cap: it will be refused
	FindDollarsFull   = "dollars-full"          // a dollar window cannot hold its cap: it will be refused
	FindPredictedOver = "predicted-over-budget" // the p90 cost of runs like it does not fit its cap or a dollar window: it waits
	FindImageMissing  = "image-missing"         // hosts that can take it published no image
	FindDelayed       = "delayed"               // deferred or backing off for a retry
	FindReady         = "ready"                 // nothing holds it: it waits for a free worker
	FindUnread        = "unread"                // a part of the state could not be read
)

// findingRank orders findings for display: what stops every job first.
var findingRank = []string{
	FindRunning, FindStalled, FindFinished, FindFleetPaused, FindQueuePaused,
	FindHostGone, FindHostStale, FindHostUntrusted, FindNoHosts, FindNotCapable, FindInvalidJob, FindJobUnsigned, FindPauseWindow,
	FindWaitHold, FindRateLimited, FindThreadBusy, FindScopeBusy, FindPredictedOver, FindBudgetFull, FindDollarsFull, FindImageMissing, FindReady,
	FindScopeLocal, FindDelayed, FindUnread,
}

// rank is a code's place in findingRank; a source's own code ranks with
// the holds the gates find, before the notes.
func rank(code string) int {
	if i := slices.Index(findingRank, code); i >= 0 {
		return i
	}
	return slices.Index(findingRank, FindImageMissing)
}

// Finding is one fact about a job's state: a stable code, one line for a
// person, and the data behind it for a program.
type Finding struct {
	Code  string         `json:"code"`
	Words string         `json:"words"`
	Data  map[string]any `json:"data,omitempty"`
}

// Explanation is Explain's answer.
type Explanation struct {
	JobID string `json:"jobId"`
	// Found is false when no queue has the job; Records may still hold its
	// runs (a finished job removed by retention).
	Found bool   `json:"found"`
	Queue string `json:"queue,omitempty"`
	State string `json:"state,omitempty"`
	// Attempt is the attempt it runs or would run next (attempts made + 1
	// unless it finished), of Attempts allowed.
	Attempt  int `json:"attempt,omitempty"`
	Attempts int `json:"attempts,omitempty"`
	// Host is the worker that last took the job (its processedBy): the one
	// running it when State is active. "" when the worker gave no name.
	Host string `json:"host,omitempty"`
	// Scope is the job's scope (folder or owner/name), Image its image
	// override; both empty when its data does not parse.
	Scope string `json:"scope,omitempty"`
	Image string `json:"image,omitempty"`
	// Findings say what holds the job, most important first.
	Findings []Finding `json:"findings"`
	// Records are the job's run records, one per attempt; RecordsFrom says
	// where they were read ("mirror", "logs-dir", "").
	Records     []jobs.Record `json:"records,omitempty"`
	RecordsFrom string        `json:"recordsFrom,omitempty"`
	// PullRequestOutcomes is how Records were joined to their pull
	// requests' outcomes (as Totals.PullRequestOutcomes); "" when there
	// are no records.
	PullRequestOutcomes string `json:"pullRequestOutcomes,omitempty"`
}

// joinPullRequests joins the records to their pull requests' outcomes.
func (e *Explanation) joinPullRequests(ctx context.Context, store PullRequestOutcomes) {
	if len(e.Records) > 0 {
		e.PullRequestOutcomes, _ = JoinPullRequests(ctx, store, e.Records)
	}
}

// Primary is the most important finding.
func (e Explanation) Primary() Finding {
	if len(e.Findings) == 0 {
		return Finding{}
	}
	return e.Findings[0]
}

// ExplainJob is what a FindingSource is told about the job.
type ExplainJob struct {
	ID    string
	Queue string
	State queue.State
	// Spec is the parsed job data; nil when it does not parse.
	Spec *jobs.Job
	// SchedulerID is the scheduler the queue entry names, on a scheduler's
	// run.
	SchedulerID string
}

// FindingSource is the extension point for holds this package does not read
// itself: a fleet dollar window or a provider's rate limit adds a source that
// reads its own store (fleetstate's) and returns its findings, rather than
// Explain reading their keys by hand. A source is asked only about a job that
// is neither running nor finished. Its error becomes an "unread" finding.
type FindingSource interface {
	// Name names the source in an unread finding.
	Name() string
	Findings(ctx context.Context, job ExplainJob) ([]Finding, error)
}

// ExplainOptions is the host's view Explain evaluates with: its policy files
// and caps, as the worker of this host has them. The zero value knows no
// pause windows and no scoped limits and uses the default daily cap.
type ExplainOptions struct {
	PauseWindows policy.PauseWindows
	ScopedLimits policy.ScopedLimits
	// DailyCap and WeeklyCap are PI_DAILY_CAP (0: the default) and
	// PI_WEEKLY_CAP (0: no weekly window).
	DailyCap, WeeklyCap int
	// MonthlyCap is PI_MONTHLY_CAP (0: no window).
	MonthlyCap int
	// DefaultImage is PI_JOB_IMAGE, for a job without an image of its own.
	DefaultImage string
	// LogsDir is PI_LOGS_DIR: run records are read there when the mirror
	// has none.
	LogsDir string
	// FleetKey is the key PI_FLEET_KEY_FILE holds: with it, a job the key
	// did not sign for its queue is found job-unsigned (unless its queue is
	// in UnsignedQueues, PI_UNSIGNED_QUEUES), and a host row it did not
	// sign host-untrusted.
	FleetKey       fleet.Key
	UnsignedQueues []string
	// Sources add findings (see FindingSource).
	Sources []FindingSource
	// PullRequests joins each record to what became of its pull request
	// (JoinPullRequests): the receiver's store, read with FleetKey. Nil
	// shows none, never the outcome a record carries itself.
	PullRequests PullRequestOutcomes
	// Now is the clock pause windows are evaluated on; nil is time.Now, as
	// the worker's gate uses.
	Now func() time.Time
}

// ExplainOptionsFromConfig loads the policy files cfg names with dispatch's
// own loaders, and takes its fleet key and unsigned queues. A file that does not load is an error naming it.
func ExplainOptionsFromConfig(cfg config.Config) (ExplainOptions, error) {
	o := ExplainOptions{DailyCap: cfg.DailyCap, WeeklyCap: cfg.WeeklyCap, MonthlyCap: cfg.Spend.MonthlyCap, DefaultImage: cfg.JobImage, LogsDir: cfg.LogsDir,
		FleetKey: cfg.FleetKey, UnsignedQueues: cfg.UnsignedQueues}
	var errs []error
	if cfg.PauseWindowsFile != "" {
		w, err := config.LoadPauseWindows(cfg.PauseWindowsFile)
		o.PauseWindows = w
		errs = append(errs, err)
	}
	if cfg.ScopedLimitsFile != "" {
		l, err := config.LoadScopedLimits(cfg.ScopedLimitsFile)
		o.ScopedLimits = l
		errs = append(errs, err)
	}
	return o, errors.Join(errs...)
}

// ErrJobNotFound is a job id no queue of the fleet has.
var ErrJobNotFound = errors.New("no job on any queue")

// Explain finds jobID on every queue of the fleet and says where it is and
// what holds it. A job on no queue is ErrJobNotFound, with the Explanation
// carrying whatever run records it left. An id no job can have is
// ErrInvalidJobID; other errors are Valkey failures.
func Explain(ctx context.Context, client redis.UniversalClient, jobID string, opts ExplainOptions) (Explanation, error) {
	if client == nil {
		return Explanation{}, errors.New("explain: nil client")
	}
	if err := fleet.CheckJobID(jobID); err != nil {
		return Explanation{}, fmt.Errorf("explain: %w: %w", ErrInvalidJobID, err)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	dir, err := queue.NewDirectory(client, queue.Config{})
	if err != nil {
		return Explanation{}, err
	}
	ex := Explanation{JobID: jobID, Findings: []Finding{}}
	name, job, err := dir.Find(ctx, jobID)
	if errors.Is(err, queue.ErrNotFound) {
		ex.Records, ex.RecordsFrom = jobRecords(ctx, client, "", jobID, 0, opts.LogsDir)
		ex.joinPullRequests(ctx, opts.PullRequests)
		return ex, fmt.Errorf("explain %q: %w", jobID, ErrJobNotFound)
	}
	if err != nil {
		return Explanation{}, fmt.Errorf("explain %q: %w", jobID, err)
	}
	x := &explainer{client: client, dir: dir, opts: opts, ex: &ex, job: job}
	x.locate(name)
	if err := x.explain(ctx); err != nil {
		return Explanation{}, fmt.Errorf("explain %q: %w", jobID, err)
	}
	slices.SortStableFunc(ex.Findings, func(a, b Finding) int { return rank(a.Code) - rank(b.Code) })
	return ex, nil
}

// explainer carries one Explain's state between its checks.
type explainer struct {
	client redis.UniversalClient
	dir    *queue.Directory
	opts   ExplainOptions
	ex     *Explanation
	job    *queue.Job
	spec   *jobs.Job
}

func (x *explainer) add(code, words string, data map[string]any) {
	x.ex.Findings = append(x.ex.Findings, Finding{Code: code, Words: words, Data: data})
}

// unread notes a part of the state that could not be read; the rest of the
// answer stands.
func (x *explainer) unread(what string, err error) {
	x.add(FindUnread, fmt.Sprintf("could not read %s: %v", what, err), map[string]any{"part": what})
}

// locate fills where the job is: queue, state, attempt, host, scope.
func (x *explainer) locate(name string) {
	ex, j := x.ex, x.job
	ex.Found, ex.Queue, ex.State = true, name, string(j.State)
	ex.Attempts, ex.Host = j.Attempts, j.ProcessedBy
	ex.Attempt = j.AttemptsMade + 1
	if j.State == queue.StateCompleted || j.State == queue.StateFailed {
		ex.Attempt = max(j.AttemptsMade, 1)
	}
	if j.Corrupt == "" {
		if spec, err := jobs.ParseJob(j.Data); err == nil {
			x.spec = &spec
			ex.Scope, ex.Image = spec.Scope(), spec.Image
		}
	}
}

// explain runs the checks that fit the job's state.
func (x *explainer) explain(ctx context.Context) error {
	j := x.job
	attempts := max(j.AttemptsMade, j.AttemptsStarted)
	x.ex.Records, x.ex.RecordsFrom = jobRecords(ctx, x.client, x.ex.Queue, j.ID, attempts, x.opts.LogsDir)
	x.ex.joinPullRequests(ctx, x.opts.PullRequests)
	switch j.State {
	case queue.StateActive:
		return x.running(ctx)
	case queue.StateCompleted, queue.StateFailed:
		x.finished()
		return nil
	}
	return x.pending(ctx)
}

// running says who runs an active job, or that its lock expired.
func (x *explainer) running(ctx context.Context) error {
	q, err := x.dir.Queue(x.ex.Queue)
	if err != nil {
		return err
	}
	unlocked, err := q.Unlocked(ctx)
	if err != nil {
		return err
	}
	host := x.ex.Host
	who := "on host " + host
	if host == "" {
		who = "on a worker that gave no name (an unnamed worker or a BullMQ consumer), so the host cannot be told"
	}
	since := timeOrZero(x.job.ProcessedOn)
	if slices.Contains(unlocked, x.job.ID) {
		x.add(FindStalled, fmt.Sprintf("stalled: its lock expired %s; the stalled check fails it and records it stalled", who),
			map[string]any{"host": host, "since": since})
		return nil
	}
	x.add(FindRunning, fmt.Sprintf("running %s (attempt %d), taken at %s", who, x.ex.Attempt, fmtTime(x.job.ProcessedOn)),
		map[string]any{"host": host, "since": since, "attempt": x.ex.Attempt})
	return nil
}

// finished says how a completed or failed job ended, from its queue entry
// and its last record.
func (x *explainer) finished() {
	j := x.job
	data := map[string]any{"state": string(j.State), "finishedAt": timeOrZero(j.FinishedOn)}
	how := "failed"
	if j.State == queue.StateCompleted {
		how = FinishedOutcome(j.ReturnValue)
	} else if j.FailedReason != "" {
		data["failedReason"] = j.FailedReason
	}
	words := fmt.Sprintf("finished: %s at %s after %d attempt(s)", how, fmtTime(j.FinishedOn), j.AttemptsMade)
	if n := len(x.ex.Records); n > 0 {
		last := x.ex.Records[n-1]
		words += fmt.Sprintf("; its last record says %s/%s on host %s", last.Outcome, last.Reason, last.Host)
		data["outcome"], data["reason"], data["host"] = last.Outcome, last.Reason, last.Host
	} else {
		words += "; no run record found (in the run mirror or PI_LOGS_DIR)"
	}
	data["finished"] = how
	x.add(FindFinished, words, data)
}

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "an unknown time"
	}
	return t.UTC().Format(time.RFC3339)
}

// timeOrZero is t for JSON, or nil when it is unknown.
func timeOrZero(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UTC()
}
