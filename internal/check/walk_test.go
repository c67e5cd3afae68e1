package check

import (
	"errors"
	"strings"
	"testing"
)

func TestWalk_DuplicateKeyNamesTheObject(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, doc string
		match     KeyMatch
		path, key string
	}{
		{"TopLevel", `{"a":1,"b":2,"a":3}`, ExactKeys, "", "a"},
		{"Nested", `{"triggers":[{"on":{"id":"a","type":"cron","id":"b"}}]}`, ExactKeys, "triggers[0].on", "id"},
		{"SecondElement", `{"l":[{"x":1},{"y":1,"y":2}]}`, ExactKeys, "l[1]", "y"},
		{"InArrayOfArrays", `[[1],[{"k":1,"k":2}]]`, ExactKeys, "[1][0]", "k"},
		{"OddKeyQuoted", `{"we.ird":{"k":1,"k":2}}`, ExactKeys, `"we.ird"`, "k"},
		{"Folded", `{"w":{"to":1,"To":2}}`, FoldedKeys, "w", "To"},
		{"FoldedKelvin", `{"k":1,"\u212a":2}`, FoldedKeys, "", "\u212a"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := Walk([]byte(tt.doc), tt.match)
			var dup *DuplicateKeyError
			if !errors.As(err, &dup) {
				t.Fatalf("got %v, want a *DuplicateKeyError", err)
			}
			if dup.Path != tt.path || dup.Key != tt.key {
				t.Fatalf("got path %q key %q, want %q %q", dup.Path, dup.Key, tt.path, tt.key)
			}
		})
	}
	err := Walk([]byte(`{"on":{"id":"a","id":"b"}}`), ExactKeys)
	if got, want := err.Error(), `on: key "id" appears twice`; got != want {
		t.Errorf("message %q, want %q", got, want)
	}
	err = Walk([]byte(`{"id":"a","id":"b"}`), ExactKeys)
	if got, want := err.Error(), `the top level: key "id" appears twice`; got != want {
		t.Errorf("message %q, want %q", got, want)
	}
}

func TestWalk_Accepts(t *testing.T) {
	t.Parallel()
	for _, doc := range []string{
		`{"a":{"a":1},"b":[{"a":1},{"a":2}]}`, // one key in different objects
		`{"to":1,"To":2}`,                     // distinct under ExactKeys
		`[]`, `"s"`, `1.5`, ` {} `,
		`{"x":` + strings.Repeat("[", MaxJSONDepth-1) + strings.Repeat("]", MaxJSONDepth-1) + `}`,
	} {
		if err := Walk([]byte(doc), ExactKeys); err != nil {
			t.Errorf("%s: %v", doc, err)
		}
	}
}

func TestWalk_Depth(t *testing.T) {
	t.Parallel()
	doc := `{"x":` + strings.Repeat("[", MaxJSONDepth) + strings.Repeat("]", MaxJSONDepth) + `}`
	err := Walk([]byte(doc), ExactKeys)
	var deep *DepthError
	if !errors.As(err, &deep) {
		t.Fatalf("got %v, want a *DepthError", err)
	}
	if want := "x" + strings.Repeat("[0]", MaxJSONDepth-1); deep.Path != want || deep.Max != MaxJSONDepth {
		t.Fatalf("got %+v, want path %s", deep, want)
	}
	if !strings.HasSuffix(err.Error(), ": nested deeper than 64 levels") {
		t.Errorf("message %q", err)
	}
}

func TestWalk_Syntax(t *testing.T) {
	t.Parallel()
	for doc, want := range map[string]string{
		``:                 "document is empty",
		`{"a":1`:           "document ends inside a value",
		`{"a":1} {}`:       "unexpected data after the top-level value",
		`{"a":1,}`:         "invalid character",
		`{"a" 1}`:          "invalid character",
		`[1,2]]`:           "unexpected data after the top-level value",
		"{\"a\":\"\xff\"}": "", // Walk does not judge encoding: JSON does
	} {
		err := Walk([]byte(doc), FoldedKeys)
		if want == "" {
			if err != nil {
				t.Errorf("%q: %v", doc, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), want) || strings.HasPrefix(err.Error(), "json: ") {
			t.Errorf("%q: got %v, want %q", doc, err, want)
		}
	}
}

func TestJSON_DuplicateAndDepthAreFieldErrors(t *testing.T) {
	t.Parallel()
	err := JSON([]byte(`{"windows":[{"to":"1","to":"2"}]}`), 1<<10)
	var fe *FieldError
	if !errors.As(err, &fe) || fe.Field != `"to"` || fe.Rule != "duplicate key in windows[0]" {
		t.Fatalf("got %#v", err)
	}
	err = JSON([]byte(`{"folder":"/p","Folder":"/q"}`), 1<<10)
	if !errors.As(err, &fe) || fe.Field != `"Folder"` || fe.Rule != "duplicate key" {
		t.Fatalf("folded, top level: got %#v", err)
	}
	err = JSON([]byte(strings.Repeat("[", MaxJSONDepth+1)+strings.Repeat("]", MaxJSONDepth+1)), 1<<10)
	if !errors.As(err, &fe) || !strings.Contains(fe.Rule, "nested deeper than 64 levels") {
		t.Fatalf("depth: got %#v", err)
	}
	if err := JSON([]byte(`{"a":1}`), 3); err == nil || !strings.Contains(err.Error(), "more than 3") {
		t.Errorf("size: %v", err)
	}
	if err := JSON([]byte("\"\xff\""), 10); err == nil || !strings.Contains(err.Error(), "UTF-8") {
		t.Errorf("UTF-8: %v", err)
	}
}
