package dispatch

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"time"

	"github.com/pidispatch/pidispatch/internal/hostfolder"
	"github.com/pidispatch/pidispatch/jobs"
)

// Workspaces gives a forge job its repository before it runs and publishes
// what it changed after, both on the host: the container never holds a forge
// credential. stack.WithForgeWorkspaces plugs forge/workspace in.
type Workspaces interface {
	// Prepare fills dir (the job's empty workspace folder) with the job's
	// repository. An error is a *WorkspaceError.
	Prepare(ctx context.Context, jobID string, job jobs.Job, dir string) (Workspace, error)
	// Serves reports whether this host holds a credential for forge.
	Serves(forge jobs.Forge) bool
	// Admit reports whether the host's own triggers cover the job (its
	// trigger, forge, repository, event and flow); an error says why not.
	// Asked before anything is minted or spent: job data alone never
	// decides where the host clones, pushes or comments.
	Admit(job jobs.Job) error
	// Status shows how a forge job stands in its thread's one status
	// comment, edited in place (created the first time): the Worker calls it
	// when the job waits, is refused before it ran, starts, and when its
	// outcome is final or it is retried. It answers the comment's web
	// address ("" when unknown), which the job's record keeps. Best effort:
	// an error is logged, never the job's.
	Status(ctx context.Context, jobID string, job jobs.Job, s JobStatus) (string, error)
}

// JobStatus is what a forge job's status comment says now.
type JobStatus struct {
	// State is one of the Status* constants.
	State string
	// Reason is why it waits, was refused or failed (a jobs.Reason).
	Reason jobs.Reason
	// Attempt and Attempts count its tries (a retry says so).
	Attempt, Attempts int
	// Until is when a waiting job is due again (zero: not known).
	Until time.Time
	// PullRequestURL, Turns and Dollars are the final outcome's.
	PullRequestURL string
	Turns          int
	Dollars        float64
	// Outputs says what became of the job's outputs: a refused one is
	// named with its reason.
	Outputs []jobs.OutputResult
}

// The states a status comment shows.
const (
	StatusWaiting   = "waiting"   // a gate deferred it: Reason says why
	StatusRunning   = "running"   // its container started
	StatusRetrying  = "retrying"  // an attempt failed; another follows
	StatusCompleted = "completed" // done: PullRequestURL when it opened one
	StatusRefused   = "refused"   // refused (before or after it ran): Reason
	StatusFailed    = "failed"    // failed for good: Reason
)

// Workspace is one job's prepared workspace.
type Workspace interface {
	// Event is what the job was asked, read from the forge on the host when
	// the workspace was prepared: the Worker writes it to /job/event.json and
	// shows it in the prompt as untrusted data. Nil for a job with none.
	Event() *jobs.Event
	// Publish finishes the job on its forge: a completed job's changes are
	// proposed; any outcome is commented. An error is a *WorkspaceError.
	Publish(ctx context.Context, res WorkspaceResult) (WorkspacePublished, error)
	// Close removes what Prepare kept on the host.
	Close() error
}

// WorkspaceResult is how the job ended, and what it wrote for the host to
// publish, validated.
type WorkspaceResult struct {
	Outcome string
	Reason  jobs.Reason
	Turns   int
	Dollars float64
	// PullRequest is the title and body the job wrote in /job/out/pr.md;
	// nil when it wrote none (or one the host refused).
	PullRequest *jobs.PullRequestText
	// Outputs are the other files the job wrote to /job/out (comment.md,
	// review.json, labels.json), by name, each read from a regular file and
	// bounded (jobs.MaxOutputBytes), not yet validated: the workspace
	// validates each against its forge and posts it, or refuses it whole.
	Outputs map[string][]byte
	// Refused are the outputs the Worker already refused (a link, a FIFO, a
	// file too large), with the reason.
	Refused []jobs.OutputResult
	// NoChanges: the job's flow changes no code (it cannot edit or write:
	// answer, plan), so nothing but its outputs is published, whatever its
	// workspace holds.
	NoChanges bool
}

// WorkspacePublished is what Publish did, for the record.
type WorkspacePublished struct {
	PullRequestURL, PushedCommit, BaseCommit string
	// Outputs says what became of each output the job wrote.
	Outputs []jobs.OutputResult
}

// WorkspaceError is a workspace step the host refused (Outcome policy) or
// could not carry out (Outcome failed; Retry says whether another attempt
// may succeed). Reason is a jobs.Reason*.
type WorkspaceError struct {
	Outcome string
	Reason  jobs.Reason
	Retry   bool
	Err     error
}

func (e *WorkspaceError) Error() string {
	if e.Err == nil {
		return "workspace: " + string(e.Reason)
	}
	return "workspace: " + string(e.Reason) + ": " + e.Err.Error()
}

func (e *WorkspaceError) Unwrap() error { return e.Err }

