package queue

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Cron run times are computed by the rules of cron-parser 5.10.4, the
// library BullMQ 6.7.6 computes them with (BullMQ 5.80.4's, 4.9.0, agrees
// but for one case below), so that a Node peer and we agree on every run,
// also on the days clocks change:
//
//   - a local time that does not exist (spring forward) runs at the same
//     wall-clock distance past the gap: a daily 02:30 runs at 03:30;
//   - a local time that exists twice (fall back) runs once, at its first
//     occurrence, for patterns naming hours; patterns matching every hour
//     run in both (cron-parser 4 also runs a time of a half-hour fall-back,
//     Lord Howe's, again in the repeat: it steps minute by minute where 5
//     moves on to the next hour when no minute of the hour is left);
//   - where cron-parser 5 gives up ("loop limit exceeded", a few points of
//     Lord Howe's changes, where a BullMQ 6 scheduler stops) we give the
//     next run;
//
// and the rest of cron-parser's stepping, which moves a local date-time
// field by field. cronTime below is the date-time arithmetic it relies on
// (that of the luxon library): calendar steps keep the wall clock and
// resolve it against the zone, time steps add absolute time.

// cronSpec is a parsed pattern: the matching values of each field, sorted.
type cronSpec struct {
	second, minute, hour, dom, month, dow []int
}

var cronAliases = map[string]string{
	"jan": "1", "feb": "2", "mar": "3", "apr": "4", "may": "5", "jun": "6",
	"jul": "7", "aug": "8", "sep": "9", "oct": "10", "nov": "11", "dec": "12",
	"sun": "0", "mon": "1", "tue": "2", "wed": "3", "thu": "4", "fri": "5", "sat": "6",
}

var cronPredefined = map[string]string{
	"@yearly": "0 0 1 1 *", "@monthly": "0 0 1 * *", "@weekly": "0 0 * * 0",
	"@daily": "0 0 * * *", "@hourly": "0 * * * *",
}

// daysInMonthMax is cron-parser's table (February 29): a day-of-month field
// listing at least this many days counts as a wildcard.
var daysInMonthMax = [12]int{31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31}

// parseCron reads a pattern of 5 or 6 fields (or a shorthand). L, W and #
// are refused: cron-parser and gronx read them differently.
func parseCron(pattern string) (*cronSpec, error) {
	p := strings.TrimSpace(pattern)
	if e, ok := cronPredefined[strings.ToLower(p)]; ok {
		p = e
	}
	fields := strings.Fields(p)
	if len(fields) == 5 {
		fields = append([]string{"0"}, fields...)
	}
	if len(fields) != 6 {
		return nil, fmt.Errorf("%q: want 5 or 6 fields", pattern)
	}
	limits := [6][2]int{{0, 59}, {0, 59}, {0, 23}, {1, 31}, {1, 12}, {0, 7}}
	var out [6][]int
	for i, f := range fields {
		vals, err := parseCronField(strings.ToLower(f), limits[i][0], limits[i][1], i == 5)
		if err != nil {
			return nil, fmt.Errorf("%q: field %d: %w", pattern, i+1, err)
		}
		out[i] = vals
	}
	s := &cronSpec{second: out[0], minute: out[1], hour: out[2], dom: out[3], month: out[4], dow: out[5]}
	if len(s.month) == 1 {
		// cron-parser drops days the only month lacks, and refuses the
		// pattern when none is left: it never fires (NextRun says so).
		days := daysInMonthMax[s.month[0]-1]
		s.dom = slices.DeleteFunc(s.dom, func(d int) bool { return d > days })
	}
	return s, nil
}

// parseCronField expands one field as cron-parser does: aliases, * and ?,
// lists, ranges and steps, where "a/n" means "a-max/n" and a day-of-week
// range ending in 7 (or 0) also matches Sunday as 0.
func parseCronField(f string, lo, hi int, dow bool) ([]int, error) {
	for name, n := range cronAliases {
		f = strings.ReplaceAll(f, name, n)
	}
	if strings.ContainsAny(f, "lw#") {
		return nil, errors.New("L, W and # are not supported")
	}
	if strings.Trim(f, "0123456789,*?/-") != "" {
		return nil, fmt.Errorf("invalid characters in %q", f)
	}
	f = strings.ReplaceAll(f, "*", fmt.Sprintf("%d-%d", lo, hi))
	f = strings.ReplaceAll(f, "?", fmt.Sprintf("%d-%d", lo, hi))
	var vals []int
	for atom := range strings.SplitSeq(f, ",") {
		got, err := parseCronAtom(atom, lo, hi, dow)
		if err != nil {
			return nil, err
		}
		vals = append(vals, got...)
	}
	slices.Sort(vals)
	return vals, nil
}

