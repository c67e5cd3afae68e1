package queue_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/queue"
)

// dstZones change their clocks in 2026: both hemispheres, a zone whose
// change is at midnight (Santiago), and one whose change is 30 minutes
// (Lord Howe).
var dstZones = []string{"Europe/Amsterdam", "America/New_York", "Australia/Sydney",
	"America/Santiago", "Pacific/Auckland", "Australia/Lord_Howe"}

// dstPatterns cover every kind of field our schedulers use: fixed hours in
// and next to the changed hour, steps, lists, ranges, days, seconds.
var dstPatterns = []string{"30 2 * * *", "0 2 * * *", "0 */2 * * *", "0 * * * *", "*/15 * * * *",
	"0 0 * * *", "30 1 * * *", "0 3 * * *", "15 1,2,3 * * *", "0 30 2 * * *", "*/20 * 2 * * *", "0 9 * * 1-5"}

// transitions finds the instants in year when loc's offset changes.
func transitions(loc *time.Location, year int) []time.Time {
	var out []time.Time
	t := time.Date(year, 1, 1, 0, 0, 0, 0, time.UTC)
	end := t.AddDate(1, 0, 0)
	_, off := t.In(loc).Zone()
	for ; t.Before(end); t = t.Add(30 * time.Minute) {
		if _, o := t.In(loc).Zone(); o != off {
			lo, hi := t.Add(-30*time.Minute), t
			for hi.Sub(lo) > time.Second {
				mid := lo.Add(hi.Sub(lo) / 2)
				if _, o := mid.In(loc).Zone(); o == off {
					lo = mid
				} else {
					hi = mid
				}
			}
			out = append(out, hi)
			off = o
		}
	}
	return out
}

// repeatedHalfHour reports whether the local time at ms was shown half an
// hour earlier too (the second pass of a half-hour fall-back).
func repeatedHalfHour(loc *time.Location, ms int64) bool {
	t := time.UnixMilli(ms).In(loc)
	return t.Add(-30*time.Minute).Format("15:04:05") == t.Format("15:04:05")
}

// Our next run agrees with cron-parser's (BullMQ's: 4.9.0 under BullMQ 5,
// 5.10.4 under BullMQ 6) around every clock change of 2026 in each zone:
// from 3 hours before to 3 hours after, every 30 minutes, a second past the
// change and from the changing day's start.
// (cron-parser takes 10 to 20 ms a call on a loaded machine: the points
// are chosen, not swept.)
func TestInterop_CronNextRunMatchesCronParserOnDSTDays(t *testing.T) {
	t.Parallel()
	eachBullMQ(t, func(t *testing.T, bm bullmq) {
		db := livetest.Valkey(t)
		type cronCase struct {
			Pattern string `json:"pattern"`
			TZ      string `json:"tz"`
		}
		total, failed, repeats := 0, 0, 0
		for _, zone := range dstZones {
			loc, err := time.LoadLocation(zone)
			require.NoError(t, err)
			changes := transitions(loc, 2026)
			require.Len(t, changes, 2, zone)
			var after []int64
			for _, ch := range changes {
				for d := -3 * time.Hour; d <= 3*time.Hour; d += 30 * time.Minute {
					after = append(after, ch.Add(d).UnixMilli())
				}
				y, m, day := ch.In(loc).Date()
				after = append(after, ch.Add(time.Second+250*time.Millisecond).UnixMilli(),
					time.Date(y, m, day, 0, 0, 0, 0, time.UTC).Add(-12*time.Hour).UnixMilli())
			}
			cases := make([]cronCase, len(dstPatterns))
			for i, p := range dstPatterns {
				cases[i] = cronCase{p, zone}
			}
			var want [][]*int64
			bm.bull(t, db, "cronNext", map[string]any{"cases": cases, "after": after}, &want)
			require.Len(t, want, len(cases))
			mismatches := 0
			for i, c := range cases {
				for j, ms := range after {
					got, err := queue.NextRun(c.Pattern, c.TZ, time.UnixMilli(ms))
					require.NoError(t, err)
					if want[i][j] == nil {
						// cron-parser 5 throws "loop limit exceeded" on a few points
						// of Lord Howe's half-hour changes (a BullMQ 6 scheduler
						// stops there); we give the next run.
						require.Equal(t, 6, bm.major, "%s %q after %d: cron-parser 4 finds a run", zone, c.Pattern, ms)
						require.Equal(t, "Australia/Lord_Howe", zone, "%q after %d", c.Pattern, ms)
						failed++
						continue
					}
					total++
					if bm.major == 5 && got.UnixMilli() > *want[i][j] && repeatedHalfHour(loc, *want[i][j]) {
						// cron-parser 4 runs a time of a half-hour fall-back
						// (Lord Howe) again in its repeat; 5, and we, run it once.
						repeats++
						continue
					}
					if got.UnixMilli() != *want[i][j] && mismatches < 10 {
						mismatches++
						t.Errorf("%s %q after %s: ours %s, cron-parser %s", zone, c.Pattern,
							time.UnixMilli(ms).In(loc).Format(time.RFC3339Nano), got.In(loc).Format(time.RFC3339),
							time.UnixMilli(*want[i][j]).In(loc).Format(time.RFC3339))
					}
				}
			}
		}
		t.Logf("%d next runs compared with cron-parser, %d it found none for, %d it ran again in a repeated half hour", total, failed, repeats)
		require.LessOrEqual(t, repeats, 2, "cron-parser 4's repeats of Lord Howe's half hour")
		require.Greater(t, total, 1000, fmt.Sprint("too few cases"))
	})
}
