package policy_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pidispatch/pidispatch/dispatch/policy"
	"github.com/pidispatch/pidispatch/jobs"
)

func mustZone(t testing.TB, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	require.NoError(t, err)
	return loc
}

func mustWindows(t testing.TB, doc string) policy.PauseWindows {
	t.Helper()
	w, err := policy.ParsePauseWindows([]byte(doc))
	require.NoError(t, err)
	return w
}

func TestParsePauseWindows_Valid(t *testing.T) {
	t.Parallel()
	w := mustWindows(t, `{"windows":[
		{"scope":"*","from":"22:00","to":"06:00","tz":"Europe/Amsterdam","days":["mon","fri"]},
		{"scope":"acme/web","from":"09:00","to":"17:30","dateFrom":"2026-12-24","dateTo":"2026-12-31"},
		{"scope":"/srv/proj","from":"00:00","to":"23:59"}
	]}`)
	require.Equal(t, 3, w.Len())
	got := w.Windows()
	require.Equal(t, "Europe/Amsterdam", got[0].TZ)
	require.Equal(t, []string{"mon", "fri"}, got[0].Days)
	got[0].Days[0] = "sun" // a copy: the parsed set is immutable
	require.Equal(t, "mon", w.Windows()[0].Days[0])

	empty := mustWindows(t, `{"windows":[]}`)
	require.Equal(t, 0, empty.Len())
	_, ok := empty.Match("acme/web", time.Now())
	require.False(t, ok)
	var zero policy.PauseWindows
	_, ok = zero.Match("acme/web", time.Now())
	require.False(t, ok)
}

func TestParsePauseWindows_Invalid(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		give  string
		field string
		rule  string
	}{
		{"Empty", ``, "", "empty"},
		{"NotJSON", `windows`, "", "invalid character"},
		{"NoWindows", `{}`, "windows", "required"},
		{"NullWindows", `{"windows":null}`, "windows", "required"},
		{"Version", `{"version":1,"windows":[]}`, "version", "unknown field"},
		{"WindowsNotList", `{"windows":{}}`, "windows", "array"},
		{"DuplicateKey", `{"windows":[{"scope":"*","from":"01:00","to":"02:00","to":"03:00"}]}`, `"to"`, "duplicate key"},
		{"UnknownKey", `{"windows":[{"scope":"*","from":"01:00","to":"02:00"},{"scope":"*","form":"01:00","to":"02:00"}]}`, "windows[1].form", "unknown field"},
		{"NotObject", `{"windows":[1]}`, "windows[0]", "object"},
		{"NoScope", `{"windows":[{"from":"01:00","to":"02:00"}]}`, "windows[0].scope", "required"},
		{"RelativeScope", `{"windows":[{"scope":"proj","from":"01:00","to":"02:00"}]}`, "windows[0].scope", "absolute folder"},
		{"UncleanScope", `{"windows":[{"scope":"/a/","from":"01:00","to":"02:00"}]}`, "windows[0].scope", "clean"},
		{"BadFrom", `{"windows":[{"scope":"*","from":"1:00","to":"02:00"}]}`, "windows[0].from", "HH:MM"},
		{"Hour24", `{"windows":[{"scope":"*","from":"24:00","to":"02:00"}]}`, "windows[0].from", "HH:MM"},
		{"Minute60", `{"windows":[{"scope":"*","from":"01:00","to":"02:60"}]}`, "windows[0].to", "HH:MM"},
		{"Seconds", `{"windows":[{"scope":"*","from":"01:00:00","to":"02:00"}]}`, "windows[0].from", "HH:MM"},
		{"NumberFrom", `{"windows":[{"scope":"*","from":100,"to":"02:00"}]}`, "windows[0].from", "string"},
		{"FromEqualsTo", `{"windows":[{"scope":"*","from":"02:00","to":"02:00"}]}`, "windows[0].to", "must differ"},
		{"UnknownZone", `{"windows":[{"scope":"*","from":"01:00","to":"02:00","tz":"Mars/Olympus"}]}`, "windows[0].tz", "unknown time zone"},
		{"LocalZone", `{"windows":[{"scope":"*","from":"01:00","to":"02:00","tz":"Local"}]}`, "windows[0].tz", "differs between hosts"},
		{"EmptyDays", `{"windows":[{"scope":"*","from":"01:00","to":"02:00","days":[]}]}`, "windows[0].days", "never open"},
		{"BadDay", `{"windows":[{"scope":"*","from":"01:00","to":"02:00","days":["mon","Tue"]}]}`, "windows[0].days[1]", "mon, tue"},
		{"TwiceDay", `{"windows":[{"scope":"*","from":"01:00","to":"02:00","days":["mon","mon"]}]}`, "windows[0].days[1]", "twice"},
		{"BadDate", `{"windows":[{"scope":"*","from":"01:00","to":"02:00","dateFrom":"2026-02-30"}]}`, "windows[0].dateFrom", "YYYY-MM-DD"},
		{"ShortDate", `{"windows":[{"scope":"*","from":"01:00","to":"02:00","dateTo":"2026-2-3"}]}`, "windows[0].dateTo", "YYYY-MM-DD"},
		{"DatesReversed", `{"windows":[{"scope":"*","from":"01:00","to":"02:00","dateFrom":"2026-03-02","dateTo":"2026-03-01"}]}`, "windows[0].dateTo", "before dateFrom"},
		{"Trailing", `{"windows":[]}x`, "", "after the top-level value"},
		{"TooMany", `{"windows":[` + strings.TrimSuffix(strings.Repeat(`{"scope":"*","from":"01:00","to":"02:00"},`, policy.MaxPauseWindows+1), ",") + `]}`, "windows", "at most 256"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := policy.ParsePauseWindows([]byte(tt.give))
			require.Error(t, err)
			require.Contains(t, err.Error(), tt.rule)
			require.True(t, strings.HasPrefix(err.Error(), "pause windows: "), err.Error())
			if tt.field != "" {
				var fe *jobs.FieldError
				require.ErrorAs(t, err, &fe, "%v", err)
				require.Equal(t, tt.field, fe.Field, "%v", err)
			}
		})
	}
}

