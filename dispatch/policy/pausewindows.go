package policy

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/pidispatch/pidispatch/internal/check"
	"github.com/pidispatch/pidispatch/jobs"
)

// Limits of a pause-windows file.
const (
	// MaxFileBytes bounds a policy file (pause windows, scoped limits).
	MaxFileBytes    = 1 << 20
	MaxPauseWindows = 256
)

// PauseWindow is one entry of pause-windows.json. A job whose scope matches is deferred
// (never refused) while the window is open.
//
//   - Scope: "*" for every job, else exactly a job's scope (an absolute folder or a
//     repository owner/name).
//   - From, To: "HH:MM" wall times in TZ. From > To is an overnight window ending the
//     next day; From == To is refused. The window is [From, To).
//   - TZ: an IANA zone; omitted means UTC. "Local" is refused (it would mean a
//     different zone on each host of a fleet).
//   - Days: "mon".."sun", the days on which the window STARTS; omitted means every day.
//   - DateFrom, DateTo: "YYYY-MM-DD", inclusive bounds on the start date in TZ.
//
// A wall time the clock skips (spring forward) is the instant the clock jumps past it;
// a wall time that occurs twice (fall back) is its first occurrence.
type PauseWindow struct {
	Scope    string   `json:"scope"`
	From     string   `json:"from"`
	To       string   `json:"to"`
	TZ       string   `json:"tz,omitempty"`
	Days     []string `json:"days,omitempty"`
	DateFrom string   `json:"dateFrom,omitempty"`
	DateTo   string   `json:"dateTo,omitempty"`

	from, to         int // minutes after midnight
	loc              *time.Location
	days             [7]bool // by time.Weekday
	dateFrom, dateTo int     // yyyymmdd, 0 = open
}

// PauseWindows is a parsed pause-windows.json. The zero value has no windows and
// never matches. It is immutable and safe for concurrent use.
type PauseWindows struct {
	windows []PauseWindow
}

// Len is the number of windows.
func (w PauseWindows) Len() int { return len(w.windows) }

// Windows returns a copy of the windows, in file order.
func (w PauseWindows) Windows() []PauseWindow {
	out := slices.Clone(w.windows)
	for i := range out {
		out[i].Days = slices.Clone(out[i].Days)
	}
	return out
}

var weekdays = map[string]time.Weekday{
	"sun": time.Sunday, "mon": time.Monday, "tue": time.Tuesday, "wed": time.Wednesday,
	"thu": time.Thursday, "fri": time.Friday, "sat": time.Saturday,
}

// ParsePauseWindows parses {"windows":[...]} strictly: unknown keys, duplicate keys and
// bad values are errors naming the window index and field ("windows[2].from: ...").
// There is no version field, as in the original.
func ParsePauseWindows(data []byte) (PauseWindows, error) {
	if err := check.JSON(data, MaxFileBytes); err != nil {
		return PauseWindows{}, fmt.Errorf("pause windows: %w", err)
	}
	var doc struct {
		Windows *[]json.RawMessage `json:"windows"`
	}
	if err := check.DecodeRow(data, &doc, ""); err != nil {
		return PauseWindows{}, fmt.Errorf("pause windows: %w", err)
	}
	if doc.Windows == nil {
		return PauseWindows{}, fmt.Errorf("pause windows: %w", &jobs.FieldError{Field: "windows", Rule: "required (an empty list means no windows)"})
	}
	rows := *doc.Windows
	if len(rows) > MaxPauseWindows {
		return PauseWindows{}, fmt.Errorf("pause windows: %w", check.Field("windows", "at most %d windows, not %d", MaxPauseWindows, len(rows)))
	}
	out := PauseWindows{windows: make([]PauseWindow, 0, len(rows))}
	for i, raw := range rows {
		at := fmt.Sprintf("windows[%d]", i)
		var win PauseWindow
		if err := check.DecodeRow(raw, &win, at); err != nil {
			return PauseWindows{}, fmt.Errorf("pause windows: %w", err)
		}
		if err := win.compile(at); err != nil {
			return PauseWindows{}, fmt.Errorf("pause windows: %w", err)
		}
		out.windows = append(out.windows, win)
	}
	return out, nil
}

