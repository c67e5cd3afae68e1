package stack_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pidispatch/pidispatch/enqueue"
	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/internal/image/jobimage"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest/liveworker"
	"github.com/pidispatch/pidispatch/jobs"
)

// A real worker on Valkey and Docker records what its jobs' containers
// used and where their time went: a job holding 64 MiB for 3 s, and one
// killed for memory past its 256 MiB.
func TestLiveRecordsContainerUse(t *testing.T) {
	db := livetest.Valkey(t)
	// The image under a tag of this program's own source: a tree that
	// rebuilds the shared test tag meanwhile does not swap it.
	tag := "pidispatch-test-job:usage-" + jobimage.SourceDigest()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	require.NoError(t, jobimage.Ensure(ctx, livetest.Docker(t), tag))
	logs, name := t.TempDir(), "usage-worker-1"
	liveworker.Boot(t, db, name, map[string]string{"PI_LOGS_DIR": logs, "PI_JOB_IMAGE": tag, "PI_JOB_MEMORY": "256m"})
	p, err := enqueue.NewProducer(db.Client, enqueue.ProducerConfig{UnsignedQueues: []string{fleet.EveryQueue}, WorkerName: name, WorkerNameDeclared: true, Attempts: 1})
	require.NoError(t, err)

	record := func(task string) jobs.Record {
		e, err := p.EnqueueLocal(context.Background(), jobs.Job{Folder: t.TempDir(), Flow: "fix", Task: task})
		require.NoError(t, err)
		require.Eventually(t, func() bool {
			recs, err := jobs.ReadRecords(logs, e.JobID)
			return err == nil && len(recs) == 1
		}, 90*time.Second, 200*time.Millisecond, "no record of %s", e.JobID)
		recs, _ := jobs.ReadRecords(logs, e.JobID)
		return recs[0]
	}

	held := record("JOB_ALLOC_BYTES=67108864\nJOB_SLEEP=3s\nhold 64 MiB")
	require.Equal(t, jobs.OutcomeCompleted, held.Outcome)
	require.NotNil(t, held.Container)
	require.GreaterOrEqual(t, held.Container.PeakMemoryBytes, int64(64<<20))
	require.Positive(t, held.Container.CPUMillis)
	require.False(t, held.Container.OOMKilled)
	require.NotNil(t, held.Timings)
	require.GreaterOrEqual(t, held.Timings.AgentMs, int64(3000))
	require.False(t, held.Timings.EnqueuedAt.IsZero())
	require.False(t, held.Timings.EnqueuedAt.After(held.StartedAt))
	t.Logf("container %+v, timings %+v", *held.Container, *held.Timings)

	killed := record("JOB_ALLOC_BYTES=536870912\nJOB_SLEEP=3s\nhold 512 MiB")
	require.NotNil(t, killed.Container)
	require.True(t, killed.Container.OOMKilled, "record %+v", killed)
	require.GreaterOrEqual(t, killed.Container.PeakMemoryBytes, int64(256<<20))
	require.NotEqual(t, jobs.OutcomeCompleted, killed.Outcome)
	t.Logf("killed: %s/%s, container %+v", killed.Outcome, killed.Reason, *killed.Container)
}