func TestPauseWindows_Match(t *testing.T) {
	t.Parallel()
	w := mustWindows(t, `{"windows":[
		{"scope":"*","from":"22:00","to":"06:00","days":["fri"]},
		{"scope":"acme/web","from":"09:00","to":"17:00"},
		{"scope":"acme/web","from":"16:00","to":"18:30"},
		{"scope":"/srv/proj","from":"12:00","to":"13:00","dateFrom":"2026-12-24","dateTo":"2026-12-26"}
	]}`)
	utc := func(s string) time.Time {
		tm, err := time.Parse("2006-01-02 15:04", s)
		require.NoError(t, err)
		return tm
	}
	tests := []struct {
		name   string
		scope  string
		now    string
		wantOK bool
		until  string
	}{
		// 2026-11-27 is a Friday.
		{"OvernightStartsFriday", "any/repo", "2026-11-27 23:00", true, "2026-11-28 06:00"},
		{"OvernightContinuesSaturday", "any/repo", "2026-11-28 05:59", true, "2026-11-28 06:00"},
		{"OvernightEndIsExclusive", "any/repo", "2026-11-28 06:00", false, ""},
		{"OvernightStartIsInclusive", "any/repo", "2026-11-27 22:00", true, "2026-11-28 06:00"},
		{"DaysGateTheStartDay", "any/repo", "2026-11-28 23:00", false, ""}, // Saturday night: no window starts
		{"ThursdayNight", "any/repo", "2026-11-26 23:00", false, ""},
		{"FridayMorningBelongsToThursday", "any/repo", "2026-11-27 03:00", false, ""},
		{"OtherScopeNotMatched", "acme/api", "2026-11-25 10:00", false, ""},
		{"ScopeExact", "acme/web", "2026-11-25 10:00", true, "2026-11-25 17:00"},
		{"LatestEndOfOverlaps", "acme/web", "2026-11-25 16:30", true, "2026-11-25 18:30"},
		{"SecondOnly", "acme/web", "2026-11-25 17:00", true, "2026-11-25 18:30"},
		{"ScopeIsNotPrefix", "acme/web2", "2026-11-25 10:00", false, ""},
		{"DateRangeInside", "/srv/proj", "2026-12-26 12:30", true, "2026-12-26 13:00"},
		{"DateRangeAfter", "/srv/proj", "2026-12-27 12:30", false, ""},
		{"DateRangeBefore", "/srv/proj", "2026-12-23 12:30", false, ""},
		{"StarAndScopeBoth", "acme/web", "2026-11-27 23:00", true, "2026-11-28 06:00"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			until, ok := w.Match(tt.scope, utc(tt.now))
			require.Equal(t, tt.wantOK, ok)
			if tt.wantOK {
				require.Equal(t, utc(tt.until), until.UTC())
			}
		})
	}
}

