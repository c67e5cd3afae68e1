package queue

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/adhocore/gronx"
)

// Scheduler is a job scheduler: a cron pattern and the job it makes. There
// is always exactly one pending run per scheduler, a job with id
// "repeat:<schedulerId>:<millis>"; taking it (Fetch) creates the next one.
//
// Run times are computed in Go by the rules of BullMQ's cron-parser
// (cron.go), in TZ, from the server's clock:
// UpsertScheduler reads Valkey's TIME once, and a fetch reports the server
// time its script read. The scheduler stores the run after the pending one
// ("nx"), so the fetch that takes a run creates the next run in the same
// atomic call; the fetching process then computes and stores the following
// time. A crash between the two leaves the schedule intact (the next run
// exists; the one after is computed when it is taken).
type Scheduler struct {
	// Pattern is a cron pattern of 5 fields (minute first) or 6 (second
	// first), or @yearly, @monthly, @weekly, @daily, @hourly: the forms both
	// gronx and BullMQ's cron-parser read the same way (L, W and # are
	// refused).
	Pattern string
	// TZ is the IANA zone the pattern is read in. Empty means UTC here; a
	// BullMQ worker that takes a run of a scheduler without TZ computes the
	// next one in its own process zone, so mixed fleets should set TZ.
	TZ string
	// Limit, when positive, is the most runs the scheduler makes (BullMQ's
	// repeat.limit): the run that reaches it makes no next one.
	Limit int
	// StartDate, when set, is the earliest time a run may be due: the
	// first run is the first match after it.
	StartDate time.Time
	// EndDate, when set, ends the schedule: no run is due after it, and no
	// run is made once it has passed (BullMQ's endDate).
	EndDate time.Time
	// JobName, Data and the options below are the template of every run.
	JobName          string
	Data             json.RawMessage
	Attempts         int
	Backoff          Backoff
	Priority         int
	RemoveOnComplete Keep
	RemoveOnFail     Keep
}

// SchedulerInfo is a stored scheduler.
type SchedulerInfo struct {
	ID string
	Scheduler
	// Every is set instead of Pattern on BullMQ "every" schedulers (made by
	// Node clients; we run them but do not create them).
	Every time.Duration
	// Next is when the pending run is due.
	Next time.Time
	// Iterations counts the runs created so far.
	Iterations int
}

var yearField = regexp.MustCompile(`^\d{4,}$`)

// cronTags are the shorthands both gronx and cron-parser expand the same way.
var cronTags = map[string]bool{"@yearly": true, "@monthly": true, "@weekly": true, "@daily": true, "@hourly": true}

// ValidateSchedulerID accepts 1-200 bytes of printable UTF-8 without ":"
// (the run's job id "repeat:<id>:<millis>" must keep three parts).
func ValidateSchedulerID(id string) error {
	if id == "" {
		return optErr("schedulerID", "empty")
	}
	if err := checkString("schedulerID", id, 200); err != nil {
		return err
	}
	if strings.Contains(id, ":") {
		return optErr("schedulerID", "%q contains ':'", id)
	}
	return nil
}

// ValidatePattern accepts the cron patterns Scheduler documents.
func ValidatePattern(pattern string) error {
	if err := checkString("Pattern", pattern, 256); err != nil {
		return err
	}
	p := strings.TrimSpace(pattern)
	if cronTags[strings.ToLower(p)] {
		return nil
	}
	fields := strings.Fields(p)
	if len(fields) != 5 && len(fields) != 6 {
		return optErr("Pattern", "%q: want 5 or 6 fields", pattern)
	}
	if len(fields) == 6 && yearField.MatchString(fields[5]) {
		return optErr("Pattern", "%q: a year field is not portable to BullMQ", pattern)
	}
	if strings.HasPrefix(p, "@") || !gronx.IsValid(p) {
		return optErr("Pattern", "%q is not a valid cron pattern", pattern)
	}
	if _, err := parseCron(p); err != nil {
		return optErr("Pattern", "%v", err)
	}
	return nil
}

