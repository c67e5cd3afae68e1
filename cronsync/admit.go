package cronsync

import (
	"context"
	"encoding/json"
	"reflect"
)

// Why a host does not run a scheduler's run (RunDecision.Reason).
const (
	// NotAgreedCronDisabled: PI_TRIGGERS_FILE is unset, so this host agreed to
	// no cron set at all.
	NotAgreedCronDisabled = RefusedCronDisabled
	// NotAgreedOwnUnreadable: the file is configured but this host has never
	// read a valid one, so it cannot say what it agreed to.
	NotAgreedOwnUnreadable = RefusedOwnUnreadable
	// NotAgreedNotInSet: the host's cron set has no trigger of that id.
	NotAgreedNotInSet = "scheduler-not-in-set"
	// NotAgreedRunDiffers: the host's trigger of that id makes another run
	// (another folder, task, image...): the run comes from another file or an
	// older version of this one.
	NotAgreedRunDiffers = "run-differs"
)

// RunDecision is what a host does with a run a job scheduler made.
type RunDecision struct {
	// Run: the host's cron set names this exact run.
	Run bool
	// Leave: not this host's run, but a live peer may have agreed to it, so it
	// goes back on its queue for them (never set for a host queue, which only
	// its host drains).
	Leave bool
	// Reason says why not, when Run is false (NotAgreed*).
	Reason string
}

// Agreed reports whether the set this host currently believes names the run
// data of scheduler schedulerID: a trigger of that id whose JobData is the
// same JSON as data. The reason says why not. A host without a configured
// file, or with no valid read of it yet, agrees to nothing.
func (s *LiveSet) Agreed(schedulerID string, data json.RawMessage) (bool, string) {
	own := s.Own()
	switch {
	case !own.Configured:
		return false, NotAgreedCronDisabled
	case own.Entries == nil:
		return false, NotAgreedOwnUnreadable
	}
	for _, e := range own.Entries {
		if e.SchedulerID != schedulerID {
			continue
		}
		if sameJSON(JobData(e), data) {
			return true, ""
		}
		return false, NotAgreedRunDiffers
	}
	return false, NotAgreedNotInSet
}

// AdmitRun decides whether host runs a job that scheduler schedulerID made,
// with job data data, taken from a queue that is the shared queue (shared) or
// this host's own queue. The rule a fleet follows:
//
//   - A host runs a scheduler's run only when its own cron set (the triggers
//     file as last read successfully, see LiveSet) has a trigger of that id
//     making exactly that run. A host whose PI_TRIGGERS_FILE is unset runs
//     none: cron off is off, whatever schedulers Valkey still holds.
//   - On a host queue nobody else would take the run, so it is refused: the
//     caller records the refusal, so a run is never dropped without a trace.
//   - On the shared queue, which every host drains, the run is left for the
//     others (Leave) when a live peer publishes a cron opinion other than
//     this host's, or when the registry cannot be read: that peer may be the
//     host that agreed to it. When every live opinion is this host's own (or
//     there is none), no live host agreed, and it is refused.
//
// peers may be nil (no registry): then nobody else can be asked, and a run
// this host did not agree to is refused.
func AdmitRun(ctx context.Context, live *LiveSet, peers Peers, shared bool, host, schedulerID string, data json.RawMessage) RunDecision {
	ok, reason := live.Agreed(schedulerID, data)
	if ok {
		return RunDecision{Run: true}
	}
	d := RunDecision{Reason: reason}
	if !shared || peers == nil {
		return d
	}
	hosts, err := peers.LivePeers(ctx)
	if err != nil {
		d.Leave = true
		return d
	}
	mine, _ := live.FPCron()
	for _, h := range hosts {
		if h.AgeKnown && h.FPCron != "" && h.Name != host && h.FPCron != mine {
			d.Leave = true
			break
		}
	}
	return d
}

// sameJSON reports whether a and b are the same JSON value (key order and
// spacing aside).
func sameJSON(a, b []byte) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}