// DST: windows are wall-clock windows in their zone. Each case states the window, the
// instant, and the UTC instant the window must end (or that it is closed).
func TestPauseWindows_DST(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		tz        string
		from, to  string
		now       time.Time // UTC
		wantOK    bool
		wantUntil time.Time // UTC
	}{
		// Europe/Amsterdam springs forward 2026-03-29 02:00 CET -> 03:00 CEST (01:00 UTC).
		{"AmsSpringOvernightIsSevenHours", "Europe/Amsterdam", "22:00", "06:00",
			time.Date(2026, 3, 28, 21, 0, 0, 0, time.UTC), true, time.Date(2026, 3, 29, 4, 0, 0, 0, time.UTC)},
		{"AmsSpringBeforeStart", "Europe/Amsterdam", "22:00", "06:00",
			time.Date(2026, 3, 28, 20, 59, 0, 0, time.UTC), false, time.Time{}},
		// A window starting inside the gap opens when the clock jumps (03:00 CEST).
		{"AmsSpringGapStartNotYet", "Europe/Amsterdam", "02:30", "05:00",
			time.Date(2026, 3, 29, 0, 59, 0, 0, time.UTC), false, time.Time{}},
		{"AmsSpringGapStartOpens", "Europe/Amsterdam", "02:30", "05:00",
			time.Date(2026, 3, 29, 1, 0, 0, 0, time.UTC), true, time.Date(2026, 3, 29, 3, 0, 0, 0, time.UTC)},
		// A window ending inside the gap ends at the jump.
		{"AmsSpringGapEnd", "Europe/Amsterdam", "01:00", "02:30",
			time.Date(2026, 3, 29, 0, 30, 0, 0, time.UTC), true, time.Date(2026, 3, 29, 1, 0, 0, 0, time.UTC)},
		// Amsterdam falls back 2026-10-25 03:00 CEST -> 02:00 CET (01:00 UTC).
		{"AmsFallOvernightIsNineHours", "Europe/Amsterdam", "22:00", "06:00",
			time.Date(2026, 10, 24, 20, 0, 0, 0, time.UTC), true, time.Date(2026, 10, 25, 5, 0, 0, 0, time.UTC)},
		// 02:30 occurs twice; the window ends at the first (00:30 UTC), not the second.
		{"AmsFallRepeatedEndIsFirst", "Europe/Amsterdam", "01:00", "02:30",
			time.Date(2026, 10, 25, 0, 15, 0, 0, time.UTC), true, time.Date(2026, 10, 25, 0, 30, 0, 0, time.UTC)},
		{"AmsFallSecondPassIsClosed", "Europe/Amsterdam", "01:00", "02:30",
			time.Date(2026, 10, 25, 1, 15, 0, 0, time.UTC), false, time.Time{}},
		// A window starting at a repeated wall time opens at its first occurrence.
		{"AmsFallRepeatedStartIsFirst", "Europe/Amsterdam", "02:30", "04:00",
			time.Date(2026, 10, 25, 0, 30, 0, 0, time.UTC), true, time.Date(2026, 10, 25, 3, 0, 0, 0, time.UTC)},
		// America/New_York springs forward 2026-03-08 02:00 EST -> 03:00 EDT (07:00 UTC).
		{"NYSpringOvernight", "America/New_York", "22:00", "06:00",
			time.Date(2026, 3, 8, 3, 0, 0, 0, time.UTC), true, time.Date(2026, 3, 8, 10, 0, 0, 0, time.UTC)},
		// Go's time.Date would put 02:30 at 01:30 EST (06:30 UTC) here; the window must
		// not open an hour early: it opens at the jump, 07:00 UTC.
		{"NYSpringGapStartNotEarly", "America/New_York", "02:30", "05:00",
			time.Date(2026, 3, 8, 6, 45, 0, 0, time.UTC), false, time.Time{}},
		{"NYSpringGapStartOpens", "America/New_York", "02:30", "05:00",
			time.Date(2026, 3, 8, 7, 0, 0, 0, time.UTC), true, time.Date(2026, 3, 8, 9, 0, 0, 0, time.UTC)},
		// New York falls back 2026-11-01 02:00 EDT -> 01:00 EST (06:00 UTC).
		{"NYFallOvernightIsNineHours", "America/New_York", "22:00", "06:00",
			time.Date(2026, 11, 1, 2, 0, 0, 0, time.UTC), true, time.Date(2026, 11, 1, 11, 0, 0, 0, time.UTC)},
		{"NYFallRepeatedEndIsFirst", "America/New_York", "00:30", "01:30",
			time.Date(2026, 11, 1, 5, 0, 0, 0, time.UTC), true, time.Date(2026, 11, 1, 5, 30, 0, 0, time.UTC)},
		{"NYFallSecondPassIsClosed", "America/New_York", "00:30", "01:30",
			time.Date(2026, 11, 1, 6, 15, 0, 0, time.UTC), false, time.Time{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			w := mustWindows(t, fmt.Sprintf(`{"windows":[{"scope":"*","from":%q,"to":%q,"tz":%q}]}`, tt.from, tt.to, tt.tz))
			until, ok := w.Match("acme/web", tt.now)
			require.Equal(t, tt.wantOK, ok, "at %s (%s)", tt.now, tt.now.In(mustZone(t, tt.tz)))
			if tt.wantOK {
				require.True(t, until.Equal(tt.wantUntil), "until %s, want %s", until.UTC(), tt.wantUntil)
			}
		})
	}
}

