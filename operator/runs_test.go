package operator_test

import (
	"cmp"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/pidispatch/pidispatch/fleet"

	"github.com/redis/go-redis/v9"

	"github.com/pidispatch/pidispatch/fleetstate"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/jobs"
	"github.com/pidispatch/pidispatch/operator"
)

// runRecords are five runs over three hosts, ended 1..5 hours ago.
func runRecords(now time.Time) []jobs.Record {
	at := func(h int) time.Time { return now.Add(-time.Duration(h) * time.Hour).Truncate(time.Millisecond) }
	rec := func(id, host, outcome string, reason jobs.Reason, attempt, h int, dollars float64) jobs.Record {
		r := jobs.Record{JobID: id, Kind: jobs.KindForge, Target: "acme/app", Flow: "fix", StartedAt: at(h).Add(-time.Minute), EndedAt: at(h),
			Outcome: outcome, Reason: reason, Attempt: attempt, Host: host}
		if dollars > 0 {
			r.Spend = &jobs.Spend{Dollars: dollars, Micros: int64(dollars * 1e6), Basis: jobs.BasisMetered, Calls: 1}
		}
		return r
	}
	return []jobs.Record{
		rec("r-1", "alpha", jobs.OutcomeCompleted, jobs.ReasonCompleted, 1, 1, 0.25),
		rec("r-2", "beta", jobs.OutcomeFailed, jobs.ReasonExit1, 1, 2, 0.5),
		rec("r-2", "beta", jobs.OutcomeCompleted, jobs.ReasonCompleted, 2, 1, 1),
		rec("r-3", "gamma", jobs.OutcomePolicy, jobs.ReasonOverBudget, 1, 4, 0),
		rec("r-4", "alpha", jobs.OutcomeCompleted, jobs.ReasonCompleted, 1, 5, 0),
	}
}

