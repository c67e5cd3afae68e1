package operator_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/fleetstate"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/jobs"
	"github.com/pidispatch/pidispatch/operator"
	"github.com/pidispatch/pidispatch/queue"
	"github.com/pidispatch/pidispatch/registry"
)

func ms(d time.Duration) *int64 {
	v := d.Milliseconds()
	return &v
}

func endedRec(host, id string, end time.Time) jobs.Record {
	exit := 0
	return jobs.Record{JobID: id, Kind: jobs.KindManual, Target: "/src", Flow: "fix",
		StartedAt: end.Add(-time.Minute), EndedAt: end, Outcome: jobs.OutcomeCompleted,
		Reason: jobs.ReasonCompleted, ExitCode: &exit, Attempt: 1, Host: host, Image: "pi-job:test"}
}

// The arithmetic: slots from the rows, busy by the worker holding each job,
// waiting per queue, and drain times at the window's completion rate; a
// host with waiting jobs and no finished run has no drain time, and an
// untrusted row adds no slots.
func TestComputeCapacity(t *testing.T) {
	now := time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC)
	in := operator.CapacityInput{
		Now:    now,
		Window: 30 * time.Minute,
		Hosts: []registry.Host{
			{Name: "beta", Concurrency: 4},
			{Name: "alpha", Concurrency: 2},
			{Name: "gamma", Concurrency: 8, Untrusted: true},
		},
		Queues: []operator.QueueCapacity{
			{Queue: fleet.SharedQueue, Waiting: 6, Delayed: 2, Active: 2},
			{Queue: fleet.HostQueueName("alpha"), Waiting: 3, Active: 1},
			{Queue: fleet.HostQueueName("beta"), Waiting: 5},
		},
		Active: []operator.ActiveJob{
			{Queue: fleet.SharedQueue, Host: "alpha"}, {Queue: fleet.SharedQueue, Host: "ghost"},
			{Queue: fleet.HostQueueName("alpha"), Host: "alpha"},
		},
		Records: []jobs.Record{
			endedRec("alpha", "a1", now.Add(-time.Minute)),
			endedRec("alpha", "a2", now.Add(-20*time.Minute)),
			endedRec("gamma", "g1", now.Add(-29*time.Minute)),
			endedRec("alpha", "old", now.Add(-31*time.Minute)), // before the window
			endedRec("beta", "later", now.Add(time.Second)),    // after now
		},
	}
	rep := operator.ComputeCapacity(in)
	require.Equal(t, now, rep.At)
	require.Equal(t, int64(30*60*1000), rep.WindowMs)
	require.Equal(t, 6, rep.Slots, "alpha and beta; gamma is untrusted")
	require.Equal(t, 3, rep.Busy)
	require.Equal(t, 1, rep.Unattributed, "held by no live host")
	require.InDelta(t, 0.5, rep.BusyShare, 1e-9)
	require.Equal(t, int64(14), rep.Waiting)
	require.Equal(t, int64(2), rep.Delayed)
	require.Equal(t, 3, rep.Finished)
	require.InDelta(t, 6.0, rep.PerHour, 1e-9)
	require.Equal(t, ms(14*10*time.Minute), rep.DrainMs, "14 jobs at one per 10 minutes")

	require.Len(t, rep.Hosts, 3)
	alpha, beta, gamma := rep.Hosts[0], rep.Hosts[1], rep.Hosts[2]
	require.Equal(t, operator.HostCapacity{Name: "alpha", Slots: 2, Busy: 2, BusyShare: 1, Waiting: 3,
		Finished: 2, PerHour: 4, DrainMs: ms(45 * time.Minute)}, alpha)
	require.Equal(t, "beta", beta.Name)
	require.Equal(t, int64(5), beta.Waiting)
	require.Nil(t, beta.DrainMs, "jobs wait and no run of beta ended in the window")
	require.Equal(t, 0.0, beta.BusyShare)
	require.True(t, gamma.Untrusted)
	require.Equal(t, ms(0), gamma.DrainMs, "nothing waits on gamma's queue")

	// Nothing finished and something waits: no fleet drain time.
	in.Records = nil
	require.Nil(t, operator.ComputeCapacity(in).DrainMs)
}

