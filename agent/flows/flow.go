package flows

import (
	"embed"
	"fmt"
	"maps"
	"path"
	"regexp"
	"slices"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"
)

// MaxTemplateBytes bounds one flow's file: a template is a page of
// instructions, and every byte of it is paid for on every job of the flow.
const MaxTemplateBytes = 16 << 10

// NameSyntax is the rule a flow's name follows. It is stricter than the
// job's flow field (jobs.Job.Flow) so that a flow's name is also a plain,
// lowercase file name: <name>.md.
const NameSyntax = `^[a-z0-9][a-z0-9_-]{0,63}$`

var nameRE = regexp.MustCompile(NameSyntax)

// Tools are the agent's built-in tools a flow's front matter may exclude.
// Another name would be ignored by the agent, so a flow that thinks it took
// a tool away would still have it: Parse refuses it instead.
var Tools = []string{"read", "bash", "edit", "write", "grep", "find", "ls"}

// frontMatterKeys are the keys a template's front matter may set.
var frontMatterKeys = []string{"excludeTools"}

// Flow is one procedure the agent can be asked to follow: its name, the
// template the host renders into the job's prompt, and the built-in tools it
// takes away from the agent.
type Flow struct {
	// Name is what a job's flow field names.
	Name string
	// Template is the flow's Markdown, front matter removed and trimmed.
	Template string
	// ExcludeTools are built-in tools (Tools) the flow takes away, in the
	// order Tools lists them.
	ExcludeTools []string
}

// ParseError is a flow file that breaks a rule: the flow, the line (1-based,
// 0 when the rule is about the whole file) and the rule.
type ParseError struct {
	Flow string
	Line int
	Rule string
}

func (e *ParseError) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("flow %q: line %d: %s", e.Flow, e.Line, e.Rule)
	}
	return fmt.Sprintf("flow %q: %s", e.Flow, e.Rule)
}

// Parse reads one flow file. It is strict, because a flow that is not what
// its operator meant (a misspelt key, a tool the agent would still have)
// must stop the host at boot rather than run jobs: the name must match
// NameSyntax, the file must be valid UTF-8 of at most MaxTemplateBytes
// without control characters other than newline and tab, the front matter
// (an opening line "---", "key: value" lines, a closing "---") may set only
// excludeTools, to a comma-separated list of Tools, and the template after
// it must not be empty. CRLF line ends and a leading byte-order mark are
// accepted.
func Parse(name string, data []byte) (Flow, error) {
	fail := func(line int, format string, args ...any) (Flow, error) {
		return Flow{}, &ParseError{Flow: name, Line: line, Rule: fmt.Sprintf(format, args...)}
	}
	if !nameRE.MatchString(name) {
		return fail(0, "the name must match %s", NameSyntax)
	}
	if len(data) > MaxTemplateBytes {
		return fail(0, "larger than %d bytes (%d)", MaxTemplateBytes, len(data))
	}
	if !utf8.Valid(data) {
		return fail(0, "not valid UTF-8")
	}
	text := strings.TrimPrefix(string(data), "\uFEFF")
	text = strings.ReplaceAll(text, "\r\n", "\n")
	if line, ok := controlLine(text); !ok {
		return fail(line, "holds a control character (only newline and tab are allowed)")
	}
	f := Flow{Name: name}
	body, bodyLine, err := f.frontMatter(text)
	if err != nil {
		return Flow{}, err
	}
	f.Template = strings.TrimSpace(body)
	if f.Template == "" {
		return fail(bodyLine, "the template is empty")
	}
	return f, nil
}

// controlLine finds the first line holding a control character other than
// newline and tab; ok is false when there is one.
func controlLine(text string) (line int, ok bool) {
	line = 1
	for _, r := range text {
		if r == '\n' {
			line++
			continue
		}
		if r != '\t' && unicode.IsControl(r) {
			return line, false
		}
	}
	return 0, true
}

