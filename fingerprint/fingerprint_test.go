package fingerprint

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
)

type vectorRow struct {
	JSON      string `json:"json"`
	Canonical string `json:"canonical"`
	Want      string `json:"want"`
}

// loadVectors reads the original's fingerprint vectors (computed by fingerprint.mjs).
func loadVectors(t testing.TB) []vectorRow {
	t.Helper()
	data, err := os.ReadFile("../test/testdata/reference-vectors.json")
	if err != nil {
		t.Fatalf("read reference vectors: %v", err)
	}
	var groups struct {
		Fingerprint []vectorRow `json:"fingerprint"`
	}
	if err := json.Unmarshal(data, &groups); err != nil {
		t.Fatalf("parse reference vectors: %v", err)
	}
	if len(groups.Fingerprint) == 0 {
		t.Fatal("reference vectors hold no fingerprint rows")
	}
	return groups.Fingerprint
}

func unmarshalNumber(t testing.TB, text []byte) any {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(text))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("decode %q: %v", text, err)
	}
	return v
}

// TestReferenceVectors proves byte identity with the original's canonical() and digest, for
// every input shape a caller may hold: raw JSON, encoding/json's float64 tree, its UseNumber tree.
func TestReferenceVectors(t *testing.T) {
	rows := loadVectors(t)
	for _, row := range rows {
		var plain any
		if err := json.Unmarshal([]byte(row.JSON), &plain); err != nil {
			t.Fatalf("row %s: %v", row.JSON, err)
		}
		inputs := map[string]any{
			"raw":       json.RawMessage(row.JSON),
			"bytes":     []byte(row.JSON),
			"float64":   plain,
			"useNumber": unmarshalNumber(t, []byte(row.JSON)),
		}
		for name, in := range inputs {
			got, err := Canonical(in)
			if err != nil {
				t.Errorf("%s %s: Canonical: %v", name, row.JSON, err)
				continue
			}
			if string(got) != row.Canonical {
				t.Errorf("%s %s: Canonical = %s, want %s", name, row.JSON, got, row.Canonical)
			}
			fp, err := Of(in)
			if err != nil || fp != row.Want {
				t.Errorf("%s %s: Of = %q, %v; want %q", name, row.JSON, fp, err, row.Want)
			}
		}
	}
	t.Logf("%d reference rows matched", len(rows))
}

// cronRow finds the reference row that is a cron set with a zone and a schedule.
func cronRow(t testing.TB) (vectorRow, []CronEntry, string) {
	t.Helper()
	for _, row := range loadVectors(t) {
		var set struct {
			TZ        *string `json:"tz"`
			Schedules []struct {
				SchedulerID string          `json:"schedulerId"`
				Pattern     string          `json:"pattern"`
				Run         json.RawMessage `json:"run"`
			} `json:"schedules"`
		}
		if json.Unmarshal([]byte(row.JSON), &set) != nil || set.TZ == nil || *set.TZ != "Europe/Amsterdam" {
			continue
		}
		entries := make([]CronEntry, 0, len(set.Schedules))
		for _, s := range set.Schedules {
			entries = append(entries, CronEntry{SchedulerID: s.SchedulerID, Pattern: s.Pattern, Run: s.Run})
		}
		if len(entries) == 0 {
			t.Fatal("the Europe/Amsterdam row has no schedules")
		}
		return row, entries, *set.TZ
	}
	t.Fatal("no Europe/Amsterdam cron row in the reference vectors")
	return vectorRow{}, nil, ""
}

func TestCronMatchesReference(t *testing.T) {
	row, entries, tz := cronRow(t)
	got, err := Cron(entries, tz)
	if err != nil {
		t.Fatal(err)
	}
	if got != row.Want {
		t.Fatalf("Cron = %s, want %s (reference row %s)", got, row.Want, row.JSON)
	}
}

func TestCronEmptyAndNilAreBothTheEmptyOpinion(t *testing.T) {
	var want string
	for _, row := range loadVectors(t) {
		if row.JSON == `{"tz":"","schedules":[]}` {
			want = row.Want
		}
	}
	if want == "" {
		t.Fatal(`no {"tz":"","schedules":[]} row in the reference vectors`)
	}
	for name, entries := range map[string][]CronEntry{"empty": {}, "nil": nil} {
		got, err := Cron(entries, "")
		if err != nil || got != want {
			t.Errorf("%s: Cron = %q, %v; want %q", name, got, err, want)
		}
	}
	other, err := Cron(nil, "UTC")
	if err != nil || other == want {
		t.Errorf("the zone must ride the hash: Cron(nil, UTC) = %q, %v", other, err)
	}
}