// Capacity over a real Valkey: two registry rows, jobs waiting on the
// shared queue and one host's queue, one job held, and the run mirror's
// records of the last hour give the figures computed by hand.
func TestCapacityLive(t *testing.T) {
	db := livetest.Valkey(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for name, slots := range map[string]int{"cap-alpha": 2, "cap-beta": 3} {
		reg, err := registry.New(db.Client, name, registry.Facts{Routes: registry.Value(true), Concurrency: registry.Value(slots)}, registry.Config{})
		require.NoError(t, err)
		require.NoError(t, reg.Start(ctx))
		t.Cleanup(func() { _ = reg.Close(context.Background()) })
	}
	add := func(qname, id string, opts queue.AddOptions, worker string) *queue.Queue {
		q, err := queue.New(db.Client, qname, queue.Config{WorkerName: worker})
		require.NoError(t, err)
		require.NoError(t, q.Declare(ctx))
		opts.JobID = id
		_, _, err = q.Add(ctx, "pi", json.RawMessage(`{}`), opts)
		require.NoError(t, err)
		return q
	}
	var shared *queue.Queue
	for _, id := range []string{"s1", "s2", "s3"} {
		shared = add(fleet.SharedQueue, id, queue.AddOptions{}, "cap-alpha")
	}
	add(fleet.SharedQueue, "later", queue.AddOptions{Delay: time.Hour}, "")
	for _, id := range []string{"a1", "a2", "a3"} {
		add(fleet.HostQueueName("cap-alpha"), id, queue.AddOptions{}, "")
	}
	j, err := shared.Fetch(ctx, queue.NewToken())
	require.NoError(t, err)
	require.NotNil(t, j)

	now := time.Now().UTC().Truncate(time.Millisecond)
	mirror := fleetstate.NewMirror(db.Client, fleetstate.MirrorConfig{})
	for i, r := range []jobs.Record{
		endedRec("cap-alpha", "r1", now.Add(-5*time.Minute)),
		endedRec("cap-alpha", "r2", now.Add(-15*time.Minute)),
		endedRec("cap-alpha", "r3", now.Add(-25*time.Minute)),
		endedRec("cap-beta", "r4", now.Add(-35*time.Minute)),
		endedRec("cap-beta", "r5", now.Add(-2*time.Hour)), // outside the hour
	} {
		require.NoError(t, mirror.Mirror(ctx, r), i)
	}

	rep, err := operator.Capacity(ctx, db.Client, operator.CapacityOptions{Now: now})
	require.NoError(t, err)
	require.Equal(t, "mirror", rep.Runs)
	require.Equal(t, 5, rep.Slots)
	require.Equal(t, 1, rep.Busy)
	require.Equal(t, 0, rep.Unattributed)
	require.InDelta(t, 0.2, rep.BusyShare, 1e-9)
	require.Equal(t, int64(5), rep.Waiting, "2 on the shared queue, 3 on cap-alpha's")
	require.Equal(t, int64(1), rep.Delayed)
	require.Equal(t, 4, rep.Finished)
	require.InDelta(t, 4.0, rep.PerHour, 1e-9)
	require.Equal(t, ms(75*time.Minute), rep.DrainMs, "5 jobs at 4 an hour")

	require.Len(t, rep.Hosts, 2)
	require.Equal(t, operator.HostCapacity{Name: "cap-alpha", Slots: 2, Busy: 1, BusyShare: 0.5, Waiting: 3,
		Finished: 3, PerHour: 3, DrainMs: ms(time.Hour)}, rep.Hosts[0])
	require.Equal(t, operator.HostCapacity{Name: "cap-beta", Slots: 3, Finished: 1, PerHour: 1, DrainMs: ms(0)}, rep.Hosts[1])

	byQueue := map[string]operator.QueueCapacity{}
	for _, q := range rep.Queues {
		byQueue[q.Queue] = q
	}
	require.Equal(t, operator.QueueCapacity{Queue: fleet.SharedQueue, Waiting: 2, Delayed: 1, Active: 1}, byQueue[fleet.SharedQueue])
	require.Equal(t, int64(3), byQueue[fleet.HostQueueName("cap-alpha")].Waiting)
}