func parseCronAtom(atom string, lo, hi int, dow bool) ([]int, error) {
	if atom == "" {
		return nil, errors.New("empty list item")
	}
	rng, step := atom, 1
	if parts := strings.Split(atom, "/"); len(parts) == 2 {
		n, err := strconv.Atoi(parts[1])
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("bad step %q", parts[1])
		}
		rng, step = parts[0], n
		if _, err := strconv.Atoi(rng); err == nil {
			rng = fmt.Sprintf("%s-%d", rng, hi)
		}
	} else if len(parts) > 2 {
		return nil, fmt.Errorf("bad repeat %q", atom)
	}
	bounds := strings.Split(rng, "-")
	if len(bounds) == 1 {
		n, err := strconv.Atoi(rng)
		if err != nil || n < lo || n > hi {
			return nil, fmt.Errorf("%q is outside %d-%d", rng, lo, hi)
		}
		if dow {
			n %= 7
		}
		return []int{n}, nil
	}
	if len(bounds) != 2 {
		return nil, fmt.Errorf("bad range %q", rng)
	}
	from, err1 := strconv.Atoi(bounds[0])
	to, err2 := strconv.Atoi(bounds[1])
	if err1 != nil || err2 != nil || from < lo || to > hi || from > to {
		return nil, fmt.Errorf("bad range %q", rng)
	}
	var vals []int
	if dow && to%7 == 0 {
		vals = append(vals, 0)
	}
	// cron-parser's counter: a value already listed still counts a step.
	count := step
	for v := from; v <= to; v++ {
		if !slices.Contains(vals, v) && count%step == 0 {
			count = 1
			vals = append(vals, v)
		} else {
			count++
		}
	}
	return vals, nil
}

// cronTime is a local date-time in a zone: an instant and the offset it is
// shown with, stepped as cron-parser steps it.
type cronTime struct {
	ms, off int64 // Unix milliseconds; offset in milliseconds
	loc     *time.Location
}

func zoneOffset(loc *time.Location, ms int64) int64 {
	_, s := time.UnixMilli(ms).In(loc).Zone()
	return int64(s) * 1000
}

func cronTimeAt(ms int64, loc *time.Location) cronTime {
	return cronTime{ms: ms, off: zoneOffset(loc, ms), loc: loc}
}

// wall is the local date-time as a UTC time.Time (its fields are local).
func (c cronTime) wall() time.Time { return time.UnixMilli(c.ms + c.off).UTC() }

// resolve turns a local date-time (as UTC fields) into an instant, guessing
// the offset guess first: an ambiguous time keeps the current offset, and
// a time in a gap moves forward by the gap.
func (c cronTime) resolve(w time.Time) cronTime {
	local := w.UnixMilli()
	utc := local - c.off
	o2 := zoneOffset(c.loc, utc)
	if o2 == c.off {
		return cronTime{ms: utc, off: c.off, loc: c.loc}
	}
	utc -= o2 - c.off
	o3 := zoneOffset(c.loc, utc)
	if o2 == o3 {
		return cronTime{ms: utc, off: o2, loc: c.loc}
	}
	return cronTime{ms: local - min(o2, o3), off: max(o2, o3), loc: c.loc}
}

// plusMs adds absolute time.
func (c cronTime) plusMs(d int64) cronTime { return cronTimeAt(c.ms+d, c.loc) }

// truncate sets the fields below unit (time.Second ... 24h day, or 0 for
// the month) to their start, on the wall clock.
func (c cronTime) truncate(unit time.Duration) cronTime {
	w := c.wall()
	y, mo, d := w.Date()
	h, mi, s := w.Clock()
	switch unit {
	case 0:
		d, h, mi, s = 1, 0, 0, 0
	case 24 * time.Hour:
		h, mi, s = 0, 0, 0
	case time.Hour:
		mi, s = 0, 0
	case time.Minute:
		s = 0
	}
	return c.resolve(time.Date(y, mo, d, h, mi, s, 0, time.UTC))
}

func (c cronTime) addMonth() cronTime {
	w := c.wall()
	y, mo, d := w.Date()
	first := time.Date(y, mo+1, 1, 0, 0, 0, 0, time.UTC)
	d = min(d, first.AddDate(0, 1, -1).Day())
	h, mi, s := w.Clock()
	next := c.resolve(time.Date(first.Year(), first.Month(), d, h, mi, s, w.Nanosecond(), time.UTC))
	return next.truncate(0)
}

func (c cronTime) addDay() cronTime {
	w := c.wall()
	return c.resolve(w.AddDate(0, 0, 1)).truncate(24 * time.Hour)
}