// Days are read in the window's zone: Friday 23:00 in Amsterdam is Friday 22:00 UTC in
// winter, and Saturday 00:30 Amsterdam is still Friday 23:30 UTC.
func TestPauseWindows_DaysInZone(t *testing.T) {
	t.Parallel()
	w := mustWindows(t, `{"windows":[{"scope":"*","from":"00:00","to":"01:00","tz":"Europe/Amsterdam","days":["sat"]}]}`)
	// 2026-11-27 23:30 UTC = Saturday 2026-11-28 00:30 CET.
	until, ok := w.Match("x/y", time.Date(2026, 11, 27, 23, 30, 0, 0, time.UTC))
	require.True(t, ok)
	require.Equal(t, time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC), until.UTC())
	_, ok = w.Match("x/y", time.Date(2026, 11, 28, 23, 30, 0, 0, time.UTC)) // Sunday 00:30 CET
	require.False(t, ok)
}

func FuzzParsePauseWindows(f *testing.F) {
	f.Add([]byte(`{"windows":[{"scope":"*","from":"22:00","to":"06:00","tz":"Europe/Amsterdam","days":["mon"],"dateFrom":"2026-01-01","dateTo":"2026-12-31"}]}`))
	f.Add([]byte(`{"windows":[{"scope":"a/b","from":"02:30","to":"03:30","tz":"America/New_York"}]}`))
	f.Add([]byte(`{"windows":[]}`))
	f.Add([]byte(`{"windows":[{"scope":"*","from":"00:00","to":"23:59","tz":"Pacific/Chatham"}]}`))
	f.Add([]byte(`{"windows":[{"scope":"*","from":"01:00","to":"02:00","tz":"Australia/Lord_Howe"}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		w, err := policy.ParsePauseWindows(data)
		if err != nil {
			return
		}
		// Matching at any instant is defined and ends in the future.
		for _, now := range []time.Time{
			time.Date(2026, 3, 29, 1, 30, 0, 0, time.UTC),
			time.Date(2026, 10, 25, 0, 45, 0, 0, time.UTC),
			time.Date(2026, 3, 8, 7, 0, 0, 0, time.UTC),
			time.Unix(0, 0),
		} {
			if until, ok := w.Match("a/b", now); ok && !until.After(now) {
				t.Fatalf("window open at %s ends at %s, not after it", now, until)
			}
		}
	})
}

func ExamplePauseWindows_Match() {
	w, err := policy.ParsePauseWindows([]byte(`{"windows":[
		{"scope":"*","from":"22:00","to":"06:00","tz":"Europe/Amsterdam","days":["fri"]}
	]}`))
	if err != nil {
		panic(err)
	}
	friday := time.Date(2026, 11, 27, 23, 0, 0, 0, time.UTC) // Saturday 00:00 in Amsterdam
	until, ok := w.Match("acme/web", friday)
	fmt.Println(ok, until.UTC())
	// Output: true 2026-11-28 05:00:00 +0000 UTC
}
