package fleet

import (
	"errors"
	"fmt"
	"unicode"
	"unicode/utf8"
)

// MaxJobIDBytes is the longest job id CheckJobID accepts: short enough for a
// key, a log line and, with its digest, a file name.
const MaxJobIDBytes = 256

// ErrInvalidJobID is wrapped by every CheckJobID refusal.
var ErrInvalidJobID = errors.New("invalid job id")

// JobIDError is a CheckJobID refusal: the rule the id broke, without the
// id, which may be hostile.
type JobIDError struct{ Rule string }

func (e *JobIDError) Error() string { return e.Rule }

// Unwrap makes errors.Is(err, ErrInvalidJobID) true.
func (e *JobIDError) Unwrap() error { return ErrInvalidJobID }

// CheckJobID is the one rule for every job id, whoever wrote the job: 1 to
// MaxJobIDBytes bytes of valid UTF-8 without control characters (C0, DEL
// and C1), Unicode format characters (category Cf: the right-to-left
// override U+202E, zero-width joiners, the byte order mark) or line and
// paragraph separators (U+2028, U+2029). Those make an id print as another
// in a terminal, a log or a page, so an operator could be shown one job and
// act on another. Every Add applies it to a custom id, and a worker applies it
// again to each job it takes before anything is spent, since a peer may
// write a job with any id BullMQ allows: such a job is refused with a record
// and failed, never run.
func CheckJobID(id string) error {
	if id == "" {
		return idErr("empty")
	}
	if len(id) > MaxJobIDBytes {
		return idErr("longer than %d bytes (%d)", MaxJobIDBytes, len(id))
	}
	if !utf8.ValidString(id) {
		return idErr("not valid UTF-8")
	}
	for _, r := range id {
		if r < 0x20 || r >= 0x7f && r <= 0x9f {
			return idErr("contains control character %U", r)
		}
		if unicode.Is(unicode.Cf, r) || r == '\u2028' || r == '\u2029' {
			return idErr("contains format character %U", r)
		}
	}
	return nil
}

func idErr(format string, args ...any) error {
	return &JobIDError{Rule: fmt.Sprintf(format, args...)}
}