// compile checks the window as read from the file at at and fills in its parsed form.
func (w *PauseWindow) compile(at string) error {
	for _, step := range []func(at string) error{w.compileScope, w.compileHours, w.compileZone, w.compileDays, w.compileDates} {
		if err := step(at); err != nil {
			return err
		}
	}
	return nil
}

// compileScope checks the scope, which is required: an empty one would pause nothing.
func (w *PauseWindow) compileScope(at string) error {
	if w.Scope == "" {
		return check.Field(at+".scope", `required ("*" for every job, an absolute folder or owner/name)`)
	}
	if w.Scope != "*" {
		if rule := scopeRule(w.Scope); rule != "" {
			return check.Field(at+".scope", `%s, or "*"`, rule)
		}
	}
	return nil
}

// compileHours reads from and to as minutes after midnight, which openAt compares.
func (w *PauseWindow) compileHours(at string) error {
	var ok bool
	if w.from, ok = parseHHMM(w.From); !ok {
		return check.Field(at+".from", "must be HH:MM between 00:00 and 23:59")
	}
	if w.to, ok = parseHHMM(w.To); !ok {
		return check.Field(at+".to", "must be HH:MM between 00:00 and 23:59")
	}
	if w.from == w.to {
		return check.Field(at+".to", "must differ from from (a window with no length is a mistake; From > To is overnight)")
	}
	return nil
}

// compileZone loads tz, refusing "Local" because it differs between the hosts of a fleet.
func (w *PauseWindow) compileZone(at string) error {
	switch w.TZ {
	case "":
		w.loc = time.UTC
	case "Local":
		return check.Field(at+".tz", `must be an IANA zone such as "Europe/Amsterdam"; "Local" differs between hosts`)
	default:
		loc, err := time.LoadLocation(w.TZ)
		if err != nil || check.Text(w.TZ, 64) != "" {
			return check.Field(at+".tz", "unknown time zone %s (want an IANA zone such as \"Europe/Amsterdam\")", check.Quote(w.TZ))
		}
		w.loc = loc
	}
	return nil
}

// compileDays reads the start days (every day when omitted); an empty list would never open.
func (w *PauseWindow) compileDays(at string) error {
	if w.Days == nil {
		for d := range w.days {
			w.days[d] = true
		}
		return nil
	}
	if len(w.Days) == 0 {
		return check.Field(at+".days", "empty: the window would never open (omit days for every day)")
	}
	for k, name := range w.Days {
		d, ok := weekdays[name]
		if !ok {
			return check.Field(fmt.Sprintf("%s.days[%d]", at, k), "must be one of mon, tue, wed, thu, fri, sat, sun")
		}
		if w.days[d] {
			return check.Field(fmt.Sprintf("%s.days[%d]", at, k), "%s is listed twice", name)
		}
		w.days[d] = true
	}
	return nil
}

// compileDates reads the optional date bounds as yyyymmdd, which compare as numbers.
func (w *PauseWindow) compileDates(at string) error {
	var ok bool
	if w.DateFrom != "" {
		if w.dateFrom, ok = parseDate(w.DateFrom); !ok {
			return check.Field(at+".dateFrom", "must be a date YYYY-MM-DD")
		}
	}
	if w.DateTo != "" {
		if w.dateTo, ok = parseDate(w.DateTo); !ok {
			return check.Field(at+".dateTo", "must be a date YYYY-MM-DD")
		}
	}
	if w.dateFrom != 0 && w.dateTo != 0 && w.dateTo < w.dateFrom {
		return check.Field(at+".dateTo", "is before dateFrom")
	}
	return nil
}

func parseHHMM(s string) (int, bool) {
	if len(s) != 5 || s[2] != ':' {
		return 0, false
	}
	for _, i := range []int{0, 1, 3, 4} {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
	}
	h := int(s[0]-'0')*10 + int(s[1]-'0')
	m := int(s[3]-'0')*10 + int(s[4]-'0')
	if h > 23 || m > 59 {
		return 0, false
	}
	return h*60 + m, true
}

