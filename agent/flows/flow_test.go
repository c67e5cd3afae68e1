package flows_test

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/pidispatch/pidispatch/agent/flows"
)

// The built-ins are the five flows the docs name, each file in templates/
// is one of them, and each parses with the tools it should take away.
func TestBuiltin_TheFiveFlows(t *testing.T) {
	t.Parallel()
	c := flows.Builtin()
	want := []string{"answer", "default", "fix", "plan", "review"}
	if got := c.Names(); !slices.Equal(got, want) {
		t.Fatalf("Names() = %v, want %v", got, want)
	}
	files, err := filepath.Glob(filepath.Join("templates", "*.md"))
	if err != nil || len(files) != len(want) {
		t.Fatalf("templates/*.md = %v (%v), want one file per built-in", files, err)
	}
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		name := strings.TrimSuffix(filepath.Base(file), ".md")
		parsed, err := flows.Parse(name, data)
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		got, ok := c.Lookup(name)
		if !ok || got.Template != parsed.Template || !slices.Equal(got.ExcludeTools, parsed.ExcludeTools) {
			t.Errorf("Builtin()'s %s is not the file's", name)
		}
	}
	for name, tools := range map[string][]string{
		"answer": {"edit", "write"}, "plan": {"edit", "write"},
		"default": nil, "fix": nil, "review": nil,
	} {
		f, _ := c.Lookup(name)
		if !slices.Equal(f.ExcludeTools, tools) {
			t.Errorf("%s excludes %v, want %v", name, f.ExcludeTools, tools)
		}
	}
}

// Each template names the outputs its flow may write, and none names an
// output the host does not read.
func TestBuiltin_TemplatesNameTheirOutputs(t *testing.T) {
	t.Parallel()
	c := flows.Builtin()
	wants := map[string][]string{
		"default": {"/job/out/pr.md"},
		"fix":     {"/job/out/pr.md", "/job/out/comment.md", "a comment to post", "first line is the pull request's title"},
		"review":  {"/job/out/comment.md", "a comment to post", "Do not change code unless"},
		"answer":  {"/job/out/comment.md", "a comment to post", "Change nothing"},
		"plan":    {"/job/out/comment.md", "a comment to post", "Change nothing"},
	}
	for name, phrases := range wants {
		f, _ := c.Lookup(name)
		for _, p := range phrases {
			if !strings.Contains(f.Template, p) {
				t.Errorf("%s does not say %q", name, p)
			}
		}
		for _, line := range strings.Fields(f.Template) {
			if strings.HasPrefix(line, "/job/out/") {
				out := strings.TrimRight(line, ".,:;)")
				if out != "/job/out/pr.md" && out != "/job/out/comment.md" && out != "/job/out/review.json" {
					t.Errorf("%s names %s, which the host does not read", name, out)
				}
			}
		}
		if strings.HasPrefix(f.Template, "---") || strings.HasPrefix(f.Template, "#") {
			t.Errorf("%s starts with %q: front matter left in, or a heading the prompt already gives", name, f.Template[:3])
		}
	}
}

func TestParse_FrontMatter(t *testing.T) {
	t.Parallel()
	f, err := flows.Parse("triage", []byte("\uFEFF---\r\nexcludeTools:  write , bash,edit\r\n\r\n---\r\n\r\nSort the request.\r\n"))
	if err != nil {
		t.Fatal(err)
	}
	if f.Name != "triage" || f.Template != "Sort the request." || !slices.Equal(f.ExcludeTools, []string{"bash", "edit", "write"}) {
		t.Fatalf("got %+v; want the template trimmed and the tools in Tools order", f)
	}
	f, err = flows.Parse("plain", []byte("No front matter.\n---\nexcludeTools: bash\n---\n"))
	if err != nil || f.ExcludeTools != nil || !strings.HasSuffix(f.Template, "---") {
		t.Fatalf("a --- block after the first line is template text: %+v, %v", f, err)
	}
}

