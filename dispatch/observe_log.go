package dispatch

import "log/slog"

// logObserver is the Worker's log as an observer: the lines that tell one
// event each (a start, a deferral, a gate's refusal, a lost lock, a run's
// spend) are written from the events, so the log and every other observer
// see the same decisions.
type logObserver struct{ log *slog.Logger }

func (l logObserver) Observe(ev Event) {
	switch ev.Kind {
	case EventStart:
		l.log.Info("job_started", "jobId", ev.JobID, "queue", ev.Queue, "attempt", ev.Attempt, "pickupMs", ev.PickupLatency.Milliseconds())
	case EventGate:
		switch ev.Decision {
		case DecisionDefer:
			l.log.Info("job_deferred", "jobId", ev.JobID, "queue", ev.Queue, "gate", ev.Gate, "reason", ev.Reason, "delay", ev.Delay.String())
		default:
			l.log.Info("job_gate_stopped", "jobId", ev.JobID, "queue", ev.Queue, "gate", ev.Gate, "decision", ev.Decision, "reason", ev.Reason)
		}
	case EventLockLost:
		l.log.Warn("job_lock_lost", "jobId", ev.JobID, "queue", ev.Queue)
	case EventFinish:
		if ev.Calls > 0 {
			l.log.Info("job_spend", "jobId", ev.JobID, "queue", ev.Queue, "calls", ev.Calls, "tokens", ev.Tokens, "usd", float64(ev.SpendMicros)/1e6)
		}
	}
}

var _ Observer = logObserver{}
