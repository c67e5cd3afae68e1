// Package check holds the validation rules shared by the job model, the
// policy files and the configuration, so a value means one thing wherever it
// is read: strict JSON, names, paths, text and durations, with errors that
// name the field and never repeat a value that could be secret.
package check

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

const (
	// NameSyntax is the profile and flow name rule, as error messages print it.
	NameSyntax = `^[A-Za-z0-9._-]+$`
	// MaxNameLen bounds a profile or flow name.
	MaxNameLen = 128
	// MaxPathLen bounds a path.
	MaxPathLen = 4096
	// MaxRefLen bounds a repository or git ref.
	MaxRefLen = 255
)

// FieldError reports which field of a document (a job, a policy file) broke which
// rule. Field is a path such as "waitFor[1].profile" or "windows[2].from". Rule never
// repeats a value that could be secret.
type FieldError struct {
	Field string
	Rule  string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Rule }

func Field(field, format string, args ...any) error {
	return &FieldError{Field: field, Rule: fmt.Sprintf(format, args...)}
}

// Name is the profile/flow charset: no ',' and no ':', so names join and split
// unambiguously in PI_SECRET_PROFILES and in capability tokens.
func Name(s string) bool {
	if s == "" || len(s) > MaxNameLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

var repoSegment = regexp.MustCompile(`^[A-Za-z0-9._-]+$`)

func Repo(s string) bool {
	if len(s) > MaxRefLen {
		return false
	}
	segs := strings.Split(s, "/")
	if len(segs) < 2 {
		return false
	}
	for _, seg := range segs {
		if seg == "." || seg == ".." || !repoSegment.MatchString(seg) {
			return false
		}
	}
	return true
}

// AbsClean returns "" when p is an absolute, clean path, else the rule it breaks.
func AbsClean(p string) string {
	switch {
	case len(p) > MaxPathLen:
		return fmt.Sprintf("longer than %d bytes", MaxPathLen)
	case strings.ContainsRune(p, 0) || !utf8.ValidString(p):
		return "must be valid UTF-8 without NUL"
	case !filepath.IsAbs(p):
		return "must be an absolute path"
	case filepath.Clean(p) != p:
		return fmt.Sprintf("must be a clean path (%s)", Quote(filepath.Clean(p)))
	}
	return ""
}

// Text returns "" when s is valid UTF-8 without NUL and at most max bytes.
func Text(s string, max int) string {
	switch {
	case len(s) > max:
		return fmt.Sprintf("longer than %d bytes (%d)", max, len(s))
	case !utf8.ValidString(s):
		return "not valid UTF-8"
	case strings.IndexByte(s, 0) >= 0:
		return "contains a NUL byte"
	}
	return ""
}

// Duration parses Go duration syntax strictly: no sign, no whitespace, at least
// one unit ("30m", "1h30m", "1.5h"). A bare number is refused: "1800" could mean
// seconds or milliseconds, and guessing wrong is a 1000x error on a paid job.
func Duration(s string) (time.Duration, string) {
	if s == "" || s[0] < '0' || s[0] > '9' {
		return 0, `must be a Go duration such as "30m" or "1h30m" (no sign, no spaces)`
	}
	if _, err := strconv.ParseFloat(s, 64); err == nil {
		return 0, fmt.Sprintf(`needs a unit: %s is ambiguous (write "%ss" or "%sms")`, Quote(s), s, s)
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, `must be a Go duration such as "30m" or "1h30m" (units ns, us, ms, s, m, h)`
	}
	return d, ""
}

// Quote quotes s for an error message, cut to 80 bytes so a hostile value cannot
// flood a log line.
func Quote(s string) string {
	const max = 80
	if len(s) > max {
		cut := max
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		return strconv.Quote(s[:cut]) + "..."
	}
	return strconv.Quote(s)
}

// DecodeStrict decodes one JSON value into v: at most max bytes, valid UTF-8, no
// duplicate keys (compared case-insensitively, as encoding/json matches them), no
// unknown fields, nothing after the value.
func DecodeStrict(data []byte, max int, v any) error {
	if err := JSON(data, max); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return CleanJSONError(err)
	}
	return nil
}

// DecodeRow decodes one element of a policy file's list strictly; errors name the
// element ("windows[2].form: unknown field").
func DecodeRow(data []byte, v any, at string) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		err = CleanJSONError(err)
		var fe *FieldError
		switch {
		case !errors.As(err, &fe):
			return &FieldError{Field: cmp.Or(at, "(document)"), Rule: err.Error()}
		case fe.Field == "(document)" && at != "":
			return &FieldError{Field: at, Rule: fe.Rule}
		case at != "" && fe.Field != "(document)":
			return &FieldError{Field: at + "." + fe.Field, Rule: fe.Rule}
		}
		return fe
	}
	return nil
}

// CleanJSONError strips encoding/json's "json: " prefix; its messages name the field
// and the offset but never the value.
func CleanJSONError(err error) error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		f := te.Field
		if f == "" {
			f = "(document)"
		}
		return &FieldError{Field: f, Rule: "must be a JSON " + jsonKind(te.Type.Kind().String()) + ", not " + te.Value}
	}
	msg := strings.TrimPrefix(err.Error(), "json: ")
	if rest, ok := strings.CutPrefix(msg, "unknown field "); ok {
		return &FieldError{Field: strings.Trim(rest, `"`), Rule: "unknown field"}
	}
	return errors.New(msg)
}

func jsonKind(goKind string) string {
	switch goKind {
	case "string":
		return "string"
	case "bool":
		return "boolean"
	case "slice", "array":
		return "array"
	case "struct", "map", "ptr":
		return "object"
	default:
		return "integer"
	}
}

// JSON checks a whole document: at most max bytes, valid UTF-8, then Walk with
// keys compared as encoding/json matches them (FoldedKeys). encoding/json alone
// keeps the last duplicate silently, so {"to":"06:00","to":"23:00"} would be
// read as whichever came last. A duplicate is a *FieldError naming the key, its
// rule naming the object that holds it; too deep a nesting is a *FieldError
// naming where.
func JSON(data []byte, max int) error {
	if len(data) > max {
		return fmt.Errorf("document is %d bytes, more than %d", len(data), max)
	}
	if !utf8.Valid(data) {
		return errors.New("document is not valid UTF-8")
	}
	err := Walk(data, FoldedKeys)
	var dup *DuplicateKeyError
	var deep *DepthError
	switch {
	case errors.As(err, &dup):
		rule := "duplicate key"
		if dup.Path != "" {
			rule += " in " + dup.Path
		}
		return &FieldError{Field: Quote(dup.Key), Rule: rule}
	case errors.As(err, &deep):
		return &FieldError{Field: cmp.Or(deep.Path, "(document)"), Rule: fmt.Sprintf("nested deeper than %d levels", deep.Max)}
	}
	return err
}

// foldKey folds a key the way encoding/json matches field names (simple Unicode
// folding, which maps the Kelvin sign to k and the long s to s).
func foldKey(k string) string {
	return strings.Map(func(r rune) rune {
		switch r {
		case '\u212a':
			return 'k'
		case '\u017f':
			return 's'
		}
		return r
	}, strings.ToLower(k))
}
