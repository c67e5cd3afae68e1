// Package envfile reads a deployment's .env the way systemd's EnvironmentFile
// reads it, and layers it under the process environment, so the worker and
// every pi-dispatch command see one configuration: the one the worker's unit
// starts with.
//
// The rule (docs/configuration.md): the file PI_ENV_FILE names, else ./.env
// when it exists; a variable the shell sets to a non-empty value wins over
// the file's. PI_ENV_FILE=/dev/null reads no file.
package envfile

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// Var is the variable that names the file; it is read from the shell only.
const Var = "PI_ENV_FILE"

// DefaultPath is the file read when PI_ENV_FILE is unset and it exists.
const DefaultPath = ".env"

// maxBytes bounds the read: configuration, not data.
const maxBytes = 1 << 20

// ErrSyntax marks a line systemd would ignore or read differently from what
// it looks like; errors.As finds the *SyntaxError with the file and line.
var ErrSyntax = errors.New("envfile: malformed line")

// SyntaxError names the file and line of a malformed assignment.
type SyntaxError struct {
	File string
	Line int
	// Key is the variable the line assigns, when it could be read.
	Key  string
	Rule string
}

func (e *SyntaxError) Error() string { return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Rule) }
func (e *SyntaxError) Unwrap() error { return ErrSyntax }

// Entry is one assignment: its value as systemd hands it to the process, and
// the line it starts on.
type Entry struct {
	Key   string
	Value string
	Line  int
}

var keyRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// Parse reads KEY=VALUE assignments with systemd's EnvironmentFile rules:
// blank lines and lines starting with '#' or ';' are skipped; whitespace
// around the key and before the value is dropped; 'single' quotes keep
// everything, "double" quotes and a bare backslash escape the next character,
// a backslash at the end of a line continues it; an unquoted value loses its
// trailing whitespace and keeps everything else, a trailing "# ..." included.
// Stricter than systemd, it refuses what systemd silently drops or misreads:
// a line without '=', an invalid name (an "export " prefix included), an
// unterminated quote, and an unquoted value with a trailing " #" comment.
// The last assignment of a key wins, as in systemd.
func Parse(r io.Reader, name string) ([]Entry, error) {
	entries, _, err := parse(r, name, false)
	return entries, err
}

// ParseLenient is Parse that drops each malformed line instead of failing:
// skipped names every line dropped and why. It is for the commands that
// must work whatever else the file holds (the kill switch).
func ParseLenient(r io.Reader, name string) (entries []Entry, skipped []*SyntaxError, err error) {
	return parse(r, name, true)
}

func parse(r io.Reader, name string, lenient bool) ([]Entry, []*SyntaxError, error) {
	data, err := io.ReadAll(io.LimitReader(r, maxBytes+1))
	if err != nil {
		return nil, nil, fmt.Errorf("read %s: %w", name, err)
	}
	if len(data) > maxBytes {
		return nil, nil, fmt.Errorf("read %s: larger than %d bytes", name, maxBytes)
	}
	p := parser{src: data, name: name, line: 1, lenient: lenient}
	entries, err := p.all()
	return entries, p.skipped, err
}

// ParseFile opens path and parses it.
func ParseFile(path string) ([]Entry, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return Parse(f, path)
}

type parser struct {
	src  []byte
	pos  int
	name string
	line int
	key  string // the key of the assignment being read, for SyntaxError.Key
	// lenient skips a malformed line, noting it in skipped, instead of
	// failing the whole file.
	lenient bool
	skipped []*SyntaxError
}

func (p *parser) fail(line int, format string, args ...any) error {
	return &SyntaxError{File: p.name, Line: line, Key: p.key, Rule: fmt.Sprintf(format, args...)}
}

func (p *parser) all() ([]Entry, error) {
	var out []Entry
	for p.pos < len(p.src) {
		pos, line := p.pos, p.line
		e, ok, err := p.next()
		var se *SyntaxError
		if err != nil && p.lenient && errors.As(err, &se) {
			// Only the line it starts on is dropped: the next line is read
			// afresh, so one bad quote cannot swallow the rest of the file.
			p.skipped = append(p.skipped, se)
			p.pos, p.line = pos, line
			p.skipLine()
			continue
		}
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, e)
		}
	}
	return out, nil
}

