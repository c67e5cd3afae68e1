package jobs

import (
	"strings"
	"time"

	"github.com/pidispatch/pidispatch/internal/check"
)

// The parts of a record that say where a run's time and money went. Each is
// optional: records written before they existed, and runs that never reached
// a phase, omit them, and every reader treats a missing part as unknown, not
// as zero.

// ModelSpend is one provider/model's share of a run's spend.
type ModelSpend struct {
	Provider string      `json:"provider"`
	Model    string      `json:"model"`
	Calls    int         `json:"calls"`
	Micros   int64       `json:"micros"`
	Tokens   SpendTokens `json:"tokens"`
	// Unpriced: the pricing table does not know the model, so Micros is 0
	// and a lower bound.
	Unpriced bool `json:"unpriced,omitempty"`
}

// maxModels bounds Spend.Models: a run that called more models keeps the
// first ones; the totals still hold every call.
const maxModels = 16

// Timings are the phases of one attempt, in milliseconds.
type Timings struct {
	// EnqueuedAt is when the job entered its queue (the queue's own
	// timestamp); QueuedMs the time from there to this attempt's pickup.
	EnqueuedAt time.Time `json:"enqueuedAt,omitzero"`
	QueuedMs   int64     `json:"queuedMs"`
	// GatesMs is the time the job waited in each gate before this attempt
	// ran, by the gate's reason (scope-busy, pause-window, thread-busy...).
	GatesMs map[Reason]int64 `json:"gatesMs,omitempty"`
	// SetupMs is the setup phase (omitted when there was none), AgentMs the
	// agent's container from start to exit.
	SetupMs int64 `json:"setupMs,omitempty"`
	AgentMs int64 `json:"agentMs"`
}

// maxGates bounds Timings.GatesMs.
const maxGates = 32

// ContainerStats is what the runtime measured of the agent's container.
type ContainerStats struct {
	// PeakMemoryBytes is the container's highest memory use; CPUMillis the
	// CPU time it used, both as the runtime reported them.
	PeakMemoryBytes int64 `json:"peakMemoryBytes"`
	CPUMillis       int64 `json:"cpuMillis"`
	// OOMKilled: the kernel killed the container for memory.
	OOMKilled bool `json:"oomKilled,omitempty"`
}

// Pull request states a run's pull request can reach after the run.
const (
	PullRequestOpen   = "open"
	PullRequestMerged = "merged"
	PullRequestClosed = "closed" // closed without merge
)

// PullRequestOutcome is what became of a run's pull request after the run,
// as the forge later reported it (the receiver follows the project's pull
// requests). It is joined to records when they are read, never written by
// the job.
type PullRequestOutcome struct {
	State string `json:"state"`
	// HumanCommits counts commits pushed to the branch by someone other
	// than the project after the run.
	HumanCommits int       `json:"humanCommits,omitempty"`
	UpdatedAt    time.Time `json:"updatedAt"`
}

// Validate checks an outcome read back from Valkey.
func (o PullRequestOutcome) Validate() error {
	switch {
	case o.State != PullRequestOpen && o.State != PullRequestMerged && o.State != PullRequestClosed:
		return check.Field("pullRequest.state", "must be open, merged or closed")
	case o.HumanCommits < 0 || o.HumanCommits > 1<<20:
		return check.Field("pullRequest.humanCommits", "must be 0 to %d", 1<<20)
	case o.UpdatedAt.IsZero():
		return check.Field("pullRequest.updatedAt", "required")
	}
	return nil
}

func (s Spend) validateModels() error {
	if len(s.Models) > maxModels {
		return check.Field("spend.models", "at most %d models", maxModels)
	}
	for _, m := range s.Models {
		t := m.Tokens
		switch {
		case check.Text(m.Provider, 100) != "" || strings.ContainsFunc(m.Provider, isControl),
			check.Text(m.Model, 200) != "" || strings.ContainsFunc(m.Model, isControl):
			return check.Field("spend.models", "provider and model are short names without control characters")
		case m.Calls < 0 || m.Micros < 0 || t.Input < 0 || t.Output < 0 || t.CacheRead < 0 || t.CacheWrite < 0:
			return check.Field("spend.models", "counts must not be negative")
		case m.Micros > s.Micros:
			return check.Field("spend.models", "a model's micros exceed the run's")
		}
	}
	return nil
}

func (t Timings) validate() error {
	if t.QueuedMs < 0 || t.SetupMs < 0 || t.AgentMs < 0 {
		return check.Field("timings", "durations must not be negative")
	}
	if len(t.GatesMs) > maxGates {
		return check.Field("timings.gatesMs", "at most %d gates", maxGates)
	}
	for r, ms := range t.GatesMs {
		if ms < 0 || check.Text(string(r), 100) != "" || strings.ContainsFunc(string(r), isControl) {
			return check.Field("timings.gatesMs", "gate names are short reasons with durations not negative")
		}
	}
	return nil
}

func (c ContainerStats) validate() error {
	if c.PeakMemoryBytes < 0 || c.CPUMillis < 0 {
		return check.Field("container", "measurements must not be negative")
	}
	return nil
}

func (r Record) validateUsage() error {
	if r.Timings != nil {
		if err := r.Timings.validate(); err != nil {
			return err
		}
	}
	if r.Container != nil {
		if err := r.Container.validate(); err != nil {
			return err
		}
	}
	if r.PullRequest != nil {
		return r.PullRequest.Validate()
	}
	return nil
}

// Prediction is what a run was expected to cost from the history of runs
// like it, when it was admitted.
type Prediction struct {
	// ExpectedMicros is the mean and P90Micros the 90th percentile of the
	// cost per run of the history it was drawn from.
	ExpectedMicros int64 `json:"expectedMicros"`
	P90Micros      int64 `json:"p90Micros"`
	// Basis names that history: "trigger+flow+repo", "trigger+flow" or
	// "trigger" (the narrowest with enough runs), and Runs its size.
	Basis string `json:"basis"`
	Runs  int    `json:"runs"`
}

func (p *Prediction) validate() error {
	if p == nil {
		return nil
	}
	if p.ExpectedMicros < 0 || p.P90Micros < 0 || p.Runs < 0 || check.Text(p.Basis, 64) != "" || strings.ContainsFunc(p.Basis, isControl) {
		return check.Field("predicted", "costs and runs not negative, basis a short name")
	}
	return nil
}
