package operator

import (
	"context"
	"encoding/json"

	"github.com/pidispatch/pidispatch/jobs"
	"github.com/pidispatch/pidispatch/queue"
)

// Outcomes of a finished job, as status counts them.
const (
	FinishedCompleted = "completed" // the run succeeded
	FinishedRefused   = "refused"   // refused or stopped by policy (a gate, exit 2, a timeout)
	FinishedCancelled = "cancelled" // stopped by an operator's cancel
)

// FinishedOutcome classifies a completed job by its stored result. The worker
// completes a policy outcome too, never retried, with
// {"outcome":"policy","reason":R} as the result (finishPolicy); a success
// stores the container's exit line or {"outcome":"completed"}. Anything else,
// a result a producer's own consumer stored included, counts as completed.
func FinishedOutcome(result json.RawMessage) string {
	var r struct {
		Event   string      `json:"event"`
		Outcome string      `json:"outcome"`
		Reason  jobs.Reason `json:"reason"`
	}
	if json.Unmarshal(result, &r) != nil || r.Event != "" || r.Outcome != jobs.OutcomePolicy {
		return FinishedCompleted
	}
	if r.Reason == jobs.ReasonOperatorCancel {
		return FinishedCancelled
	}
	return FinishedRefused
}

// QueueStatus is one queue's part of a StatusReport.
type QueueStatus struct {
	Queue       string `json:"queue"`
	PausedState bool   `json:"pausedState"`
	Waiting     int64  `json:"waiting"`
	Active      int64  `json:"active"`
	Paused      int64  `json:"paused"`
	Delayed     int64  `json:"delayed"`
	Failed      int64  `json:"failed"`
	Completed   int64  `json:"completed"`
	Refused     int64  `json:"refused"`
	Cancelled   int64  `json:"cancelled"`
	Prioritized int64  `json:"prioritized"`
}

// queueStatus reads q's counts and splits its completed set by outcome.
func queueStatus(ctx context.Context, q *queue.Queue, paused bool) (QueueStatus, error) {
	c, err := q.Counts(ctx)
	if err != nil {
		return QueueStatus{}, err
	}
	qs := QueueStatus{
		Queue: q.Name(), PausedState: paused, Waiting: c.Waiting, Active: c.Active, Paused: c.Paused,
		Delayed: c.Delayed, Failed: c.Failed, Prioritized: c.Prioritized,
	}
	err = q.CompletedResults(ctx, func(_ string, result json.RawMessage) {
		switch FinishedOutcome(result) {
		case FinishedRefused:
			qs.Refused++
		case FinishedCancelled:
			qs.Cancelled++
		default:
			qs.Completed++
		}
	})
	return qs, err
}

// add sums one queue into the report and keeps its row.
func (r *StatusReport) add(qs QueueStatus) {
	r.Waiting += qs.Waiting
	r.Active += qs.Active
	r.Paused += qs.Paused
	r.Delayed += qs.Delayed
	r.Failed += qs.Failed
	r.Completed += qs.Completed
	r.Refused += qs.Refused
	r.Cancelled += qs.Cancelled
	r.Prioritized += qs.Prioritized
	r.PerQueue = append(r.PerQueue, qs)
}
