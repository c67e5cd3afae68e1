package policy

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/pidispatch/pidispatch/internal/check"
	"github.com/pidispatch/pidispatch/jobs"
)

// Limits of a scoped-limits file.
const (
	// MaxCap bounds a count cap: PI_DAILY_CAP and a row's day, week, month.
	MaxCap = 1_000_000

	ScopedLimitsVersion = 1    // the version this build reads
	MaxScopedLimits     = 1024 // rows
	MaxScopeConcurrent  = 64   // each slot is a lease key probed at every pickup
)

// ScopeLimit is one row of scoped-limits.json: the limits of one scope. A zero field
// means "not limited here".
//
//   - Scope: matched exactly against a job's scope (Job.Scope): an absolute, clean
//     folder or a repository owner/name. "*" is refused: the global caps are
//     PI_DAILY_CAP and PI_WEEKLY_CAP.
//   - Concurrent: jobs of the scope running at once (fleet-wide when the worker name
//     is declared, for repository scopes). Over it, a job is deferred, never refused.
//   - Day, Week, Month: container starts per UTC day, ISO week (Monday, UTC) and
//     UTC month. Over any, the job is refused scope-cap.
//   - DailyCostMicros, WeeklyCostMicros, MonthlyCostMicros: the scope's dollar
//     windows (the file's dailyCostUsd, weeklyCostUsd, monthlyCostUsd), held in
//     micro-dollars. A job of the scope reserves its dollar cap in each.
type ScopeLimit struct {
	Scope      string `json:"scope"`
	Concurrent int    `json:"concurrent,omitempty"`
	Day        int    `json:"day,omitempty"`
	Week       int    `json:"week,omitempty"`
	Month      int    `json:"month,omitempty"`
	// The file spells these as dollar decimals (dailyCostUsd ...); here they
	// are micro-dollars, so they carry no JSON name of their own.
	DailyCostMicros   int64 `json:"-"`
	WeeklyCostMicros  int64 `json:"-"`
	MonthlyCostMicros int64 `json:"-"`
}

// HasDollars reports whether the row sets any dollar window.
func (l ScopeLimit) HasDollars() bool {
	return l.DailyCostMicros > 0 || l.WeeklyCostMicros > 0 || l.MonthlyCostMicros > 0
}

// ScopedLimits is a parsed scoped-limits.json. The zero value has no rows. It is
// immutable and safe for concurrent use.
type ScopedLimits struct {
	rows    []ScopeLimit // sorted by scope
	byScope map[string]int
}

// ParseScopedLimits parses {"version":1,"limits":[{scope, concurrent?, day?, week?,
// month?, dailyCostUsd?, weeklyCostUsd?, monthlyCostUsd?}]} strictly. The version is
// required and a newer one is refused by name (a v2 file read by a v1 build would
// silently drop the limits it does not know). Each row needs at least one limit, each
// count is at least 1, each dollar amount above 0, scopes are unique.
func ParseScopedLimits(data []byte) (ScopedLimits, error) {
	l, err := parseScopedLimits(data)
	if err != nil {
		return ScopedLimits{}, fmt.Errorf("scoped limits: %w", err)
	}
	return l, nil
}

func parseScopedLimits(data []byte) (ScopedLimits, error) {
	if err := check.JSON(data, MaxFileBytes); err != nil {
		return ScopedLimits{}, err
	}
	if err := scopedLimitsVersion(data); err != nil {
		return ScopedLimits{}, err
	}
	rows, err := scopedLimitsRows(data)
	if err != nil {
		return ScopedLimits{}, err
	}
	out := ScopedLimits{rows: make([]ScopeLimit, 0, len(rows)), byScope: make(map[string]int, len(rows))}
	first := map[string]int{}
	for i, raw := range rows {
		row, err := parseScopeRow(raw, i, first)
		if err != nil {
			return ScopedLimits{}, err
		}
		out.rows = append(out.rows, row)
	}
	slices.SortFunc(out.rows, func(a, b ScopeLimit) int { return strings.Compare(a.Scope, b.Scope) })
	for i, r := range out.rows {
		out.byScope[r.Scope] = i
	}
	return out, nil
}

// scopedLimitsVersion checks the file's version before anything else is
// read: a newer file is refused by name, not misread.
func scopedLimitsVersion(data []byte) error {
	var head struct {
		Version json.RawMessage `json:"version"`
	}
	if err := json.Unmarshal(data, &head); err != nil {
		return check.CleanJSONError(err)
	}
	if head.Version == nil {
		return check.Field("version", "required (%d)", ScopedLimitsVersion)
	}
	var version int
	if err := json.Unmarshal(head.Version, &version); err != nil {
		return check.Field("version", "must be the integer %d", ScopedLimitsVersion)
	}
	if version > ScopedLimitsVersion {
		return check.Field("version", "%d is newer than this build reads (%d): upgrade the worker or write a version %d file", version, ScopedLimitsVersion, ScopedLimitsVersion)
	}
	if version != ScopedLimitsVersion {
		return check.Field("version", "must be %d", ScopedLimitsVersion)
	}
	return nil
}

// scopedLimitsRows decodes the document strictly and returns its rows, raw.
func scopedLimitsRows(data []byte) ([]json.RawMessage, error) {
	var doc struct {
		Version int                `json:"version"`
		Limits  *[]json.RawMessage `json:"limits"`
	}
	if err := check.DecodeRow(data, &doc, ""); err != nil {
		return nil, err
	}
	if doc.Limits == nil {
		return nil, check.Field("limits", "required (an empty list means no limits)")
	}
	rows := *doc.Limits
	if len(rows) > MaxScopedLimits {
		return nil, check.Field("limits", "at most %d rows, not %d", MaxScopedLimits, len(rows))
	}
	return rows, nil
}