// next reads one line (or one assignment, with its continuations).
func (p *parser) next() (Entry, bool, error) {
	start := p.line
	p.key = ""
	lineEnd := bytes.IndexByte(p.src[p.pos:], '\n')
	var first []byte
	if lineEnd < 0 {
		first = p.src[p.pos:]
	} else {
		first = p.src[p.pos : p.pos+lineEnd]
	}
	trimmed := strings.TrimSpace(string(first))
	if trimmed == "" || trimmed[0] == '#' || trimmed[0] == ';' {
		p.skipLine()
		return Entry{}, false, nil
	}
	eq := bytes.IndexByte(first, '=')
	if eq < 0 {
		return Entry{}, false, p.fail(start, "not a KEY=VALUE line (systemd ignores it); make it a comment with '#' or add '='")
	}
	key := strings.TrimSpace(string(first[:eq]))
	if !keyRE.MatchString(key) {
		if rest, ok := strings.CutPrefix(key, "export "); ok && keyRE.MatchString(strings.TrimSpace(rest)) {
			return Entry{}, false, p.fail(start, "%q: remove \"export \" (systemd reads the name as \"export %s\" and ignores it)", key, strings.TrimSpace(rest))
		}
		return Entry{}, false, p.fail(start, "%q is not a variable name ([A-Za-z_][A-Za-z0-9_]*)", key)
	}
	p.pos += eq + 1
	p.key = key
	value, err := p.value(start, key)
	if err != nil {
		return Entry{}, false, err
	}
	return Entry{Key: key, Value: value, Line: start}, true, nil
}

func (p *parser) skipLine() {
	if i := bytes.IndexByte(p.src[p.pos:], '\n'); i >= 0 {
		p.pos += i + 1
	} else {
		p.pos = len(p.src)
	}
	p.line++
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\r' }

// value reads from just after '=' to the end of the assignment, leaving pos
// at the start of the next line.
func (p *parser) value(start int, key string) (string, error) {
	var b strings.Builder
	inValue := false
	afterSpace := true // the previous character read was whitespace, or '='
	comment := -1      // b's length where an unquoted '#' after whitespace starts
	keep := 0          // b's length up to the last character not subject to trimming
	for p.pos < len(p.src) {
		c := p.src[p.pos]
		p.pos++
		switch {
		case c == '\n':
			p.line++
			return p.finish(start, key, b.String()[:keep], comment)
		case !inValue && isSpace(c):
			// Whitespace before the value (or after a closing quote) is dropped.
			afterSpace = true
		case c == '\'' && !inValue:
			end := bytes.IndexByte(p.src[p.pos:], '\'')
			if end < 0 {
				return "", p.fail(start, "%s: the ' quote is never closed", key)
			}
			seg := p.src[p.pos : p.pos+end]
			p.line += bytes.Count(seg, []byte{'\n'})
			b.Write(seg)
			p.pos += end + 1
			keep, afterSpace = b.Len(), false
		case c == '"' && !inValue:
			if err := p.doubleQuoted(start, key, &b); err != nil {
				return "", err
			}
			keep, afterSpace = b.Len(), false
		case c == '\\':
			inValue = true
			if p.pos < len(p.src) {
				e := p.src[p.pos]
				p.pos++
				if e == '\n' {
					p.line++ // a continuation line
				} else {
					b.WriteByte(e)
				}
			}
			keep, afterSpace = b.Len(), false
		default:
			inValue = true
			if c == '#' && afterSpace && comment < 0 {
				comment = b.Len()
			}
			b.WriteByte(c)
			afterSpace = isSpace(c)
			if !afterSpace {
				keep = b.Len()
			}
		}
	}
	return p.finish(start, key, b.String()[:keep], comment)
}

// doubleQuoted reads a "..." segment: a backslash escapes " \ ` $ and a
// newline (a continuation), and stays before any other character.
func (p *parser) doubleQuoted(start int, key string, b *strings.Builder) error {
	for p.pos < len(p.src) {
		c := p.src[p.pos]
		p.pos++
		switch {
		case c == '"':
			return nil
		case c == '\\' && p.pos < len(p.src):
			e := p.src[p.pos]
			p.pos++
			switch {
			case e == '\n':
				p.line++
			case strings.IndexByte("\"\\`$", e) >= 0:
				b.WriteByte(e)
			default:
				b.WriteByte('\\')
				b.WriteByte(e)
			}
		default:
			if c == '\n' {
				p.line++
			}
			b.WriteByte(c)
		}
	}
	return p.fail(start, "%s: the \" quote is never closed", key)
}

// finish refuses a value that holds an unquoted comment: systemd would hand
// "value # comment" (or, for "KEY=  # comment", "# comment") to the program.
func (p *parser) finish(start int, key, value string, comment int) (string, error) {
	if comment >= 0 {
		return "", p.fail(start, "%s: the value holds a comment (%q), which systemd keeps as part of the value; put the comment on its own line above (or quote the value if the # belongs to it)", key, strings.TrimSpace(value[min(comment, len(value)):]))
	}
	return value, nil
}

// Source says where a variable's value came from.
type Source int

const (
	// FromDefault: neither the shell nor the file sets it.
	FromDefault Source = iota
	// FromShell: the process environment sets it (it wins over the file).
	FromShell
	// FromFile: the env file sets it and the shell does not.
	FromFile
)

// Env is the process environment with an env file layered under it.
type Env struct {
	// Path is the absolute path of the file read; empty when none was.
	Path  string
	shell func(string) string
	file  map[string]Entry
}

// Load applies the rule: the file PI_ENV_FILE names (it must exist), else
// ./.env when it exists, else no file.
func Load(shell func(string) string) (*Env, error) {
	if path := shell(Var); path != "" {
		e, err := LoadPath(shell, path, true)
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%w (named by %s): create it, or unset %s to read ./.env", err, Var, Var)
		}
		return e, err
	}
	return LoadPath(shell, DefaultPath, false)
}