// loadZone resolves a scheduler's zone; empty is UTC.
func loadZone(tz string) (*time.Location, error) {
	if tz == "" {
		return time.UTC, nil
	}
	if err := checkString("TZ", tz, 128); err != nil {
		return nil, err
	}
	if tz == "Local" {
		return nil, optErr("TZ", "Local depends on the host; name a zone")
	}
	loc, err := time.LoadLocation(tz)
	if err != nil {
		return nil, optErr("TZ", "%q: %v", tz, err)
	}
	return loc, nil
}

// NextRun returns the first time strictly after `after` (at second
// resolution) that pattern matches in zone tz (empty: UTC).
func NextRun(pattern, tz string, after time.Time) (time.Time, error) {
	if err := ValidatePattern(pattern); err != nil {
		return time.Time{}, err
	}
	loc, err := loadZone(tz)
	if err != nil {
		return time.Time{}, err
	}
	return nextRun(pattern, loc, after)
}

func nextRun(pattern string, loc *time.Location, after time.Time) (time.Time, error) {
	var t time.Time
	spec, err := parseCron(pattern)
	if err == nil {
		t, err = cronNext(spec, loc, after)
	} else if p := strings.TrimSpace(pattern); gronx.IsValid(p) && !strings.HasPrefix(p, "@") {
		t, err = gronx.NextTickAfter(p, after.In(loc), false) // a peer's L, W or #
	} else {
		return time.Time{}, optErr("Pattern", "%v", err)
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("next run of %q: %w", pattern, err)
	}
	if !t.After(after) {
		return time.Time{}, fmt.Errorf("next run of %q: no time after %s", pattern, after)
	}
	return t, nil
}

func (s Scheduler) template() jobTemplate {
	return jobTemplate{
		Attempts: s.Attempts, Backoff: s.Backoff, Priority: s.Priority,
		RemoveOnComplete: s.RemoveOnComplete, RemoveOnFail: s.RemoveOnFail,
	}
}

// UpsertScheduler creates or replaces scheduler id. Its pending run that is
// not yet taken is replaced by one at the next cron time; a run already
// taken finishes undisturbed. Upserting the same scheduler twice leaves one
// scheduler and one pending run. It returns the pending run's job id. A
// schedule whose EndDate leaves no run changes nothing and returns
// ErrScheduleEnded (BullMQ's upsert returns no job then).
func (q *Queue) UpsertScheduler(ctx context.Context, id string, s Scheduler) (string, error) {
	if err := ValidateSchedulerID(id); err != nil {
		return "", err
	}
	s.Pattern = strings.TrimSpace(s.Pattern)
	if err := ValidatePattern(s.Pattern); err != nil {
		return "", err
	}
	loc, err := loadZone(s.TZ)
	if err != nil {
		return "", err
	}
	if err := checkJobName("JobName", s.JobName); err != nil {
		return "", err
	}
	if err := s.checkBounds(); err != nil {
		return "", err
	}
	data, err := checkData("Data", s.Data)
	if err != nil {
		return "", err
	}
	t := s.template()
	if err := t.validate(); err != nil {
		return "", err
	}
	tmpl, err := t.schedulerOpts()
	if err != nil {
		return "", fmt.Errorf("upsert scheduler %q: %w", id, err)
	}
	now, err := q.client.Time(ctx).Result()
	if err != nil {
		return "", fmt.Errorf("upsert scheduler %q: server time: %w", id, err)
	}
	first, err := s.firstRun(loc, now)
	if err != nil {
		return "", fmt.Errorf("upsert scheduler %q: %w", id, err)
	}
	limit, start, end := s.boundArgs()
	for range 2 { // a taken id moves the schedule one run on, once
		after, err := nextRun(s.Pattern, loc, first)
		if err != nil {
			return "", err
		}
		res, err := q.run(ctx, schedulerUpsertScript, []string{q.keys.scheduler(id)},
			id, first.UnixMilli(), after.UnixMilli(), s.JobName, data, tmpl, s.Pattern, s.TZ, limit, start, end)
		if err != nil {
			return "", fmt.Errorf("upsert scheduler %q in %s: %w", id, q.name, err)
		}
		if jobID, ok := res.(string); ok {
			return jobID, nil
		}
		code, _ := res.(int64)
		if code != -10 {
			return "", scriptError(code, "upsert scheduler", id)
		}
		first = after
	}
	return "", scriptError(-10, "upsert scheduler", id)
}

