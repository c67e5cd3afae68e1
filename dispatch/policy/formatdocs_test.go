package policy_test

import (
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/pidispatch/pidispatch/cronsync"
	"github.com/pidispatch/pidispatch/dispatch/policy"
)

// fencedJSON returns the ```json blocks of a markdown file.
func fencedJSON(t *testing.T, page string) []string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "docs", page))
	if err != nil {
		t.Fatal(err)
	}
	var blocks []string
	for _, m := range regexp.MustCompile("(?ms)^```json\n(.*?)^```").FindAllStringSubmatch(string(data), -1) {
		blocks = append(blocks, m[1])
	}
	if len(blocks) == 0 {
		t.Fatalf("docs/%s has no ```json example", page)
	}
	return blocks
}

// jsonFields lists the json names of v's exported, tagged fields.
func jsonFields(v any) []string {
	var out []string
	rt := reflect.TypeOf(v)
	for i := range rt.NumField() {
		if name, _, _ := strings.Cut(rt.Field(i).Tag.Get("json"), ","); name != "" && name != "-" {
			out = append(out, name)
		}
	}
	return out
}

// documentsFields checks that the page has a table row for each field.
func documentsFields(t *testing.T, page string, fields ...string) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "docs", page))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fields {
		if !strings.Contains(string(data), "| `"+f+"` |") {
			t.Errorf("docs/%s has no table row for the field %s", page, f)
		}
	}
}

// The reference pages' examples are read by the real parsers, and every
// field the parsers know has its row.
func TestFormatDocs_ExamplesParse(t *testing.T) {
	t.Parallel()
	for _, block := range fencedJSON(t, "pause-windows.md") {
		w, err := policy.ParsePauseWindows([]byte(block))
		if err != nil || w.Len() == 0 {
			t.Errorf("pause-windows.md example: %d windows, %v", w.Len(), err)
		}
	}
	documentsFields(t, "pause-windows.md", append(jsonFields(policy.PauseWindow{}), "windows")...)

	for _, block := range fencedJSON(t, "scoped-limits.md") {
		l, err := policy.ParseScopedLimits([]byte(block))
		if err != nil || l.Len() == 0 {
			t.Errorf("scoped-limits.md example: %d rows, %v", l.Len(), err)
		}
	}
	documentsFields(t, "scoped-limits.md", append(jsonFields(policy.ScopeLimit{}), "version", "limits")...)

	for _, block := range fencedJSON(t, "triggers.md") {
		tr, err := cronsync.ParseTriggers([]byte(block))
		if err != nil || len(tr.Cron) == 0 {
			t.Errorf("triggers.md example: %v", err)
		}
	}
	var runFields []string
	for _, f := range jsonFields(cronsync.LocalRun{}) {
		if f != "secrets" && f != "backend" { // refused on a cron trigger, and the page says so
			runFields = append(runFields, f)
		}
	}
	documentsFields(t, "triggers.md", append(runFields, "triggers", "type", "id", "pattern", "tz")...)
}
