package fleetstate

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/jobs"
	"github.com/stretchr/testify/require"
)

func TestKeysShapes(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 31, 23, 59, 59, 999e6, time.UTC) // a Thursday
	scope := "/srv/work/web"
	sum := sha256.Sum256([]byte(scope))
	h := hex.EncodeToString(sum[:])[:16]

	require.Equal(t, "budget:2026-12-31", BudgetDayKey(at))
	require.Equal(t, "budget:w:2026-12-28", BudgetWeekKey(at))
	require.Equal(t, "budget:s:"+h+":2026-12-31", BudgetScopeDayKey(scope, at))
	require.Equal(t, "budget:s:"+h+":w:2026-12-28", BudgetScopeWeekKey(scope, at))
	require.Equal(t, "budget:s:"+h+":", budgetScopeDayPrefix(scope))
	require.Equal(t, "budget:s:"+h+":w:", budgetScopeWeekPrefix(scope))
	require.Equal(t, "budget:m:2026-12", BudgetMonthKey(at))
	require.Equal(t, "budget:s:"+h+":m:2026-12", BudgetScopeMonthKey(scope, at))
	require.Equal(t, "budget:s:"+h+":m:", budgetScopeMonthPrefix(scope))
	require.Equal(t, "budget:rel:abc", budgetReleaseKey("abc"))
	require.Equal(t, "runs:rec:gh-1.attempt-2", RunRecordKey("", "gh-1", 2), "the older name, without the queue")
	require.Equal(t, "runs:rec:pi-jobs@w-1+gh-1.attempt-2", RunRecordKey("pi-jobs@w-1", "gh-1", 2))
	require.Equal(t, "runs:claim:pi-jobs+gh-1.attempt-2", RunClaimKey("pi-jobs", "gh-1", 2))
	require.Equal(t, "runs:rec:pi-jobs+"+jobs.SanitizeJobID("repeat_a:b/c")+".attempt-1", RunRecordKey("pi-jobs", "repeat_a:b/c", 1), "the file name, as the record file is named")
	require.Equal(t, strings.TrimSuffix(jobs.RecordName("pi-jobs", "repeat_a:b/c", 1), ".json"), strings.TrimPrefix(RunRecordKey("pi-jobs", "repeat_a:b/c", 1), "runs:rec:"))
	require.Equal(t, "runs:index", RunIndexKey)
	require.Equal(t, "cancel:req:gh-1", CancelRequestKey("gh-1"))
	require.Equal(t, "cancel:ack:gh-1", CancelAckKey("gh-1"))
	require.Equal(t, "pi:paused", PausedKey)
}

func TestKeysScopeHashAgreesWithLease(t *testing.T) {
	t.Parallel()
	for _, scope := range []string{"/srv/a", "owner/name", "", "\x00\xff", "ünï/cødé"} {
		sum := sha256.Sum256([]byte(scope))
		want := hex.EncodeToString(sum[:])[:16]
		require.Equal(t, want, fleet.ScopeHash(scope))
		require.Equal(t, "budget:s:"+want+":", budgetScopeDayPrefix(scope), "scope %q", scope)
	}
}

func TestKeysMondayOfEveryWeekday(t *testing.T) {
	t.Parallel()
	// 2026-11-30 is a Monday; each day of its week, at its first and last
	// millisecond, belongs to that Monday, and the next Monday starts a new week.
	monday := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	require.Equal(t, time.Monday, monday.Weekday())
	for d := range 7 {
		first := monday.AddDate(0, 0, d)
		last := first.Add(24*time.Hour - time.Millisecond)
		require.Equal(t, "2026-11-30", budgetMonday(first), "%s", first)
		require.Equal(t, "2026-11-30", budgetMonday(last), "%s", last)
	}
	require.Equal(t, "2026-12-07", budgetMonday(monday.AddDate(0, 0, 7)))
	// A non-UTC time is placed by its UTC instant: Monday 01:00 in +02:00 is
	// still Sunday in UTC.
	east := time.FixedZone("east", 2*3600)
	require.Equal(t, "2026-11-23", budgetMonday(time.Date(2026, 11, 30, 1, 0, 0, 0, east)))
	require.Equal(t, "budget:2026-11-29", BudgetDayKey(time.Date(2026, 11, 30, 1, 0, 0, 0, east)))
}

func TestKeysMondayAgreesWithISOWeek(t *testing.T) {
	t.Parallel()
	at := time.Date(1999, 12, 20, 13, 0, 0, 0, time.UTC)
	for range 3000 {
		at = at.Add(11*time.Hour + 17*time.Minute)
		m, err := time.Parse(budgetDayLayout, budgetMonday(at))
		require.NoError(t, err)
		require.Equal(t, time.Monday, m.Weekday())
		y1, w1 := at.ISOWeek()
		y2, w2 := m.ISOWeek()
		require.Equal(t, [2]int{y1, w1}, [2]int{y2, w2}, "%s -> %s", at, m)
	}
}