// LoadPath layers the file at path (none when path is empty) under shell. A
// missing file is an error wrapping fs.ErrNotExist only when required.
func LoadPath(shell func(string) string, path string, required bool) (*Env, error) {
	e := &Env{shell: shell, file: map[string]Entry{}}
	if path == "" {
		return e, nil
	}
	if abs, err := filepath.Abs(path); err == nil {
		path = abs // every message names the file wherever the command ran
	}
	entries, err := ParseFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist) && !required:
		return e, nil
	case errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("env file %s: %w", path, fs.ErrNotExist)
	case err != nil && !errors.Is(err, ErrSyntax):
		return nil, fmt.Errorf("cannot read env file %s: %w; fix its permissions, or set %s=/dev/null to read none", path, err, Var)
	case err != nil:
		return nil, fmt.Errorf("env file %w", err)
	}
	for _, en := range entries {
		e.file[en.Key] = en
	}
	e.Path = path
	return e, nil
}

// Names are the variables the process environment and the env file set,
// sorted, each once: what a check for misspelt variables reads.
func (e *Env) Names(environ []string) []string {
	var out []string
	for k := range e.file {
		out = append(out, k)
	}
	for _, kv := range environ {
		if k, _, ok := strings.Cut(kv, "="); ok {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// LoadLenient applies Load's rule for a command that must run whatever the
// file holds: a malformed line is dropped and a missing or unreadable file
// is read as none, each reported in warnings (a *SyntaxError names its line
// and key). The caller decides whether a dropped line matters to it.
func LoadLenient(shell func(string) string) (*Env, []error) {
	path, required := shell(Var), true
	if path == "" {
		path, required = DefaultPath, false
	}
	e := &Env{shell: shell, file: map[string]Entry{}}
	if abs, err := filepath.Abs(path); err == nil {
		path = abs
	}
	f, err := os.Open(path)
	switch {
	case errors.Is(err, fs.ErrNotExist) && !required:
		return e, nil
	case err != nil:
		return e, []error{fmt.Errorf("env file %s not read: %w (named by %s)", path, err, Var)}
	}
	defer f.Close()
	entries, skipped, err := ParseLenient(f, path)
	if err != nil {
		return e, []error{fmt.Errorf("env file %s not read: %w", path, err)}
	}
	var warnings []error
	for _, se := range skipped {
		warnings = append(warnings, se)
	}
	for _, en := range entries {
		e.file[en.Key] = en
	}
	e.Path = path
	return e, warnings
}

// Getenv is the layered lookup: the shell's non-empty value, else the file's.
func (e *Env) Getenv(key string) string {
	if v := e.shell(key); v != "" {
		return v
	}
	return e.file[key].Value
}

// Source says where key's value comes from, and when the shell wins over a
// different value in the file, that file entry (overridden is then true).
func (e *Env) Source(key string) (src Source, fileEntry Entry, overridden bool) {
	en, inFile := e.file[key]
	if e.shell(key) != "" {
		return FromShell, en, inFile && en.Value != e.shell(key)
	}
	if inFile && en.Value != "" {
		return FromFile, en, false
	}
	return FromDefault, en, false
}

// Describe is Source as words for doctor: "shell", ".env file PATH:LINE",
// "default", with an override named.
func (e *Env) Describe(key string) string {
	src, en, overridden := e.Source(key)
	switch src {
	case FromShell:
		if overridden {
			return fmt.Sprintf("shell (overrides %s:%d)", e.Path, en.Line)
		}
		return "shell"
	case FromFile:
		return fmt.Sprintf(".env file %s:%d", e.Path, en.Line)
	}
	return "default"
}
