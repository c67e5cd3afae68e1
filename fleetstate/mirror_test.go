package fleetstate

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/internal/testkit/logtest"
	"github.com/pidispatch/pidispatch/jobs"
)

// mirrorRec is a valid record that ended at ended.
func mirrorRec(id string, ended time.Time) jobs.Record {
	code := 0
	return jobs.Record{
		JobID:     id,
		Kind:      jobs.KindLocal,
		Target:    "local:web",
		Flow:      "fix",
		StartedAt: ended.Add(-time.Minute),
		EndedAt:   ended,
		Outcome:   jobs.OutcomeCompleted,
		Reason:    jobs.ReasonCompleted,
		ExitCode:  &code,
		Attempt:   1,
		Host:      "alpha",
		Image:     "pi-job:latest",
		Telemetry: json.RawMessage(`{ "event": "exit", "turns": 3 }`),
	}
}

func mirrorPTTL(t *testing.T, c *redis.Client, key string) time.Duration {
	t.Helper()
	d, err := c.PTTL(context.Background(), key).Result()
	require.NoError(t, err)
	return d
}

func TestMirrorWritesTheRecordWithItsWindow(t *testing.T) {
	t.Parallel()
	db := livetest.Valkey(t)
	ctx := context.Background()
	m := NewMirror(db.Client, MirrorConfig{RetentionDays: 1, Host: "alpha"})
	ended := time.Now().Add(-time.Hour)
	rec := mirrorRec("repeat:cron/1", ended)
	require.NoError(t, m.Mirror(ctx, rec))

	member := jobs.SanitizeJobID("repeat:cron/1") + ".attempt-1"
	body, err := db.Client.Get(ctx, "runs:rec:"+member).Result()
	require.NoError(t, err)
	var got jobs.Record
	require.NoError(t, json.Unmarshal([]byte(body), &got))
	require.Equal(t, rec.JobID, got.JobID)
	require.Equal(t, rec.EndedAt.UTC().Truncate(time.Millisecond), got.EndedAt)
	require.JSONEq(t, `{"event":"exit","turns":3}`, string(got.Telemetry))
	require.NotContains(t, body, "\n", "compacted, as the file")

	const window = 24 * time.Hour
	for _, k := range []string{"runs:rec:" + member, RunIndexKey} {
		pttl := mirrorPTTL(t, db.Client, k)
		require.Greater(t, pttl, window-time.Minute, k)
		require.LessOrEqual(t, pttl, window, k)
	}
	score, err := db.Client.ZScore(ctx, RunIndexKey, member).Result()
	require.NoError(t, err)
	require.Equal(t, float64(ended.UnixMilli()), score)

	// The window is min(days, 92), and 0 counts as 92.
	for i, days := range []int{0, 400, 92, -3} {
		m := NewMirror(db.Client, MirrorConfig{RetentionDays: days})
		id := "w" + strconv.Itoa(i)
		require.NoError(t, m.Mirror(ctx, mirrorRec(id, time.Now())))
		pttl := mirrorPTTL(t, db.Client, RunRecordKey("", id, 1))
		require.Greater(t, pttl, 92*24*time.Hour-time.Minute, "days %d", days)
		require.LessOrEqual(t, pttl, 92*24*time.Hour, "days %d", days)
	}
}

// Every attempt of a job is mirrored under its own key, and ids the old
// mapping merged ("X:coll:1", "X-coll-1") are two runs, not one.
func TestMirrorKeepsEveryAttempt(t *testing.T) {
	t.Parallel()
	db := livetest.Valkey(t)
	ctx := context.Background()
	m := NewMirror(db.Client, MirrorConfig{})
	base := time.Now().Add(-time.Hour)
	first := mirrorRec("X:coll:1", base)
	first.Outcome, first.Reason = jobs.OutcomeFailed, jobs.ReasonExit1
	require.NoError(t, m.Mirror(ctx, first))
	second := mirrorRec("X:coll:1", base.Add(time.Minute))
	second.Attempt = 2
	require.NoError(t, m.Mirror(ctx, second))
	require.NoError(t, m.Mirror(ctx, second)) // the same attempt again: one run
	require.NoError(t, m.Mirror(ctx, mirrorRec("X-coll-1", base.Add(2*time.Minute))))

	runs, _, err := m.Read(ctx, 10, time.Time{})
	require.NoError(t, err)
	require.Len(t, runs, 3)
	require.Equal(t, "X-coll-1", runs[0].JobID)
	require.Equal(t, []int{2, 1}, []int{runs[1].Attempt, runs[2].Attempt})
	require.Equal(t, jobs.ReasonExit1, runs[2].Reason, "the retry kept the first attempt's record")
}

