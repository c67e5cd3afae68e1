package cronsync

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// cronJSON is one cron trigger with the given on and run bodies.
func cronJSON(on, run string) string {
	return `{"on":{"type":"cron",` + on + `},"run":` + run + `}`
}

const okRun = `{"kind":"local","folder":"/srv/app","flow":"fix","task":"tidy"}`

func file(triggers ...string) []byte {
	return []byte(`{"triggers":[` + strings.Join(triggers, ",") + `]}`)
}

func TestParseTriggersRefusals(t *testing.T) {
	nightly := `"id":"nightly","pattern":"0 3 * * *"`
	tests := []struct {
		name string
		data []byte
		want []string // each must appear in the error
	}{
		{"unknown on key", file(cronJSON(nightly+`,"schedule":"x"`, okRun)),
			[]string{`triggers[0] (id "nightly"): on.schedule: unknown key`}},
		{"misspelled pattern", file(cronJSON(`"id":"nightly","patern":"0 3 * * *"`, okRun)),
			[]string{`triggers[0] (id "nightly"): on.patern: unknown key (did you mean "pattern"?)`,
				`triggers[0] (id "nightly"): on.pattern: required`}},
		{"misspelled run key", file(cronJSON(nightly, `{"kind":"local","foldr":"/srv/app","flow":"fix","task":"t"}`)),
			[]string{`run.foldr: unknown key (did you mean "folder"?)`, `run.folder: required`}},
		{"snake case run key", file(cronJSON(nightly, `{"kind":"local","folder":"/a","flow":"f","task":"t","max_turns":3}`)),
			[]string{`run.max_turns: unknown key (did you mean "maxTurns"?)`}},
		{"unknown trigger key", file(`{"on":{"type":"cron",` + nightly + `},"run":` + okRun + `,"label":"x"}`),
			[]string{`triggers[0] (id "nightly"): label: unknown key`}},
		{"duplicate id", file(cronJSON(nightly, okRun), cronJSON(`"id":"other","pattern":"0 4 * * *"`, okRun), cronJSON(nightly, okRun)),
			[]string{`triggers[2] (id "nightly"): on.id: duplicate of triggers[0]`}},
		{"id with colon", file(cronJSON(`"id":"a:b","pattern":"0 3 * * *"`, okRun)),
			[]string{`triggers[0]`, `on.id: "a:b" contains ':'`}},
		{"id with space", file(cronJSON(`"id":"a b","pattern":"0 3 * * *"`, okRun)),
			[]string{`on.id: "a b": use letters, digits`}},
		{"missing id", file(cronJSON(`"pattern":"0 3 * * *"`, okRun)),
			[]string{`triggers[0]: on.id: required`}},
		{"bad pattern", file(cronJSON(`"id":"nightly","pattern":"61 * * * *"`, okRun)),
			[]string{`triggers[0] (id "nightly"): on.pattern: "61 * * * *" is not a valid cron pattern`}},
		{"four fields", file(cronJSON(`"id":"n","pattern":"* * * *"`, okRun)),
			[]string{`on.pattern: "* * * *" has 4 fields; want 5 (minute first) or 6 (second first)`}},
		{"shorthand", file(cronJSON(`"id":"n","pattern":"@daily"`, okRun)),
			[]string{`on.pattern: "@daily" has 1 fields`}},
		{"year field", file(cronJSON(`"id":"n","pattern":"0 0 1 1 * 2030"`, okRun)),
			[]string{`on.pattern: "0 0 1 1 * 2030" is not a valid cron pattern`}},
		{"never fires", file(cronJSON(`"id":"n","pattern":"0 0 30 2 *"`, okRun)),
			[]string{`on.pattern: "0 0 30 2 *" never fires`}},
		{"pattern not a string", file(cronJSON(`"id":"n","pattern":5`, okRun)),
			[]string{`on.pattern: must be a string`}},
		{"unknown zone", file(cronJSON(nightly+`,"tz":"Mars/Olympus_Mons"`, okRun)),
			[]string{`triggers[0] (id "nightly"): on.tz: unknown time zone "Mars/Olympus_Mons"`}},
		{"local zone", file(cronJSON(nightly+`,"tz":"Local"`, okRun)),
			[]string{`on.tz: "Local" means a different zone on every host`}},
		{"empty zone", file(cronJSON(nightly+`,"tz":""`, okRun)),
			[]string{`on.tz: must be an IANA zone`}},
		{"path zone", file(cronJSON(nightly+`,"tz":"../../etc/passwd"`, okRun)),
			[]string{`on.tz: "../../etc/passwd" is not an IANA zone name`}},
		{"relative folder", file(cronJSON(nightly, `{"kind":"local","folder":"srv/app","flow":"fix","task":"t"}`)),
			[]string{`triggers[0] (id "nightly"): run.folder: must be an absolute path`}},
		{"unclean folder", file(cronJSON(nightly, `{"kind":"local","folder":"/srv/../app","flow":"fix","task":"t"}`)),
			[]string{`run.folder: must be a clean path ("/app")`}},
		{"forge kind", file(cronJSON(nightly, `{"kind":"github","folder":"/a","flow":"fix","task":"t"}`)),
			[]string{`run.kind: must be "local" for a cron trigger, not "github"`}},
		{"flow and command", file(cronJSON(nightly, `{"kind":"local","folder":"/a","flow":"fix","command":"c","task":"t"}`)),
			[]string{`run.flow: exactly one of flow and command is required`}},
		{"neither flow nor command", file(cronJSON(nightly, `{"kind":"local","folder":"/a"}`)),
			[]string{`run.flow: exactly one of flow and command is required`}},
		{"flow without task", file(cronJSON(nightly, `{"kind":"local","folder":"/a","flow":"fix"}`)),
			[]string{`run.task: required with a flow`}},
		{"waitFor on cron", file(cronJSON(nightly, `{"kind":"local","folder":"/a","flow":"f","task":"t","waitFor":[{"after":"1h"}]}`)),
			[]string{`run.waitFor: a cron trigger cannot wait`}},
		{"resume on cron", file(cronJSON(nightly, `{"kind":"local","folder":"/a","flow":"f","task":"t","resume":true}`)),
			[]string{`run.resume: a cron trigger cannot resume a session`}},
		{"bad tool", file(cronJSON(nightly, `{"kind":"local","folder":"/a","flow":"f","task":"t","excludeTools":["bash","rm"]}`)),
			[]string{`run.excludeTools[1]: "rm" is not one of`}},
		{"secret references", file(cronJSON(nightly, `{"kind":"local","folder":"/a","flow":"f","task":"t","secrets":{"GH_TOKEN":"op://ci/gh"}}`)),
			[]string{`run.secrets: per-trigger secret references are not supported: name a resolver with secretsProfile`}},
		{"backend", file(cronJSON(nightly, `{"kind":"local","folder":"/a","flow":"f","task":"t","backend":"pi"}`)),
			[]string{`run.backend: only the local Docker engine is supported`}},
		{"bad maxTurns", file(cronJSON(nightly, `{"kind":"local","folder":"/a","flow":"f","task":"t","maxTurns":1.5}`)),
			[]string{`run.maxTurns: must be a whole number`}},
		{"empty models", file(cronJSON(nightly, `{"kind":"local","folder":"/a","flow":"f","task":"t","models":[]}`)),
			[]string{`run.models: must be an array of 1 to 16`}},
		{"bad cost", file(cronJSON(nightly, `{"kind":"local","folder":"/a","flow":"f","task":"t","maxCostUsd":"0"}`)),
			[]string{`run.maxCostUsd: must be a positive decimal string`}},
		{"run missing", file(`{"on":{"type":"cron",` + nightly + `}}`),
			[]string{`triggers[0] (id "nightly"): run: must be an object`}},
		{"trigger not an object", file(`[]`),
			[]string{`triggers[0]: must be an object`}},
		{"on without type", file(`{"on":{"id":"x"},"run":{}}`),
			[]string{`triggers[0]: on.type: must be a non-empty string`}},
		{"webhook run not an object", file(`{"on":{"type":"label","any":["x"]},"run":"fix"}`),
			[]string{`triggers[0]: run: must be an object`}},
		{"top-level unknown key", []byte(`{"triggers":[],"trigers":[]}`),
			[]string{`trigers: unknown key (did you mean "triggers"?)`}},
		{"triggers not an array", []byte(`{"triggers":{}}`), []string{`triggers: must be an array`}},
		{"no triggers", []byte(`{}`), []string{`triggers: must be an array`}},
		{"not JSON", []byte("{\"triggers\": [\n  {,\n]}"), []string{`invalid JSON at line 2, column 4`}},
		{"duplicate key", file(`{"on":{"type":"cron","id":"a","id":"b","pattern":"0 3 * * *"},"run":` + okRun + `}`),
			[]string{`triggers[0].on: key "id" appears twice`}},
		{"invalid UTF-8", []byte("{\"triggers\":[\"\xff\"]}"), []string{`not valid UTF-8`}},
		{"empty", nil, []string{`invalid JSON`}},
		{"NUL in task", file(cronJSON(nightly, `{"kind":"local","folder":"/a","flow":"f","task":"a\u0000b"}`)),
			[]string{`run.task: contains a NUL byte`}},
		{"too many triggers", file(strings.Repeat(`{"on":{"type":"label"}},`, MaxTriggers) + `{"on":{"type":"label"}}`),
			[]string{`triggers: 1001 triggers, more than 1000`}},
		{"deep nesting", file(`{"on":{"type":"label"},"x":` + strings.Repeat("[", 100) + strings.Repeat("]", 100) + `}`),
			[]string{`nested deeper than 64 levels`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseTriggers(tt.data)
			if err == nil {
				t.Fatalf("accepted: %+v", got)
			}
			if got != nil {
				t.Errorf("returned a value with the error: %+v", got)
			}
			if !errors.Is(err, ErrInvalidTriggers) {
				t.Errorf("error does not wrap ErrInvalidTriggers: %v", err)
			}
			var te *TriggerError
			if !errors.As(err, &te) {
				t.Errorf("error holds no *TriggerError: %v", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q:\n%v", w, err)
				}
			}
		})
	}
}