// addUnit adds an hour, minute or second and truncates to it; a result not
// later than before (a fall-back hour) moves on an hour more.
func (c cronTime) addUnit(unit time.Duration) cronTime {
	next := c.plusMs(unit.Milliseconds()).truncate(unit)
	if next.ms < c.ms || (unit == time.Hour && next.ms == c.ms) {
		next = next.plusMs(time.Hour.Milliseconds())
	}
	return next
}

// cronSearch is one next-run search; dstStart and dstEnd are cron-parser's
// record of an hour skipped or repeated on the way (-1: none).
type cronSearch struct {
	spec             *cronSpec
	dstStart, dstEnd int
}

// shift steps the date by unit, noting a clock change crossed on the way.
func (s *cronSearch) shift(c cronTime, unit time.Duration) cronTime {
	switch unit {
	case 0, 24 * time.Hour:
		prev := c.ms
		if unit == 0 {
			c = c.addMonth()
		} else {
			c = c.addDay()
		}
		if w := c.wall(); c.ms == prev && w.Minute() == 0 && w.Second() == 0 {
			c = c.addUnit(time.Hour) // stepped into a day that starts in a gap
		}
		return c
	}
	before := c.wall().Hour()
	c = c.addUnit(unit)
	w := c.wall()
	switch diff := w.Hour() - before; {
	case diff == 2 && len(s.spec.hour) != 24:
		s.dstStart = w.Hour()
	case diff == 0 && w.Minute() == 0 && w.Second() == 0 && len(s.spec.hour) != 24:
		s.dstEnd = w.Hour()
	}
	return c
}

// next is cron-parser's forward search from c: the first matching time
// strictly after c at second resolution. (An end date is applied by the
// scripts, which see the run time: cron-parser finds no run past it.)
func (s *cronSearch) next(c cronTime) (cronTime, error) {
	spec := s.spec
	start := c.ms
	for range 10000 {
		w := c.wall()
		domMatch := slices.Contains(spec.dom, w.Day())
		dowMatch := slices.Contains(spec.dow, int(w.Weekday()))
		domWild := len(spec.dom) >= daysInMonthMax[w.Month()-1]
		dowWild := len(spec.dow) == 8
		hour := w.Hour()
		if (!domMatch && (!dowMatch || dowWild)) || (!domWild && dowWild && !domMatch) ||
			(domWild && !dowWild && !dowMatch) {
			c = s.shift(c, 24*time.Hour)
			continue
		}
		if !slices.Contains(spec.month, int(w.Month())) {
			c = s.shift(c, 0)
			continue
		}
		if !slices.Contains(spec.hour, hour) {
			if s.dstStart != hour {
				s.dstStart = -1
				c = s.shift(c, time.Hour)
				continue
			}
			if !slices.Contains(spec.hour, hour-1) {
				c = c.addUnit(time.Hour)
				continue
			}
		} else if s.dstEnd == hour {
			s.dstEnd = -1
			c = s.shift(c, time.Hour)
			continue
		}
		if !slices.Contains(spec.minute, w.Minute()) {
			// cron-parser 5 sets the next matching minute of the hour on
			// the wall clock, or moves on an hour when none is left (so a
			// half-hour fall-back's repeated minutes are not met again).
			if m, ok := nextValue(spec.minute, w.Minute()); ok {
				c = c.resolve(time.Date(w.Year(), w.Month(), w.Day(), hour, m, spec.second[0], 0, time.UTC))
			} else {
				c = s.shift(c, time.Hour)
			}
			continue
		}
		if !slices.Contains(spec.second, w.Second()) {
			if sec, ok := nextValue(spec.second, w.Second()); ok {
				c = c.resolve(time.Date(w.Year(), w.Month(), w.Day(), hour, w.Minute(), sec, 0, time.UTC))
			} else {
				c = s.shift(c, time.Minute)
			}
			continue
		}
		if c.ms == start {
			c = s.shift(c, time.Second)
			continue
		}
		return c, nil
	}
	return c, errors.New("no matching time found (loop limit)")
}

// nextValue is the first of the sorted values above v.
func nextValue(values []int, v int) (int, bool) {
	for _, x := range values {
		if x > v {
			return x, true
		}
	}
	return 0, false
}

// cronNext is the first run of spec in loc strictly after after (second
// resolution).
func cronNext(spec *cronSpec, loc *time.Location, after time.Time) (time.Time, error) {
	s := &cronSearch{spec: spec, dstStart: -1, dstEnd: -1}
	c, err := s.next(cronTimeAt(after.UnixMilli(), loc))
	if err != nil {
		return time.Time{}, err
	}
	return time.UnixMilli(c.ms), nil
}