func TestMirrorTrimsTheIndexByCount(t *testing.T) {
	t.Parallel()
	db := livetest.Valkey(t)
	ctx := context.Background()
	m := NewMirror(db.Client, MirrorConfig{IndexMax: 3})
	base := time.Now().Add(-time.Hour)
	for i := range 5 {
		require.NoError(t, m.Mirror(ctx, mirrorRec("r"+strconv.Itoa(i), base.Add(time.Duration(i)*time.Minute))))
	}
	members, err := db.Client.ZRange(ctx, RunIndexKey, 0, -1).Result()
	require.NoError(t, err)
	require.Equal(t, []string{"r2.attempt-1", "r3.attempt-1", "r4.attempt-1"}, members, "the newest three")
}

func TestMirrorTrimsTheIndexByAge(t *testing.T) {
	t.Parallel()
	db := livetest.Valkey(t)
	ctx := context.Background()
	m := NewMirror(db.Client, MirrorConfig{RetentionDays: 1})
	now := time.Now()
	require.NoError(t, db.Client.ZAdd(ctx, RunIndexKey,
		redis.Z{Score: float64(now.Add(-49 * time.Hour).UnixMilli()), Member: "stale"},
		redis.Z{Score: float64(now.Add(-23 * time.Hour).UnixMilli()), Member: "recent"},
	).Err())
	require.NoError(t, m.Mirror(ctx, mirrorRec("fresh", now)))
	members, err := db.Client.ZRange(ctx, RunIndexKey, 0, -1).Result()
	require.NoError(t, err)
	require.Equal(t, []string{"recent", "fresh.attempt-1"}, members)

	// A record that ended before the window is not mirrored at all.
	require.NoError(t, m.Mirror(ctx, mirrorRec("old", now.Add(-25*time.Hour))))
	n, err := db.Client.Exists(ctx, RunRecordKey("", "old", 1)).Result()
	require.NoError(t, err)
	require.Zero(t, n)
	_, err = db.Client.ZScore(ctx, RunIndexKey, "old.attempt-1").Result()
	require.ErrorIs(t, err, redis.Nil)
}

func TestMirrorRefusesAnInvalidRecord(t *testing.T) {
	t.Parallel()
	db := livetest.Valkey(t)
	ctx := context.Background()
	var logs logtest.Buffer
	m := NewMirror(db.Client, MirrorConfig{Logger: logs.Logger()})
	for name, mutate := range map[string]func(*jobs.Record){
		"EmptyID":     func(r *jobs.Record) { r.JobID = "" },
		"NULInID":     func(r *jobs.Record) { r.JobID = "a\x00b" },
		"InvalidUTF8": func(r *jobs.Record) { r.Target = "\xff\xfe" },
		"FreeReason":  func(r *jobs.Record) { r.Reason = "the token was sk-123" },
		"HugeTelem": func(r *jobs.Record) {
			r.Telemetry = json.RawMessage(`{"x":"` + strings.Repeat("a", jobs.MaxTelemetryBytes) + `"}`)
		},
		"BadHost": func(r *jobs.Record) { r.Host = "" },
	} {
		rec := mirrorRec("bad", time.Now())
		mutate(&rec)
		err := m.Mirror(ctx, rec)
		require.Error(t, err, name)
		require.NotErrorIs(t, err, ErrMirrorUnreachable, name)
	}
	n, err := db.Client.DBSize(ctx).Result()
	require.NoError(t, err)
	require.Zero(t, n, "nothing written")
	require.Zero(t, logs.Count(t, "run_mirror_failed"), "an invalid record is not an outage")
}