func TestCronRunNullForms(t *testing.T) {
	explicit, err := Cron([]CronEntry{{SchedulerID: "a", Pattern: "* * * * *", Run: json.RawMessage("null")}}, "UTC")
	if err != nil {
		t.Fatal(err)
	}
	want, err := Of(map[string]any{"tz": "UTC", "schedules": []any{
		map[string]any{"schedulerId": "a", "pattern": "* * * * *", "run": nil},
	}})
	if err != nil || explicit != want {
		t.Fatalf("Cron with run null = %q, Of of the literal value = %q (%v)", explicit, want, err)
	}
	for name, run := range map[string]json.RawMessage{"nil": nil, "empty": {}} {
		got, err := Cron([]CronEntry{{SchedulerID: "a", Pattern: "* * * * *", Run: run}}, "UTC")
		if err != nil || got != want {
			t.Errorf("%s run: Cron = %q, %v; want %q", name, got, err, want)
		}
	}
}

func TestCronSensitivity(t *testing.T) {
	a := CronEntry{SchedulerID: "nightly", Pattern: "0 3 * * *", Run: json.RawMessage(`{"folder":"/srv/a","flow":"fix"}`)}
	b := CronEntry{SchedulerID: "hourly", Pattern: "0 * * * *", Run: json.RawMessage(`{"flow":"check"}`)}
	base, err := Cron([]CronEntry{a, b}, "UTC")
	if err != nil {
		t.Fatal(err)
	}
	reordered := a
	reordered.Run = json.RawMessage(` { "flow" : "fix", "folder" : "/srv/a" } `)
	same, err := Cron([]CronEntry{reordered, b}, "UTC")
	if err != nil || same != base {
		t.Errorf("key order and whitespace inside run must not matter: %q vs %q (%v)", same, base, err)
	}
	changed := a
	changed.Run = json.RawMessage(`{"folder":"/srv/b","flow":"fix"}`)
	for name, entries := range map[string][]CronEntry{
		"entry order":  {b, a},
		"run.folder":   {changed, b},
		"one entry":    {a},
		"pattern":      {{SchedulerID: "nightly", Pattern: "0 4 * * *", Run: a.Run}, b},
		"scheduler id": {{SchedulerID: "nightly2", Pattern: a.Pattern, Run: a.Run}, b},
	} {
		got, err := Cron(entries, "UTC")
		if err != nil || got == base {
			t.Errorf("%s: changing it must change the fingerprint: %q, %v", name, got, err)
		}
	}
}

func TestCronInvalidRunNamesTheScheduler(t *testing.T) {
	for _, run := range []string{`{"a":`, `{} {}`, ` `, "\x00"} {
		_, err := Cron([]CronEntry{
			{SchedulerID: "good", Run: json.RawMessage(`{}`)},
			{SchedulerID: "broken-one", Run: json.RawMessage(run)},
		}, "UTC")
		if !errors.Is(err, ErrInvalidJSON) || !strings.Contains(err.Error(), `"broken-one"`) {
			t.Errorf("run %q: error %v should wrap ErrInvalidJSON and name broken-one", run, err)
		}
	}
}

// BenchmarkCron hashes a typical authored cron set: eight entries with small run objects.
func BenchmarkCron(b *testing.B) {
	entries := make([]CronEntry, 8)
	for i := range entries {
		entries[i] = CronEntry{
			SchedulerID: "sched-" + string(rune('a'+i)),
			Pattern:     "*/15 * * * *",
			Run: json.RawMessage(`{"kind":"local","folder":"/srv/app","flow":"fix","task":"Keep the build green",` +
				`"image":"ghcr.io/acme/pi-agent:1.4.2","secrets":["GITHUB_TOKEN","JIRA_TOKEN"],"timeoutMinutes":45}`),
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Cron(entries, "Europe/Amsterdam"); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkOf hashes the same set already decoded by encoding/json, as a map tree.
func BenchmarkOf(b *testing.B) {
	schedules := make([]any, 8)
	for i := range schedules {
		schedules[i] = map[string]any{
			"schedulerId": "sched-" + string(rune('a'+i)),
			"pattern":     "*/15 * * * *",
			"run": map[string]any{"kind": "local", "folder": "/srv/app", "flow": "fix",
				"task": "Keep the build green", "image": "ghcr.io/acme/pi-agent:1.4.2",
				"secrets": []any{"GITHUB_TOKEN", "JIRA_TOKEN"}, "timeoutMinutes": 45.0},
		}
	}
	v := map[string]any{"tz": "Europe/Amsterdam", "schedules": schedules}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Of(v); err != nil {
			b.Fatal(err)
		}
	}
}