// frontMatter sets f's front-matter fields from text and returns the text
// after the front matter and the line it starts on. Text that does not open
// with a "---" line has no front matter.
func (f *Flow) frontMatter(text string) (string, int, error) {
	lines := strings.Split(text, "\n")
	if strings.TrimRight(lines[0], " \t") != "---" {
		return text, 1, nil
	}
	seen := map[string]bool{}
	for i := 1; i < len(lines); i++ {
		line := strings.TrimSpace(lines[i])
		if line == "---" {
			return strings.Join(lines[i+1:], "\n"), i + 2, nil
		}
		if line == "" {
			continue
		}
		key, value, ok := strings.Cut(line, ":")
		key, value = strings.TrimSpace(key), strings.TrimSpace(value)
		switch {
		case !ok:
			return "", 0, &ParseError{Flow: f.Name, Line: i + 1, Rule: "a front-matter line must be key: value"}
		case !slices.Contains(frontMatterKeys, key):
			return "", 0, &ParseError{Flow: f.Name, Line: i + 1, Rule: fmt.Sprintf("unknown front-matter key %q (known: %s)", key, strings.Join(frontMatterKeys, ", "))}
		case seen[key]:
			return "", 0, &ParseError{Flow: f.Name, Line: i + 1, Rule: fmt.Sprintf("front-matter key %q is set twice", key)}
		}
		seen[key] = true
		tools, rule := parseTools(value)
		if rule != "" {
			return "", 0, &ParseError{Flow: f.Name, Line: i + 1, Rule: "excludeTools: " + rule}
		}
		f.ExcludeTools = tools
	}
	return "", 0, &ParseError{Flow: f.Name, Line: 1, Rule: `the front matter opened with "---" is never closed by a "---" line`}
}

// parseTools reads "bash, write": names of Tools, each once, returned in
// Tools order so two spellings of one flow compare equal.
func parseTools(value string) ([]string, string) {
	if value == "" {
		return nil, fmt.Sprintf("names no tool (write excludeTools: edit, write; known: %s)", strings.Join(Tools, ", "))
	}
	var named []string
	for _, t := range strings.Split(value, ",") {
		t = strings.TrimSpace(t)
		switch {
		case !slices.Contains(Tools, t):
			return nil, fmt.Sprintf("unknown tool %q (known: %s)", t, strings.Join(Tools, ", "))
		case slices.Contains(named, t):
			return nil, fmt.Sprintf("tool %q is listed twice", t)
		}
		named = append(named, t)
	}
	var out []string
	for _, t := range Tools {
		if slices.Contains(named, t) {
			out = append(out, t)
		}
	}
	return out, ""
}

// Catalog is the flows a host knows, by name. It is a value: With returns a
// new catalog and leaves its receiver as it was, so the built-ins can be
// shared.
type Catalog struct {
	flows map[string]Flow
}

// Lookup is the flow of that name. Its ExcludeTools is the caller's own
// copy, so the shared built-ins cannot be changed through it.
func (c Catalog) Lookup(name string) (Flow, bool) {
	f, ok := c.flows[name]
	f.ExcludeTools = slices.Clone(f.ExcludeTools)
	return f, ok
}

// Names are the catalog's flow names, sorted, for messages that list what a
// host knows.
func (c Catalog) Names() []string {
	return slices.Sorted(maps.Keys(c.flows))
}

// With is c plus extra, a flow of extra replacing one of c (or an earlier
// one of extra) of the same name: an operator's flow overrides a built-in.
// The flows should come from Parse.
func (c Catalog) With(extra ...Flow) Catalog {
	out := Catalog{flows: make(map[string]Flow, len(c.flows)+len(extra))}
	maps.Copy(out.flows, c.flows)
	for _, f := range extra {
		out.flows[f.Name] = f
	}
	return out
}

//go:embed templates/*.md
var templateFS embed.FS

// builtin parses the embedded templates once; a template that does not
// parse is a bug of this package, which its tests catch.
var builtin = sync.OnceValue(func() Catalog {
	entries, err := templateFS.ReadDir("templates")
	if err != nil {
		panic(err)
	}
	c := Catalog{flows: map[string]Flow{}}
	for _, e := range entries {
		data, err := templateFS.ReadFile(path.Join("templates", e.Name()))
		if err != nil {
			panic(err)
		}
		f, err := Parse(strings.TrimSuffix(e.Name(), ".md"), data)
		if err != nil {
			panic("built-in " + err.Error())
		}
		c.flows[f.Name] = f
	}
	return c
})

// Builtin is the flows shipped with pidispatch: default, fix, review,
// answer and plan.
func Builtin() Catalog { return builtin() }