// workspaceErr reads err as a *WorkspaceError (any other error: failed,
// forge-unavailable, retried).
func workspaceErr(err error) *WorkspaceError {
	var we *WorkspaceError
	if errors.As(err, &we) && slices.Contains(jobs.Reasons, we.Reason) && we.Reason != jobs.ReasonCompleted {
		return we
	}
	return &WorkspaceError{Outcome: jobs.OutcomeFailed, Reason: jobs.ReasonForgeUnavailable, Retry: true, Err: err}
}

// prepareWorkspace clones a forge job's repository into its workspace and
// hands the folder to the container's user. Its verdict goes on, or says why
// the job ends here.
func (w *Worker) prepareWorkspace(ctx context.Context, h *held, dir, user string) verdict {
	if w.deps.Workspaces == nil || h.folder != "" || h.spec.Repo == "" || h.spec.Forge == "" {
		return goOn
	}
	var ws Workspace
	var err error
	if w.holdingLock(ctx, h, func(ctx context.Context) { ws, err = w.deps.Workspaces.Prepare(ctx, h.job.ID, h.spec, dir) }) {
		// The stalled check failed the job while the clone ran: nothing more is said.
		if ws != nil {
			_ = ws.Close()
		}
		return verdict{act: actLockLost, reason: jobs.ReasonStalled}
	}
	if err == nil {
		if err = hostfolder.HandOver(dir, user); err != nil {
			_ = ws.Close()
		}
	}
	if err != nil {
		we := workspaceErr(err)
		h.log.Error("forge_workspace_failed", "reason", we.Reason, "err", err)
		return we.verdict()
	}
	h.ws = ws
	return goOn
}

// verdict is how a job ends on a workspace step that was refused or failed.
func (e *WorkspaceError) verdict() verdict {
	switch {
	case e.Outcome == jobs.OutcomePolicy:
		return refuseFor(e.Reason)
	case e.Retry:
		return failFor(e.Reason)
	default:
		return failFinalFor(e.Reason)
	}
}

// publishWorkspace publishes a finished forge job's workspace and returns the
// run's verdict, changed to a refusal or a failure when publishing a
// completed run was refused or failed. It closes the workspace.
func (w *Worker) publishWorkspace(ctx context.Context, h *held, v verdict) verdict {
	if h.ws == nil {
		return v
	}
	ws := h.ws
	h.ws = nil
	defer func() {
		if err := ws.Close(); err != nil {
			h.log.Warn("forge_workspace_close_failed", "err", err)
		}
	}()
	if v.act == actLockLost {
		return v // the stalled check answered for the job: nothing more is said
	}
	var pub WorkspacePublished
	var err error
	if w.holdingLock(ctx, h, func(ctx context.Context) { pub, err = ws.Publish(ctx, w.workspaceResult(h, v)) }) {
		return verdict{act: actLockLost, reason: jobs.ReasonStalled, exit: v.exit, telemetry: v.telemetry}
	}
	h.rec.BaseCommit = pub.BaseCommit
	h.rec.PushedCommit = pub.PushedCommit
	h.rec.PullRequestURL = pub.PullRequestURL
	h.rec.Outputs = pub.Outputs
	if err == nil || v.act != actComplete {
		return v
	}
	we := workspaceErr(err)
	h.log.Error("forge_publish_failed", "reason", we.Reason, "err", err)
	// A refusal or a failure no retry can mend (the repository is gone) is
	// final; only a forge that did not answer is retried. The run's exit
	// code and exit line stay on the record.
	pv := we.verdict()
	v.act, v.reason = pv.act, pv.reason
	return v
}

// workspaceResult is how the run ended, for its publish: the outcome, and the
// turns and dollars of its exit line, the metered spend preferred.
func (w *Worker) workspaceResult(h *held, v verdict) WorkspaceResult {
	pr, prRefused := w.pullRequestText(h)
	res := WorkspaceResult{Outcome: v.outcome(), Reason: v.reason, PullRequest: pr, NoChanges: w.changesNothing(h)}
	res.Outputs, res.Refused = w.readOutputs(h)
	if prRefused != nil {
		res.Refused = append([]jobs.OutputResult{*prRefused}, res.Refused...)
	}
	var exit struct {
		Turns *int64   `json:"turns"`
		Cost  *float64 `json:"cost"`
	}
	if len(v.telemetry) > 0 && json.Unmarshal(v.telemetry, &exit) == nil {
		if exit.Turns != nil {
			res.Turns = int(*exit.Turns)
		}
		if exit.Cost != nil {
			res.Dollars = *exit.Cost
		}
	}
	if h.rec.Spend != nil {
		res.Dollars = h.rec.Spend.Dollars
	}
	return res
}

// holdingLock runs op while extending the job's lock, as a running container
// does; it reports whether the lock was lost (op's context is then cancelled).
func (w *Worker) holdingLock(ctx context.Context, h *held, op func(context.Context)) (lost bool) {
	opCtx, stop := context.WithCancel(ctx)
	lostCh := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.keepLock(opCtx, h, stop, lostCh)
	}()
	op(opCtx)
	stop()
	<-done
	select {
	case <-lostCh:
		return true
	default:
		return false
	}
}