func TestMirrorReadNewestFirstAndPrunesJunk(t *testing.T) {
	t.Parallel()
	db := livetest.Valkey(t)
	ctx := context.Background()
	m := NewMirror(db.Client, MirrorConfig{Host: "alpha"})
	base := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	for i := range 4 {
		require.NoError(t, m.Mirror(ctx, mirrorRec("r"+strconv.Itoa(i), base.Add(time.Duration(i)*time.Minute))))
	}
	// Junk a peer could leave: a member without a body, a body that is not
	// JSON, a JSON body that is not a valid record, a body of another type.
	score := func(min int) float64 { return float64(base.Add(time.Duration(min) * time.Minute).UnixMilli()) }
	require.NoError(t, db.Client.ZAdd(ctx, RunIndexKey,
		redis.Z{Score: score(10), Member: "nobody"},
		redis.Z{Score: score(11), Member: "notjson"},
		redis.Z{Score: score(12), Member: "invalid"},
		redis.Z{Score: score(13), Member: "hash"},
	).Err())
	require.NoError(t, db.Client.Set(ctx, runRecordPrefix+"notjson", "\x00{not json", 0).Err())
	require.NoError(t, db.Client.Set(ctx, runRecordPrefix+"invalid", `{"jobId":"invalid","outcome":"exploded"}`, 0).Err())
	require.NoError(t, db.Client.HSet(ctx, runRecordPrefix+"hash", "a", "b").Err())

	runs, degraded, err := m.Read(ctx, 10, time.Time{})
	require.NoError(t, err)
	require.Equal(t, MirrorOK, degraded)
	ids := make([]string, len(runs))
	for i, r := range runs {
		ids[i] = r.JobID
	}
	require.Equal(t, []string{"r3", "r2", "r1", "r0"}, ids, "newest first, junk skipped")
	require.Equal(t, base.Add(3*time.Minute).UTC(), runs[0].EndedAt)

	members, err := db.Client.ZRange(ctx, RunIndexKey, 0, -1).Result()
	require.NoError(t, err)
	require.Equal(t, []string{"r0.attempt-1", "r1.attempt-1", "r2.attempt-1", "r3.attempt-1"}, members, "junk pruned from the index")

	// since is exclusive.
	runs, degraded, err = m.Read(ctx, 10, base.Add(time.Minute))
	require.NoError(t, err)
	require.Equal(t, MirrorOK, degraded)
	require.Len(t, runs, 2)
	require.Equal(t, "r3", runs[0].JobID)
	require.Equal(t, "r2", runs[1].JobID)

	// A limit below the matches truncates.
	runs, degraded, err = m.Read(ctx, 3, time.Time{})
	require.NoError(t, err)
	require.Equal(t, MirrorTruncated, degraded)
	require.Len(t, runs, 3)
	require.Equal(t, "r3", runs[0].JobID)
}

func TestMirrorReadDegraded(t *testing.T) {
	t.Parallel()
	db := livetest.Valkey(t)
	ctx := context.Background()
	m := NewMirror(db.Client, MirrorConfig{IndexMax: 3})

	runs, degraded, err := m.Read(ctx, 0, time.Time{})
	require.NoError(t, err)
	require.Equal(t, MirrorOff, degraded, "no index")
	require.Empty(t, runs)

	base := time.Now().Add(-time.Hour)
	for i := range 5 {
		require.NoError(t, m.Mirror(ctx, mirrorRec("r"+strconv.Itoa(i), base.Add(time.Duration(i)*time.Minute))))
	}
	// The index is full and its oldest run is newer than since: runs between
	// since and it were dropped by the size cap.
	runs, degraded, err = m.Read(ctx, 10, base)
	require.NoError(t, err)
	require.Equal(t, MirrorTruncated, degraded)
	require.Len(t, runs, 3)
	// Asking only for what the index still covers is complete.
	runs, degraded, err = m.Read(ctx, 10, base.Add(2*time.Minute))
	require.NoError(t, err)
	require.Equal(t, MirrorOK, degraded)
	require.Len(t, runs, 2)

	srv := livetest.StartServer(t)
	down := NewMirror(srv.Client(), MirrorConfig{CallTimeout: 300 * time.Millisecond})
	srv.Stop()
	began := time.Now()
	runs, degraded, err = down.Read(ctx, 10, time.Time{})
	require.ErrorIs(t, err, ErrMirrorUnreachable)
	require.Nil(t, runs)
	require.True(t, strings.HasPrefix(degraded, "unreachable ("), degraded)
	require.Less(t, time.Since(began), 10*300*time.Millisecond, "a hang-catching bound, 10x the call timeout")
}

