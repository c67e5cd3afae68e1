package forge_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pidispatch/pidispatch/enqueue"
	"github.com/pidispatch/pidispatch/forge"
	fixtures "github.com/pidispatch/pidispatch/internal/testkit/forgefixtures"
	"github.com/pidispatch/pidispatch/jobs"
)

// statusLog records the intake's status calls and the enqueues, in order.
type statusLog struct {
	mu     sync.Mutex
	steps  []string
	fail   error
	sameAs string // the job a dedup folds every delivery into ("": none)
}

func (s *statusLog) add(step string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.steps = append(s.steps, step)
}

func (s *statusLog) Queued(_ context.Context, jobID string, _ jobs.Job) error {
	s.add("queued " + jobID)
	return s.fail
}

func (s *statusLog) Duplicate(_ context.Context, jobID string, _ jobs.Job, sameAs string) error {
	s.add("duplicate " + jobID + " of " + sameAs)
	return nil
}

func (s *statusLog) EnqueueForge(_ context.Context, d enqueue.ForgeDelivery) (enqueue.Enqueued, error) {
	s.add("enqueue " + d.JobID)
	if s.sameAs != "" {
		return enqueue.Enqueued{JobID: s.sameAs, Queue: "pi-jobs"}, nil
	}
	return enqueue.Enqueued{JobID: d.JobID, Queue: "pi-jobs", Added: true}, nil
}

func statusIntake(t *testing.T, s *statusLog, allow bool) *forge.Intake {
	t.Helper()
	in, err := forge.NewIntake(forge.IntakeConfig{
		Enqueuer: s, Status: s, Permissions: map[jobs.Forge]forge.Permissions{jobs.ForgeGitHub: &fakePerms{allow: allow}},
		Logger: slog.New(slog.NewJSONHandler(&bytes.Buffer{}, nil)), Host: "h1",
		Now: func() time.Time { return time.Date(2026, 12, 7, 4, 0, 0, 0, time.UTC) },
	})
	require.NoError(t, err)
	in.SetTriggers(triggers(t, triggersFile))
	return in
}

// An accepted job's queued status comment is written before the job is
// enqueued, so no worker can take the job and write a comment of its own
// first; a refused event gets none; a delivery folded into a job queued
// already says so in its comment; a comment that could not be written holds
// nothing back.
func TestIntakeWritesQueuedStatusBeforeEnqueue(t *testing.T) {
	ev, err := forge.ParseGitHub("issue_comment", "d-q1", fixtures.GitHub(t, "issue_comment", "created", 0))
	require.NoError(t, err)

	s := &statusLog{}
	out, err := statusIntake(t, s, true).Handle(context.Background(), ev)
	require.NoError(t, err)
	require.Equal(t, forge.StatusEnqueued, out.Status)
	assert.Equal(t, []string{"queued gh-d-q1", "enqueue gh-d-q1"}, s.steps)

	s = &statusLog{}
	out, err = statusIntake(t, s, false).Handle(context.Background(), ev)
	require.NoError(t, err)
	require.Equal(t, forge.StatusRefused, out.Status)
	assert.Empty(t, s.steps, "a refused event gets no comment")

	s = &statusLog{sameAs: "gh-d-earlier"}
	_, err = statusIntake(t, s, true).Handle(context.Background(), ev)
	require.NoError(t, err)
	assert.Equal(t, []string{"queued gh-d-q1", "enqueue gh-d-q1", "duplicate gh-d-q1 of gh-d-earlier"}, s.steps)

	s = &statusLog{fail: errors.New("forge down"), sameAs: "gh-d-earlier"}
	out, err = statusIntake(t, s, true).Handle(context.Background(), ev)
	require.NoError(t, err)
	require.Equal(t, forge.StatusEnqueued, out.Status)
	assert.Equal(t, []string{"queued gh-d-q1", "enqueue gh-d-q1"}, s.steps, "no comment was written: none to say duplicate in")
}