// scopeRow is one row as the file spells it, so a limit left out is told from one set.
type scopeRow struct {
	Scope      string          `json:"scope"`
	Concurrent *int            `json:"concurrent"`
	Day        *int            `json:"day"`
	Week       *int            `json:"week"`
	Month      *int            `json:"month"`
	DailyUSD   json.RawMessage `json:"dailyCostUsd"`
	WeeklyUSD  json.RawMessage `json:"weeklyCostUsd"`
	MonthlyUSD json.RawMessage `json:"monthlyCostUsd"`
}

// parseScopeRow parses row i strictly. first holds the index of each scope
// the rows before it named; the row's scope is added.
func parseScopeRow(raw json.RawMessage, i int, first map[string]int) (ScopeLimit, error) {
	at := fmt.Sprintf("limits[%d]", i)
	var r scopeRow
	if err := check.DecodeRow(raw, &r, at); err != nil {
		return ScopeLimit{}, err
	}
	if err := claimScope(r.Scope, at, i, first); err != nil {
		return ScopeLimit{}, err
	}
	if r.Concurrent == nil && r.Day == nil && r.Week == nil && r.Month == nil && r.DailyUSD == nil && r.WeeklyUSD == nil && r.MonthlyUSD == nil {
		return ScopeLimit{}, check.Field(at, "needs at least one of concurrent, day, week, month, dailyCostUsd, weeklyCostUsd, monthlyCostUsd")
	}
	row := ScopeLimit{Scope: r.Scope}
	if err := r.counts(at, &row); err != nil {
		return ScopeLimit{}, err
	}
	if err := r.dollars(at, &row); err != nil {
		return ScopeLimit{}, err
	}
	return row, nil
}

// claimScope checks row i's scope and records it in first, as one scope may have one row only.
func claimScope(scope, at string, i int, first map[string]int) error {
	switch {
	case scope == "":
		return check.Field(at+".scope", "required (an absolute folder or owner/name)")
	case scope == "*":
		return check.Field(at+".scope", `"*" is not a scope: the global caps are PI_DAILY_CAP and PI_WEEKLY_CAP`)
	}
	if rule := scopeRule(scope); rule != "" {
		return check.Field(at+".scope", "%s", rule)
	}
	if j, dup := first[scope]; dup {
		return check.Field(at+".scope", "duplicate of limits[%d]", j)
	}
	first[scope] = i
	return nil
}

// counts copies the row's count limits into row, each from 1 up: 0 means "not limited".
func (r scopeRow) counts(at string, row *ScopeLimit) error {
	for _, f := range []struct {
		name string
		v    *int
		max  int
		dst  *int
	}{
		{"concurrent", r.Concurrent, MaxScopeConcurrent, &row.Concurrent},
		{"day", r.Day, MaxCap, &row.Day},
		{"week", r.Week, MaxCap, &row.Week},
		{"month", r.Month, MaxCap, &row.Month},
	} {
		if f.v == nil {
			continue
		}
		if *f.v < 1 || *f.v > f.max {
			return check.Field(at+"."+f.name, "must be between 1 and %d", f.max)
		}
		*f.dst = *f.v
	}
	return nil
}

// dollars copies the row's dollar windows into row in micro-dollars, as ScopeLimit holds them.
func (r scopeRow) dollars(at string, row *ScopeLimit) error {
	for _, f := range []struct {
		name string
		raw  json.RawMessage
		dst  *int64
	}{
		{"dailyCostUsd", r.DailyUSD, &row.DailyCostMicros},
		{"weeklyCostUsd", r.WeeklyUSD, &row.WeeklyCostMicros},
		{"monthlyCostUsd", r.MonthlyUSD, &row.MonthlyCostMicros},
	} {
		if f.raw == nil {
			continue
		}
		m, ok := parseRowUSD(f.raw)
		if !ok {
			return check.Field(at+"."+f.name, `must be a dollar amount above 0 and at most %d, with up to 6 decimals ("2.50")`, jobs.MaxUSD)
		}
		*f.dst = m
	}
	return nil
}

// parseRowUSD reads a row's dollar amount, written as a string ("2.50") or a
// plain number (2.5), into micro-dollars: above 0, at most jobs.MaxUSD.
func parseRowUSD(raw json.RawMessage) (int64, bool) {
	text := string(raw)
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		text = s
	}
	m, err := jobs.ParseUSD(text)
	if err != nil || m <= 0 || m > jobs.MaxUSD*jobs.Micros {
		return 0, false
	}
	return m, true
}

// Lookup returns the limits of exactly this scope.
func (l ScopedLimits) Lookup(scope string) (ScopeLimit, bool) {
	i, ok := l.byScope[scope]
	if !ok {
		return ScopeLimit{}, false
	}
	return l.rows[i], true
}

// Rows returns a copy of every row, sorted by scope (the lease sweep walks them).
func (l ScopedLimits) Rows() []ScopeLimit { return slices.Clone(l.rows) }

// Len is the number of rows.
func (l ScopedLimits) Len() int { return len(l.rows) }

// scopeRule returns "" for a valid job scope: an absolute, clean folder or a
// repository owner/name.
func scopeRule(s string) string {
	if strings.HasPrefix(s, "/") {
		if rule := check.AbsClean(s); rule != "" {
			return "folder " + rule
		}
		return ""
	}
	if !check.Repo(s) {
		return "must be an absolute folder or a repository owner/name"
	}
	return ""
}