func parseDate(s string) (int, bool) {
	t, err := time.Parse(time.DateOnly, s)
	if err != nil || t.Format(time.DateOnly) != s {
		return 0, false
	}
	return t.Year()*10000 + int(t.Month())*100 + t.Day(), true
}

// Match reports whether a window that applies to scope is open at now and, if so, the
// instant the job may run again: the latest end among the open windows. A caller
// defers the job to that instant and checks again then (another window may begin).
func (w PauseWindows) Match(scope string, now time.Time) (until time.Time, ok bool) {
	for i := range w.windows {
		win := &w.windows[i]
		if win.Scope != "*" && win.Scope != scope {
			continue
		}
		if end, open := win.openAt(now); open && (!ok || end.After(until)) {
			until, ok = end, true
		}
	}
	return until, ok
}

// openAt checks the occurrences that started today or yesterday (in the window's zone):
// no occurrence lasts more than a day, plus one DST hour.
func (w *PauseWindow) openAt(now time.Time) (time.Time, bool) {
	y, m, d := now.In(w.loc).Date()
	var until time.Time
	open := false
	for back := 1; back >= 0; back-- {
		// Noon never falls in a DST gap, so the weekday and date are the civil ones.
		day := time.Date(y, m, d-back, 12, 0, 0, 0, w.loc)
		dy, dm, dd := day.Date()
		if !w.days[day.Weekday()] {
			continue
		}
		if ymd := dy*10000 + int(dm)*100 + dd; w.dateFrom != 0 && ymd < w.dateFrom || w.dateTo != 0 && ymd > w.dateTo {
			continue
		}
		start := wallTime(dy, dm, dd, w.from, w.loc)
		endDay := dd
		if w.to < w.from {
			endDay++
		}
		end := wallTime(dy, dm, endDay, w.to, w.loc)
		if !now.Before(start) && now.Before(end) && (!open || end.After(until)) {
			until, open = end, true
		}
	}
	return until, open
}

// wallTime is the instant the clock in loc first reads hh:mm (minutes after midnight)
// on the given civil date (d may overflow the month). A skipped wall time resolves to
// the transition that skips it; a repeated one to its first occurrence. Go's time.Date
// leaves both choices unspecified (and in practice resolves a gap forward east of UTC
// and backward west of it), so they are pinned here.
func wallTime(y int, m time.Month, d, minutes int, loc *time.Location) time.Time {
	ny, nm, nd := time.Date(y, m, d, 12, 0, 0, 0, time.UTC).Date()
	want := time.Date(ny, nm, nd, minutes/60, minutes%60, 0, 0, time.UTC)
	t := time.Date(ny, nm, nd, minutes/60, minutes%60, 0, 0, loc)
	if got := asUTCWall(t); !got.Equal(want) {
		// A gap. t sits in the zone period before or after the transition.
		start, end := t.ZoneBounds()
		if got.After(want) && !start.IsZero() {
			return start
		}
		if got.Before(want) && !end.IsZero() {
			return end
		}
		return t
	}
	start, _ := t.ZoneBounds()
	if start.IsZero() {
		return t
	}
	_, prevOff := start.Add(-time.Second).Zone()
	_, off := t.Zone()
	if prevOff > off {
		// Clocks went back at start: the same wall time may have occurred before it.
		if earlier := t.Add(-time.Duration(prevOff-off) * time.Second); earlier.Before(start) && asUTCWall(earlier).Equal(want) {
			return earlier
		}
	}
	return t
}

// asUTCWall re-reads t's wall clock in its own location as a UTC instant, so two wall
// readings compare as instants.
func asUTCWall(t time.Time) time.Time {
	y, m, d := t.Date()
	hh, mm, ss := t.Clock()
	return time.Date(y, m, d, hh, mm, ss, t.Nanosecond(), time.UTC)
}