// Runs reads the mirror, filters, sums, and skips what does not validate.
func TestRunsFromTheMirror(t *testing.T) {
	db := livetest.Valkey(t)
	ctx := context.Background()
	now := time.Now()
	m := fleetstate.NewMirror(db.Client, fleetstate.MirrorConfig{})
	for _, r := range runRecords(now) {
		if err := m.Mirror(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	// A hostile peer's row: indexed, but not a valid record.
	if err := db.Client.Set(ctx, fleetstate.RunRecordKey(fleet.SharedQueue, "evil", 1), `{"jobId":"evil","outcome":"completed","reason":"nope"}`, 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := db.Client.ZAdd(ctx, fleetstate.RunIndexKey, redisZ(now.UnixMilli(), jobs.RecordMember(fleet.SharedQueue, "evil", 1))).Err(); err != nil {
		t.Fatal(err)
	}
	recs, tot, err := operator.Runs(ctx, db.Client, operator.RunsFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if tot.Source != operator.RunsFromMirror || tot.Runs != 5 || tot.Jobs != 4 || tot.Invalid != 1 || tot.Dollars != 1.75 || tot.Priced != 3 ||
		tot.ByOutcome[jobs.OutcomeCompleted] != 3 || tot.ByOutcome[jobs.OutcomeFailed] != 1 || len(recs) != 5 || recs[4].JobID != "r-4" {
		t.Fatalf("all: %+v %+v", tot, recs)
	}
	for _, tc := range []struct {
		f    operator.RunsFilter
		runs int
	}{
		{operator.RunsFilter{Host: "beta"}, 2},
		{operator.RunsFilter{Outcome: jobs.OutcomeCompleted}, 3},
		{operator.RunsFilter{Reason: string(jobs.ReasonOverBudget)}, 1},
		{operator.RunsFilter{Target: "acme/app"}, 5},
		{operator.RunsFilter{Target: "other/repo"}, 0},
		{operator.RunsFilter{Since: now.Add(-3 * time.Hour)}, 3},
		{operator.RunsFilter{Until: now.Add(-3 * time.Hour)}, 2},
		{operator.RunsFilter{Limit: 2}, 5},
	} {
		recs, tot, err := operator.Runs(ctx, db.Client, tc.f)
		limit := cmp.Or(tc.f.Limit, operator.DefaultRunsLimit)
		if err != nil || tot.Runs != tc.runs || len(recs) != min(tc.runs, limit) || tot.Shown != len(recs) {
			t.Errorf("%+v: %d runs, %d shown, %v", tc.f, tot.Runs, len(recs), err)
		}
	}
}

// Without a mirror the host's logs dir is read, and says so; a damaged file
// is counted, not shown.
func TestRunsFromTheLogsDir(t *testing.T) {
	db := livetest.Valkey(t)
	ctx := context.Background()
	dir := t.TempDir()
	for _, r := range runRecords(time.Now()) {
		if _, err := jobs.WriteRecord(dir, r); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "junk.attempt-1.json"), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	recs, tot, err := operator.Runs(ctx, db.Client, operator.RunsFilter{LogsDir: dir, Host: "alpha"})
	if err != nil || tot.Source != operator.RunsFromLogsDir || tot.Runs != 2 || tot.Invalid != 1 || len(recs) != 2 || recs[0].JobID != "r-1" {
		t.Fatalf("%+v %+v %v", tot, recs, err)
	}
	recs, tot, err = operator.Runs(ctx, nil, operator.RunsFilter{LogsDir: dir})
	if err != nil || tot.Source != operator.RunsFromLogsDir || tot.Runs != 5 || len(recs) != 5 {
		t.Fatalf("no client: %+v %v", tot, err)
	}
	if _, _, err := operator.Runs(ctx, db.Client, operator.RunsFilter{}); !errors.Is(err, operator.ErrNoRunSource) {
		t.Fatalf("nothing to read: %v", err)
	}
}

// runs never hides runs: once the mirror holds one record (a cancel on an
// unnamed host writes one), the five local records still all show, the
// four the mirror lacks counted local-only.
func TestRunsMergeTheLogsDirWithTheMirror(t *testing.T) {
	db := livetest.Valkey(t)
	ctx := context.Background()
	dir := t.TempDir()
	recs := runRecords(time.Now())
	for _, r := range recs {
		if _, err := jobs.WriteRecord(dir, r); err != nil {
			t.Fatal(err)
		}
	}
	m := fleetstate.NewMirror(db.Client, fleetstate.MirrorConfig{})
	if err := m.Mirror(ctx, recs[0]); err != nil {
		t.Fatal(err)
	}
	other := recs[3]
	other.JobID, other.Host = "cancelled-1", "delta"
	if err := m.Mirror(ctx, other); err != nil {
		t.Fatal(err)
	}
	got, tot, err := operator.Runs(ctx, db.Client, operator.RunsFilter{LogsDir: dir})
	if err != nil || tot.Source != operator.RunsFromMirror || tot.Runs != 6 || tot.LocalOnly != 4 || len(got) != 6 {
		t.Fatalf("%+v %v", tot, err)
	}
	// Filters apply to the local-only count too.
	if _, tot, err := operator.Runs(ctx, db.Client, operator.RunsFilter{LogsDir: dir, Host: "alpha"}); err != nil || tot.Runs != 2 || tot.LocalOnly != 1 {
		t.Fatalf("host alpha: %+v %v", tot, err)
	}
}

func TestParseInstant(t *testing.T) {
	now := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	for in, want := range map[string]time.Time{
		"24h":                  now.Add(-24 * time.Hour),
		"90m":                  now.Add(-90 * time.Minute),
		"7d":                   now.Add(-7 * 24 * time.Hour),
		"2026-05-01T09:00:00Z": time.Date(2026, 5, 1, 9, 0, 0, 0, time.UTC),
	} {
		if got, err := operator.ParseInstant(in, now); err != nil || !got.Equal(want) {
			t.Errorf("%s: %v %v", in, got, err)
		}
	}
	for _, bad := range []string{"", "yesterday", "-1h", "5x"} {
		if _, err := operator.ParseInstant(bad, now); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func redisZ(score int64, member string) redis.Z {
	return redis.Z{Score: float64(score), Member: member}
}
