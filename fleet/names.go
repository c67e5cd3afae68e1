package fleet

import (
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"unicode"
)

// MaxNameLen is the longest worker name: the name is a Valkey key segment and a
// field on every log line.
const MaxNameLen = 64

// Name rule violations. ValidateName wraps one of these in a *NameError, so
// callers can branch with errors.Is and still print the offending value.
var (
	ErrNameEmpty    = errors.New("name is empty")
	ErrNameTooLong  = errors.New("name is longer than 64 characters")
	ErrNameLeading  = errors.New("name must start with a letter or digit")
	ErrNameCharset  = errors.New("name may contain only letters, digits, '.', '_' and '-'")
	ErrNameReserved = errors.New("name must not end in .json or .log")
)

// NameError reports which rule a worker name broke.
type NameError struct {
	Name string // the refused value, as given
	Rule error  // one of the ErrName* sentinels
}

func (e *NameError) Error() string {
	return fmt.Sprintf("worker name %q: %v", e.Name, e.Rule)
}

func (e *NameError) Unwrap() error { return e.Rule }

// nameRE is the original's WORKER_NAME_RE. Its alphabet has no ':', ',' or '#',
// which is what lets a name be a key segment and a lease holder prefix unhashed.
var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// reservedTail matches names that would collide with run-record filenames in
// PI_LOGS_DIR (`<name>.json` would be read, and reaped, as a record).
var reservedTail = regexp.MustCompile(`(?i)\.(json|log)$`)

// ValidateName checks a declared worker name and returns a *NameError naming
// the first rule it breaks. A declared name is refused, never altered.
func ValidateName(name string) error {
	if name == "" {
		return &NameError{Name: name, Rule: ErrNameEmpty}
	}
	if !nameRE.MatchString(name) {
		return &NameError{Name: name, Rule: nameRule(name)}
	}
	if reservedTail.MatchString(name) {
		return &NameError{Name: name, Rule: ErrNameReserved}
	}
	return nil
}

// nameRule explains why name fails nameRE.
func nameRule(name string) error {
	for i := 0; i < len(name); i++ {
		if !isNameByte(name[i]) {
			return ErrNameCharset
		}
	}
	if !isAlnum(name[0]) {
		return ErrNameLeading
	}
	return ErrNameTooLong
}

func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

func isNameByte(c byte) bool { return isAlnum(c) || c == '.' || c == '_' || c == '-' }

// SanitizeName reduces a hostname to a valid default name exactly as the
// original does: lowercase, replace every other character with '-', collapse
// runs of '-', trim leading and trailing '-' and '.', cut at 64 and trim again,
// and repair a reserved .json/.log tail by replacing its dot. Anything left
// unusable becomes "worker". A default must never fail; a declared name is
// validated instead.
func SanitizeName(raw string) string {
	var b strings.Builder
	b.Grow(len(raw))
	for _, r := range raw {
		// JavaScript's toLowerCase, then [^a-z0-9._-] -> '-'. Lowercasing is
		// Unicode-wide: the Kelvin sign becomes an ASCII 'k' there too. U+0130
		// is the one unconditional one-to-many mapping ("i" + U+0307).
		if r == '\u0130' {
			b.WriteString("i-")
			continue
		}
		r = unicode.ToLower(r)
		if r < 0x80 && isNameByte(byte(r)) {
			b.WriteRune(r)
		} else {
			b.WriteByte('-')
		}
	}
	cleaned := b.String()
	cleaned = collapseDashes(cleaned)
	cleaned = strings.Trim(cleaned, "-.")
	if len(cleaned) > MaxNameLen {
		cleaned = cleaned[:MaxNameLen]
	}
	cleaned = strings.TrimRight(cleaned, "-.")
	if cleaned == "" || !nameRE.MatchString(cleaned) {
		return "worker"
	}
	if loc := reservedTail.FindStringIndex(cleaned); loc != nil {
		cleaned = cleaned[:loc[0]] + "-" + cleaned[loc[0]+1:]
	}
	return cleaned
}

// collapseDashes replaces every run of '-' with a single '-'.
func collapseDashes(s string) string {
	if !strings.Contains(s, "--") {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	prev := byte(0)
	for i := 0; i < len(s); i++ {
		if s[i] == '-' && prev == '-' {
			continue
		}
		b.WriteByte(s[i])
		prev = s[i]
	}
	return b.String()
}

// DefaultName is this machine's name, sanitized; "worker" when the hostname
// cannot be read. It never fails.
func DefaultName() string {
	h, err := os.Hostname()
	if err != nil {
		return "worker"
	}
	return SanitizeName(h)
}
