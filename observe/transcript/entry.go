package transcript

import (
	"encoding/json"
	"errors"
	"strings"
	"time"
	"unicode/utf8"
)

// Kinds of Entry.
const (
	// KindOut is a line the container printed.
	KindOut = "out"
	// KindModel is a model call the gateway made for the job.
	KindModel = "model"
	// KindNote is a line of the worker's own (a cut, a gap).
	KindNote = "note"
	// KindEnd marks the end of an attempt in the live stream.
	KindEnd = "end"
)

// Bounds of what is kept.
const (
	// MaxLineBytes bounds one line; a longer line is cut (and marked).
	MaxLineBytes = 16 << 10
	// MaxBytesDefault bounds a stored transcript, uncompressed.
	MaxBytesDefault = 8 << 20
	// tailBytes of the output past MaxBytes are still kept: the end of a
	// failed run is what explains it.
	tailBytes = 256 << 10
	// maxEntryBytes bounds one encoded entry read back.
	maxEntryBytes = 2*MaxLineBytes + 1024
)

// Entry is one line of a transcript.
type Entry struct {
	// At is when the worker saw it, in Unix milliseconds.
	At int64 `json:"t"`
	// Kind is KindOut, KindModel, KindNote or KindEnd.
	Kind string `json:"k"`
	// Attempt is the attempt the entry belongs to.
	Attempt int `json:"a,omitempty"`
	// Line is the text of an out or note entry, redacted.
	Line string `json:"line,omitempty"`
	// Call is a model entry's call.
	Call *Call `json:"call,omitempty"`
}

// Call is one model call the gateway forwarded for a job.
type Call struct {
	Provider string `json:"provider"`
	Model    string `json:"model,omitempty"`
	// Status is the provider's HTTP status (0: no answer).
	Status int `json:"status"`
	// Tokens of the call.
	Input      int64 `json:"input"`
	Output     int64 `json:"output"`
	CacheRead  int64 `json:"cacheRead,omitempty"`
	CacheWrite int64 `json:"cacheWrite,omitempty"`
	// Micros is its price in micro-dollars; Estimated when the provider
	// reported no usage.
	Micros    int64 `json:"micros"`
	Estimated bool  `json:"estimated,omitempty"`
	// Millis is how long it took.
	Millis int64 `json:"ms"`
}

// Time is At as a time.
func (e Entry) Time() time.Time { return time.UnixMilli(e.At) }

var errBadEntry = errors.New("transcript: invalid entry")

// decodeEntry parses and re-validates one stored or streamed entry: a
// transcript holds what an untrusted job printed, and the stream may have
// been written by anyone who reaches Valkey.
func decodeEntry(b []byte) (Entry, error) {
	var e Entry
	if len(b) > maxEntryBytes {
		return e, errBadEntry
	}
	if err := json.Unmarshal(b, &e); err != nil {
		return e, errBadEntry
	}
	switch e.Kind {
	case KindOut, KindNote, KindEnd:
		e.Call = nil
	case KindModel:
		if e.Call == nil {
			return e, errBadEntry
		}
		c := e.Call
		c.Provider, c.Model = clip(c.Provider, 64), clip(c.Model, 200)
		if c.Input < 0 || c.Output < 0 || c.CacheRead < 0 || c.CacheWrite < 0 || c.Micros < 0 || c.Millis < 0 {
			return e, errBadEntry
		}
	default:
		return e, errBadEntry
	}
	if e.Attempt < 0 {
		return e, errBadEntry
	}
	e.Line = clip(e.Line, MaxLineBytes+64)
	return e, nil
}

// clip bounds s to n bytes of valid UTF-8.
func clip(s string, n int) string {
	if len(s) > n {
		s = s[:n]
	}
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	return s
}