// schedulerOpts is a scheduler's template opts: BullMQ's carry no delay,
// and attempts only when set.
func (t jobTemplate) schedulerOpts() ([]byte, error) {
	w := t.wire()
	return json.Marshal(struct {
		Attempts         int          `json:"attempts,omitempty"`
		Backoff          *wireBackoff `json:"backoff,omitempty"`
		Priority         int          `json:"priority,omitempty"`
		RemoveOnComplete any          `json:"removeOnComplete,omitempty"`
		RemoveOnFail     any          `json:"removeOnFail,omitempty"`
	}{w.Attempts, w.Backoff, w.Priority, w.RemoveOnComplete, w.RemoveOnFail})
}

func (s Scheduler) checkBounds() error {
	if s.Limit < 0 {
		return optErr("Limit", "negative")
	}
	if !s.EndDate.IsZero() && !s.StartDate.IsZero() && s.EndDate.Before(s.StartDate) {
		return optErr("EndDate", "before StartDate")
	}
	return nil
}

// firstRun is the first run a BullMQ upsert makes: the first match after
// now or StartDate, whichever is later; none (ErrScheduleEnded) once
// EndDate has passed or when no match comes before it.
func (s Scheduler) firstRun(loc *time.Location, now time.Time) (time.Time, error) {
	if !s.EndDate.IsZero() && now.After(s.EndDate) {
		return time.Time{}, fmt.Errorf("end date %s has passed: %w", s.EndDate.Format(time.RFC3339), ErrScheduleEnded)
	}
	after := now
	if s.StartDate.After(after) {
		after = s.StartDate
	}
	first, err := nextRun(s.Pattern, loc, after)
	if err != nil {
		return time.Time{}, err
	}
	if !s.EndDate.IsZero() && first.After(s.EndDate) {
		return time.Time{}, fmt.Errorf("no run of %q before the end date %s: %w", s.Pattern,
			s.EndDate.Format(time.RFC3339), ErrScheduleEnded)
	}
	return first, nil
}

// boundArgs are scheduler_upsert.lua's ARGV[10..12].
func (s Scheduler) boundArgs() (limit, start, end string) {
	if s.Limit > 0 {
		limit = strconv.Itoa(s.Limit)
	}
	if !s.StartDate.IsZero() {
		start = strconv.FormatInt(s.StartDate.UnixMilli(), 10)
	}
	if !s.EndDate.IsZero() {
		end = strconv.FormatInt(s.EndDate.UnixMilli(), 10)
	}
	return limit, start, end
}

// RemoveScheduler deletes scheduler id and every run of it not taken: its
// pending run, and runs a consumer took and put back (Defer), which would
// otherwise still run after their scheduler is gone. A run held now finishes.
// It reports whether the scheduler existed.
func (q *Queue) RemoveScheduler(ctx context.Context, id string) (bool, error) {
	if err := ValidateSchedulerID(id); err != nil {
		return false, err
	}
	res, err := q.run(ctx, schedulerRemoveScript, []string{q.keys.scheduler(id)}, id)
	if err != nil {
		return false, fmt.Errorf("remove scheduler %q from %s: %w", id, q.name, err)
	}
	n, _ := res.(int64)
	return n == 1, nil
}