func TestParseTriggersCollectsEveryProblem(t *testing.T) {
	data := file(
		cronJSON(`"id":"a","pattern":"61 * * * *"`, okRun),
		cronJSON(`"id":"b","pattern":"0 3 * * *"`, `{"kind":"local","folder":"rel","flow":"f","task":"t"}`),
		`{"on":{"type":"label","any":["x"]},"run":{"kind":"github"}}`,
		cronJSON(`"id":"c","pattern":"0 3 * * *","tz":"Nowhere/Zone"`, okRun),
	)
	_, err := ParseTriggers(data)
	joined, ok := err.(interface{ Unwrap() []error })
	if !ok {
		t.Fatalf("want an errors.Join, got %T: %v", err, err)
	}
	var at []int
	for _, e := range joined.Unwrap() {
		var te *TriggerError
		if !errors.As(e, &te) {
			t.Fatalf("not a *TriggerError: %v", e)
		}
		at = append(at, te.Index)
	}
	if want := []int{0, 1, 3}; !equalInts(at, want) {
		t.Fatalf("problems at triggers %v, want %v:\n%v", at, want, err)
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestParseTriggersAccepts(t *testing.T) {
	data := file(
		`{"on":{"type":"label","any":["pi"]},"run":{"kind":"github","flow":"fix","replicas":2}}`,
		cronJSON(`"pattern":"0 3 * * *","id":"nightly"`, `{"task":"tidy up","flow":"fix","folder":"/srv/app","kind":"local"}`),
		cronJSON(`"id":"every-10s","pattern":"*/10 * * * * *","tz":"Asia/Tokyo"`,
			`{"kind":"local","folder":"/srv/b","command":"lint","image":"pi-job:2","secretsProfile":"ci",`+
				`"packages":false,"excludeTools":["bash","write"],"skillsDir":"/srv/skills","github":true,"provider":"anthropic",`+
				`"model":"claude-sonnet-4","maxTurns":40,"models":["a/b","c"],"maxCostUsd":"2.50","network":true}`),
		`{"on":{"type":"comment","phrase":"/pi fix"},"run":{"kind":"gitlab","flow":"fix"},"extra":{"kept":true}}`,
	)
	tr, err := ParseTriggers(data)
	if err != nil {
		t.Fatal(err)
	}
	if len(tr.Cron) != 2 || len(tr.Others) != 2 {
		t.Fatalf("cron %d others %d, want 2 and 2", len(tr.Cron), len(tr.Others))
	}
	n := tr.Cron[0]
	if n.Index != 1 || n.SchedulerID != "nightly" || n.Pattern != "0 3 * * *" || n.TZ != "" {
		t.Errorf("nightly = %+v", n)
	}
	if string(n.Run) != `{"task":"tidy up","flow":"fix","folder":"/srv/app","kind":"local"}` {
		t.Errorf("Run is not the run object as written: %s", n.Run)
	}
	if n.Local.Folder != "/srv/app" || n.Local.Flow != "fix" || n.Local.Task != "tidy up" || n.Local.Kind != "local" {
		t.Errorf("Local = %+v", n.Local)
	}
	s := tr.Cron[1]
	if s.Pattern != "*/10 * * * * *" || s.TZ != "Asia/Tokyo" || s.Local.Command != "lint" || s.Local.MaxTurns != 40 ||
		s.Local.Packages == nil || *s.Local.Packages || len(s.Local.Models) != 2 ||
		s.Local.MaxCostUSD != "2.50" || !s.Local.GitHub || s.Local.SkillsDir != "/srv/skills" || !s.Local.Network {
		t.Errorf("second entry = %+v", s)
	}
	if o := tr.Others[0]; o.Index != 0 || o.Type != "label" || !strings.Contains(string(o.Raw), `"replicas":2`) {
		t.Errorf("webhook trigger not kept as written: %+v %s", o, o.Raw)
	}
	if o := tr.Others[1]; o.Index != 3 || o.Type != "comment" || !strings.Contains(string(o.Raw), `"extra":{"kept":true}`) {
		t.Errorf("comment trigger not kept as written: %+v %s", o, o.Raw)
	}

	// No cron entry at all is an empty, non-nil set: an opinion.
	tr, err = ParseTriggers([]byte(`{"triggers":[]}`))
	if err != nil || tr.Cron == nil || len(tr.Cron) != 0 {
		t.Fatalf("empty file: %+v, %v", tr, err)
	}
}

func TestMarshalRoundTrip(t *testing.T) {
	data := file(
		`{"on":{"type":"label","any":["<pi>"]},"run":{"kind":"github","flow":"fix"}}`,
		cronJSON(`"id":"n","pattern":"0 3 * * *","tz":"Europe/Amsterdam"`, `{"kind":"local","folder":"/a&b","flow":"f","task":"<do> \u2028 it"}`),
	)
	first, err := ParseTriggers(data)
	if err != nil {
		t.Fatal(err)
	}
	direct, err := first.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	out, err := json.Marshal(first)
	if err != nil {
		t.Fatal(err)
	}
	if string(direct) != string(out) {
		t.Fatalf("MarshalJSON and json.Marshal differ:\n%s\n%s", direct, out)
	}
	second, err := ParseTriggers(out)
	if err != nil {
		t.Fatalf("re-parse of %s: %v", out, err)
	}
	if !equalTriggers(first, second) {
		t.Fatalf("re-parse differs:\n%+v\n%+v", first, second)
	}
}

func TestAuthoredAndReadOwn(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "none.json")
	if got, err := Authored(missing); got != nil || err != nil {
		t.Fatalf("missing file: %v, %v; want nil, nil (abstain)", got, err)
	}
	if own := ReadOwn(""); own.Configured || own.Entries != nil {
		t.Fatalf("unset path: %+v, want not configured", own)
	}
	if own := ReadOwn(missing); !own.Configured || own.Entries != nil || own.Err == nil {
		t.Fatalf("configured but missing: %+v, want configured, nil entries, an error", own)
	}

	empty := tempFile(t, []byte(`{"triggers":[{"on":{"type":"issue","number":1},"run":{"kind":"github"}}]}`))
	got, err := Authored(empty)
	if err != nil || got == nil || len(got) != 0 {
		t.Fatalf("no cron entries: %v, %v; want an empty opinion", got, err)
	}

	bad := tempFile(t, []byte(`{"triggers":[`))
	if _, err := Authored(bad); !errors.Is(err, ErrInvalidTriggers) {
		t.Fatalf("invalid file: %v, want ErrInvalidTriggers", err)
	}
	if own := ReadOwn(bad); !own.Configured || own.Entries != nil || !errors.Is(own.Err, ErrInvalidTriggers) {
		t.Fatalf("invalid file: %+v", own)
	}

	unreadable := filepath.Join(dir, "sub")
	if err := os.Mkdir(unreadable, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := Authored(unreadable); err == nil {
		t.Fatal("a directory read as a triggers file")
	}
}

func TestServed(t *testing.T) {
	here, there := t.TempDir(), filepath.Join(t.TempDir(), "elsewhere")
	set := mustParse(t, triggersFile(
		cronTrigger{id: "a", pattern: "0 3 * * *", folder: here},
		cronTrigger{id: "b", pattern: "0 4 * * *", folder: there},
	))
	served, unserved := Served(set, true, nil)
	if len(served) != 1 || served[0].SchedulerID != "a" {
		t.Fatalf("declared: served %+v", served)
	}
	if len(unserved) != 1 || unserved[0].Entry.SchedulerID != "b" || unserved[0].Reason != UnservedFolderAbsent {
		t.Fatalf("declared: unserved %+v", unserved)
	}
	served, unserved = Served(set, false, nil)
	if len(served) != 2 || len(unserved) != 0 {
		t.Fatalf("undeclared serves everything: %d served, %d unserved", len(served), len(unserved))
	}
}

// The fingerprint of a parsed file is the original's for the same file, and
// moves with every field that reconcile consumes.
func TestFingerprintMatchesOriginal(t *testing.T) {
	raw, err := os.ReadFile("../test/testdata/reference-vectors.json")
	if err != nil {
		t.Fatal(err)
	}
	var vectors struct {
		Fingerprint []struct{ JSON, Want string }
	}
	if err := json.Unmarshal(raw, &vectors); err != nil {
		t.Fatal(err)
	}
	var want string
	for _, v := range vectors.Fingerprint {
		if strings.Contains(v.JSON, `"nightly"`) {
			want = v.Want
		}
	}
	if want == "" {
		t.Fatal("reference vectors hold no cron-set fingerprint")
	}
	// The vector's set, written with other key orders and spacing.
	set := mustParse(t, file(`{ "run": {"task":"t", "folder":"/srv/app","kind":"local","flow":"fix"}, "on": {"pattern":"0 3 * * *","type":"cron","id":"nightly"} }`))
	got, err := Fingerprint(set, "Europe/Amsterdam")
	if err != nil || got != want {
		t.Fatalf("Fingerprint = %q, %v; want the original's %q", got, err, want)
	}

	variants := map[string][]byte{
		"zone":        file(cronJSON(`"id":"nightly","pattern":"0 3 * * *","tz":"Europe/Amsterdam"`, `{"kind":"local","folder":"/srv/app","flow":"fix","task":"t"}`)),
		"folder":      file(cronJSON(`"id":"nightly","pattern":"0 3 * * *"`, `{"kind":"local","folder":"/srv/other","flow":"fix","task":"t"}`)),
		"image":       file(cronJSON(`"id":"nightly","pattern":"0 3 * * *"`, `{"kind":"local","folder":"/srv/app","flow":"fix","task":"t","image":"x:1"}`)),
		"pattern":     file(cronJSON(`"id":"nightly","pattern":"0 4 * * *"`, `{"kind":"local","folder":"/srv/app","flow":"fix","task":"t"}`)),
		"schedulerId": file(cronJSON(`"id":"nightly2","pattern":"0 3 * * *"`, `{"kind":"local","folder":"/srv/app","flow":"fix","task":"t"}`)),
	}
	for name, data := range variants {
		fp, err := Fingerprint(mustParse(t, data), "Europe/Amsterdam")
		if err != nil || fp == want {
			t.Errorf("changing %s left the fingerprint at %q (%v)", name, fp, err)
		}
	}
	if fp, _ := Fingerprint(set, "UTC"); fp == want {
		t.Error("the host zone is not in the fingerprint")
	}
	if fp, err := Fingerprint(nil, "UTC"); fp != "" || err != nil {
		t.Errorf("nil set = %q, %v; want no opinion", fp, err)
	}
	if fp, _ := Fingerprint([]Entry{}, "UTC"); fp == "" {
		t.Error("an empty set must be an opinion")
	}
}

func TestJobData(t *testing.T) {
	set := mustParse(t, file(cronJSON(`"id":"nightly","pattern":"0 3 * * *"`, `{"task":"t <&>","kind":"local","folder":"/srv/app","flow":"fix","maxTurns":7}`)))
	got := string(JobData(set[0]))
	want := `{"flow":"fix","folder":"/srv/app","kind":"cron","maxTurns":7,"schedulerId":"nightly","task":"t \u003c\u0026\u003e"}`
	if got != want {
		t.Fatalf("JobData =\n%s\nwant\n%s", got, want)
	}
	var back map[string]any
	if err := json.Unmarshal([]byte(got), &back); err != nil || back["task"] != "t <&>" {
		t.Fatalf("job data does not decode to the task: %v %v", back, err)
	}
	if JobData(Entry{SchedulerID: "x", Run: json.RawMessage(`[]`)}) != nil {
		t.Fatal("JobData of a non-object run must be nil")
	}
}