func TestMirrorFailureLoggedOncePerTransition(t *testing.T) {
	t.Parallel()
	srv := livetest.StartServer(t)
	ctx := context.Background()
	var logs logtest.Buffer
	m := NewMirror(srv.Client(), MirrorConfig{CallTimeout: 300 * time.Millisecond, Logger: logs.Logger(), Host: "alpha"})

	require.NoError(t, m.Mirror(ctx, mirrorRec("a", time.Now())))
	srv.Stop()
	for i := range 3 {
		require.ErrorIs(t, m.Mirror(ctx, mirrorRec("b"+strconv.Itoa(i), time.Now())), ErrMirrorUnreachable)
	}
	require.Equal(t, 1, logs.Count(t, "run_mirror_failed"), logs.String())
	require.Zero(t, logs.Count(t, "run_mirror_restored"))

	srv.Start()
	require.Eventually(t, func() bool { return m.Mirror(ctx, mirrorRec("c", time.Now())) == nil }, 5*time.Second, 50*time.Millisecond)
	require.NoError(t, m.Mirror(ctx, mirrorRec("d", time.Now())))
	require.Equal(t, 1, logs.Count(t, "run_mirror_failed"), logs.String())
	require.Equal(t, 1, logs.Count(t, "run_mirror_restored"), logs.String())
	require.Equal(t, 2, strings.Count(logs.String(), `"host":"alpha"`), "every line names the host")

	srv.Stop()
	require.Error(t, m.Mirror(ctx, mirrorRec("e", time.Now())))
	require.Equal(t, 2, logs.Count(t, "run_mirror_failed"), "a second outage is a second transition")
}

// Not parallel: it counts the process's goroutines.
func TestMirrorGoAndClose(t *testing.T) {
	db := livetest.Valkey(t)
	ctx := context.Background()
	before := runtime.NumGoroutine()
	m := NewMirror(db.Client, MirrorConfig{})
	for i := range 20 {
		m.Go(context.Background(), mirrorRec(fmt.Sprintf("g%02d", i), time.Now()))
	}
	require.NoError(t, m.Close(ctx))
	n, err := db.Client.ZCard(ctx, RunIndexKey).Result()
	require.NoError(t, err)
	require.EqualValues(t, 20, n, "Close waited for every mirror in flight")

	m.Go(context.Background(), mirrorRec("late", time.Now()))
	require.NoError(t, m.Close(ctx))
	_, err = db.Client.ZScore(ctx, RunIndexKey, "late").Result()
	require.ErrorIs(t, err, redis.Nil, "Go after Close does nothing")
	expired, stop := context.WithTimeout(context.Background(), 0)
	defer stop()
	require.NoError(t, m.inflight.Wait(expired), "nothing in flight after Close")
	budgetWaitGoroutines(t, before)
}

func TestMirrorCloseIsBoundedByItsContext(t *testing.T) {
	t.Parallel()
	srv := livetest.StartServer(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr(), DialTimeout: 200 * time.Millisecond, MaxRetries: -1})
	defer client.Close()
	srv.Stop()
	m := NewMirror(client, MirrorConfig{CallTimeout: 400 * time.Millisecond})
	m.Go(context.Background(), mirrorRec("x", time.Now()))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, m.Close(ctx), context.DeadlineExceeded, "a mirror still in flight")
	require.NoError(t, m.Close(context.Background()), "and it ends within its bound")
}

// ExampleMirror shows a named worker mirroring each run record after writing
// its file, and a status command listing the fleet's recent runs.
func ExampleMirror() {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer client.Close()
	m := NewMirror(client, MirrorConfig{RetentionDays: 30, Host: "alpha"})
	defer m.Close(context.Background())

	// After WriteRecord: never awaited, never failing the job.
	m.Go(context.Background(), jobs.Record{ /* ... */ })

	runs, degraded, _ := m.Read(context.Background(), 50, time.Now().Add(-7*24*time.Hour))
	fmt.Println(len(runs), "runs across the fleet; mirror", degraded)
}