func TestParse_RefusesWithTheRule(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, flow, data string
		line             int
		rule             string
	}{
		{"unknown tool", "x", "---\nexcludeTools: edit, rm\n---\nDo it.", 2, `unknown tool "rm" (known: read, bash, edit, write, grep, find, ls)`},
		{"unknown key", "x", "---\nexcludeTools: edit\nmodel: gpt\n---\nDo it.", 3, `unknown front-matter key "model" (known: excludeTools)`},
		{"key twice", "x", "---\nexcludeTools: edit\nexcludeTools: bash\n---\nDo it.", 3, `front-matter key "excludeTools" is set twice`},
		{"tool twice", "x", "---\nexcludeTools: edit, edit\n---\nDo it.", 2, `tool "edit" is listed twice`},
		{"no tool", "x", "---\nexcludeTools:\n---\nDo it.", 2, "names no tool"},
		{"yaml list", "x", "---\nexcludeTools: [edit]\n---\nDo it.", 2, `unknown tool "[edit]"`},
		{"not key value", "x", "---\nexcludeTools\n---\nDo it.", 2, "key: value"},
		{"never closed", "x", "---\nexcludeTools: edit\n", 1, "never closed"},
		{"empty template", "x", "---\nexcludeTools: edit\n---\n\n  \n", 4, "the template is empty"},
		{"empty file", "x", "", 1, "the template is empty"},
		{"control character", "x", "Do\nit\x1b[31m.", 2, "control character"},
		{"invalid UTF-8", "x", "Do \xff it.", 0, "not valid UTF-8"},
		{"too large", "x", strings.Repeat("a", flows.MaxTemplateBytes+1), 0, "larger than 16384 bytes"},
		{"upper-case name", "Fix", "Do it.", 0, "the name must match"},
		{"dotted name", "fix.v2", "Do it.", 0, "the name must match"},
		{"leading dash", "-fix", "Do it.", 0, "the name must match"},
		{"long name", strings.Repeat("a", 65), "Do it.", 0, "the name must match"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := flows.Parse(tt.flow, []byte(tt.data))
			var pe *flows.ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("err = %v, want a *ParseError", err)
			}
			if pe.Flow != tt.flow || pe.Line != tt.line || !strings.Contains(pe.Rule, tt.rule) {
				t.Fatalf("got flow %q line %d rule %q; want flow %q line %d rule containing %q", pe.Flow, pe.Line, pe.Rule, tt.flow, tt.line, tt.rule)
			}
			if !strings.Contains(err.Error(), tt.rule) {
				t.Fatalf("the message %q does not state the rule", err)
			}
		})
	}
}

// An operator's flow replaces the built-in of its name and adds new names;
// the built-ins themselves are never changed.
func TestCatalog_WithOverridesABuiltin(t *testing.T) {
	t.Parallel()
	mine, err := flows.Parse("fix", []byte("---\nexcludeTools: bash\n---\nFix it our way."))
	if err != nil {
		t.Fatal(err)
	}
	triage, err := flows.Parse("triage", []byte("Label it."))
	if err != nil {
		t.Fatal(err)
	}
	c := flows.Builtin().With(mine, triage)
	if f, _ := c.Lookup("fix"); f.Template != "Fix it our way." || !slices.Equal(f.ExcludeTools, []string{"bash"}) {
		t.Fatalf("fix = %+v, want the operator's", f)
	}
	if _, ok := c.Lookup("triage"); !ok {
		t.Fatal("triage was not added")
	}
	if got := c.Names(); !slices.Equal(got, []string{"answer", "default", "fix", "plan", "review", "triage"}) {
		t.Fatalf("Names() = %v", got)
	}
	if f, _ := flows.Builtin().Lookup("fix"); f.Template == "Fix it our way." {
		t.Fatal("With changed the built-ins")
	}
	if _, ok := c.Lookup("nope"); ok {
		t.Fatal("an unknown flow was found")
	}
	if _, ok := (flows.Catalog{}).Lookup("fix"); ok {
		t.Fatal("the empty catalog found a flow")
	}
}

// A caller cannot change a shared built-in through what Lookup returns.
func TestCatalog_LookupReturnsACopy(t *testing.T) {
	t.Parallel()
	f, _ := flows.Builtin().Lookup("answer")
	f.ExcludeTools[0] = "read"
	if g, _ := flows.Builtin().Lookup("answer"); g.ExcludeTools[0] != "edit" {
		t.Fatal("the built-in's tools changed")
	}
}