// Schedulers lists the queue's schedulers in id order, in one round trip.
func (q *Queue) Schedulers(ctx context.Context) ([]SchedulerInfo, error) {
	res, err := q.run(ctx, schedulersScript, nil)
	if err != nil {
		return nil, fmt.Errorf("list schedulers of %s: %w", q.name, err)
	}
	flat, _ := res.([]any)
	out := make([]SchedulerInfo, 0, len(flat)/3)
	for i := 0; i+2 < len(flat); i += 3 {
		id, _ := flat[i].(string)
		next, _ := flat[i+1].(string)
		fields, _ := flat[i+2].([]any)
		out = append(out, parseScheduler(id, next, fields))
	}
	return out, nil
}

func parseScheduler(id, next string, flat []any) SchedulerInfo {
	f := make(map[string]string, len(flat)/2)
	for i := 0; i+1 < len(flat); i += 2 {
		k, _ := flat[i].(string)
		v, _ := flat[i+1].(string)
		f[k] = v
	}
	info := SchedulerInfo{ID: id}
	info.Pattern = f["pattern"]
	info.TZ = f["tz"]
	info.JobName = f["name"]
	if d := f["data"]; d != "" && json.Valid([]byte(d)) {
		info.Data = json.RawMessage(d)
	} else {
		info.Data = json.RawMessage("{}")
	}
	if opts, err := parseOpts(f["opts"]); err == nil {
		info.Attempts = opts.Attempts
		info.Backoff = opts.Backoff
		info.Priority = opts.Priority
		info.RemoveOnComplete = opts.RemoveOnComplete
		info.RemoveOnFail = opts.RemoveOnFail
	}
	info.Every = time.Duration(atoi(f["every"])) * time.Millisecond
	info.Limit = atoi(f["limit"])
	if ms := atoi(f["startDate"]); ms > 0 {
		info.StartDate = time.UnixMilli(int64(ms))
	}
	if ms := atoi(f["endDate"]); ms > 0 {
		info.EndDate = time.UnixMilli(int64(ms))
	}
	info.Iterations = atoi(f["ic"])
	if ms, err := strconv.ParseFloat(next, 64); err == nil && ms > 0 {
		info.Next = time.UnixMilli(int64(ms))
	}
	return info
}

// recordNextRun completes a take of a scheduler's run (see Scheduler). The
// take itself has already happened, so a failure here is logged, not
// returned: the schedule is repaired by the next take or upsert.
func (q *Queue) recordNextRun(ctx context.Context, now time.Time, req []any) {
	flag, _ := req[0].(int64)
	sid, _ := req[1].(string)
	pattern, _ := req[2].(string)
	tz, _ := req[3].(string)
	baseMs, _ := req[4].(int64)
	base := time.UnixMilli(baseMs)
	// The take has happened: finish its bookkeeping even if the caller's
	// context ends now.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	err := func() error {
		// A peer's scheduler may use forms we refuse at upsert (L, W, #):
		// those runs follow gronx rather than stop.
		if err := checkString("Pattern", pattern, 256); err != nil || !gronx.IsValid(strings.TrimSpace(pattern)) {
			return optErr("Pattern", "%q is not a valid cron pattern", pattern)
		}
		loc, err := loadZone(tz)
		if err != nil {
			return err
		}
		create := ""
		after := base
		if flag == 2 {
			if now.After(after) {
				after = now
			}
			t, err := nextRun(pattern, loc, after)
			if err != nil {
				return err
			}
			create = strconv.FormatInt(t.UnixMilli(), 10)
			after = t
		}
		nx, err := nextRun(pattern, loc, after)
		if err != nil {
			return err
		}
		_, err = q.run(ctx, schedulerAdvanceScript, []string{q.keys.scheduler(sid)},
			sid, baseMs, create, nx.UnixMilli())
		return err
	}()
	if err != nil {
		q.log.Warn("scheduler_advance_failed", "scheduler", sid, "err", err)
	}
}
