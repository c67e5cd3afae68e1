package queue

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/pidispatch/pidispatch/fleet"
)

// Limits on identifiers. BullMQ has none; a bounded, printable id keeps
// keys, logs and file names sane.
const (
	maxIDBytes   = 512 // a dedup id
	maxNameBytes = 1024
	// PriorityLimit is the largest priority BullMQ accepts (2^21 - 1).
	PriorityLimit = 1<<21 - 1
)

// Backoff types, as BullMQ names them.
const (
	BackoffFixed       = "fixed"
	BackoffExponential = "exponential"
)

// AddOptions are the options of one job. The zero value adds a job with a
// numbered id, ready now, one attempt, kept forever once finished.
type AddOptions struct {
	// JobID is a custom id. A job with this id that already exists is not
	// added again (Add reports added=false). BullMQ's rules apply: not an
	// integer ("123" is refused, the counter owns those) and no ":" unless
	// in the three-part form "a:b:c". Empty: take the next number.
	JobID string
	// Delay keeps the job in delayed for this long, counted on the server's
	// clock. Millisecond resolution.
	Delay time.Duration
	// Attempts is how many times the job may run when it fails; 0 and 1
	// both mean once.
	Attempts int
	// Backoff is the wait before each retry. Zero value: retry at once.
	Backoff Backoff
	// Priority 1..PriorityLimit (lower runs first) puts the job in the
	// prioritized set, which is served after jobs without priority. 0: none.
	Priority int
	// RemoveOnComplete and RemoveOnFail are the retention of the finished
	// job (BullMQ's KeepJobs). Zero value: keep forever.
	RemoveOnComplete Keep
	RemoveOnFail     Keep
	// Dedup, when set, refuses jobs with the same dedup id while the first
	// one is unfinished (TTL 0) or for TTL (BullMQ's deduplication).
	Dedup *Dedup
	// Signature is the job's fleet signature (fleet.Key), kept in
	// its opts as SignatureOpt: BullMQ clients keep opts as they are through
	// retries, and ignore a key they do not know.
	Signature string
}

// SignatureOpt is the opts member that holds a job's fleet signature.
const SignatureOpt = "pisig"

// Backoff says how long to wait before retrying a failed job.
type Backoff struct {
	// Type is BackoffFixed or BackoffExponential; empty with a zero Delay
	// means none.
	Type string
	// Delay is the fixed wait, or the first wait of the exponential series
	// (Delay * 2^(attemptsMade-1)). Millisecond resolution.
	Delay time.Duration
	// Jitter in [0, 1] randomises each wait down by up to that fraction.
	Jitter float64
}

// DelayFor returns the wait after attemptsMade failed attempts (1 after the
// first failure), without jitter, exactly as BullMQ computes it.
func (b Backoff) DelayFor(attemptsMade int) time.Duration {
	ms := durationMs(b.Delay)
	if ms <= 0 {
		return 0
	}
	if b.Type == BackoffExponential {
		ms = int64(math.Floor(math.Pow(2, float64(attemptsMade-1))*float64(ms) + 0.5))
	}
	return time.Duration(ms) * time.Millisecond
}

// Keep is the retention of finished jobs (BullMQ's KeepJobs). The zero value
// keeps every job forever. Age and Count may be combined; both are applied
// each time a job finishes.
type Keep struct {
	// Age removes jobs that finished longer ago than this. Millisecond
	// resolution.
	Age time.Duration
	// Count keeps at most this many most recent jobs.
	Count int
	// None deletes the job as soon as it finishes (BullMQ's `true`).
	None bool
}

// Dedup is BullMQ's `deduplication: {id, ttl, keepLastIfActive}`: a job
// whose dedup id is held by another job is not added (Add reports that
// job's id and added=false).
type Dedup struct {
	ID string
	// TTL 0 holds the id until the holding job finishes; otherwise the id is
	// held for TTL regardless of the job. Millisecond resolution.
	TTL time.Duration
	// KeepLastIfActive, while the holding job is active, keeps the refused
	// job (the latest one, replacing any kept before) and adds it when the
	// holder completes or fails for good, as BullMQ does. The id is then
	// held until the job finishes, so it takes no TTL.
	KeepLastIfActive bool
}

// wireOpts is a job's "opts" field in BullMQ's JSON encoding.
type wireOpts struct {
	Attempts         int          `json:"attempts"`
	Delay            int64        `json:"delay"`
	JobID            string       `json:"jobId,omitempty"`
	Backoff          *wireBackoff `json:"backoff,omitempty"`
	Priority         int          `json:"priority,omitempty"`
	RemoveOnComplete any          `json:"removeOnComplete,omitempty"`
	RemoveOnFail     any          `json:"removeOnFail,omitempty"`
	De               *wireDedup   `json:"de,omitempty"`
	Sig              string       `json:"pisig,omitempty"`
}

type wireBackoff struct {
	Type   string  `json:"type"`
	Delay  int64   `json:"delay"`
	Jitter float64 `json:"jitter,omitempty"`
}

type wireKeep struct {
	Age   *float64 `json:"age,omitempty"` // seconds
	Count *int     `json:"count,omitempty"`
}

type wireDedup struct {
	ID               string `json:"id"`
	TTL              int64  `json:"ttl,omitempty"`
	KeepLastIfActive bool   `json:"keepLastIfActive,omitempty"`
}

// durationMs converts to whole milliseconds, rounding a positive remainder
// up so that a positive duration never becomes 0.
func durationMs(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// checkString refuses invalid UTF-8, control characters and overlong values.
func checkString(field, s string, maxBytes int) error {
	if len(s) > maxBytes {
		return optErr(field, "longer than %d bytes", maxBytes)
	}
	if !utf8.ValidString(s) {
		return optErr(field, "not valid UTF-8")
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			return optErr(field, "contains control character %U", r)
		}
	}
	return nil
}

// ValidateJobID is the rule for a custom job id given to Add:
// fleet.CheckJobID plus BullMQ 5.80.4's own rules (not an integer as JavaScript's parseInt
// would print it back; ":" only in the three-part form "a:b:c").
func ValidateJobID(id string) error {
	if err := fleet.CheckJobID(id); err != nil {
		return optErr("JobID", "%s", err)
	}
	if isJSInteger(id) {
		return optErr("JobID", "%q is an integer; BullMQ reserves those for its id counter", id)
	}
	if strings.Contains(id, ":") && strings.Count(id, ":") != 2 {
		return optErr("JobID", "%q contains ':' outside BullMQ's three-part a:b:c form", id)
	}
	return nil
}

// isJSInteger reports whether `${parseInt(s, 10)}` === s in JavaScript,
// which is BullMQ's test for an integer id.
func isJSInteger(s string) bool {
	digits := strings.TrimPrefix(s, "-")
	if digits == "" {
		return false
	}
	for i := 0; i < len(digits); i++ {
		if digits[i] < '0' || digits[i] > '9' {
			return false
		}
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsInf(f, 0) || math.Abs(f) >= 1e21 {
		return false // JavaScript prints these in exponent form
	}
	printed := strconv.FormatFloat(f, 'f', -1, 64)
	if f == 0 {
		printed = "0" // String(-0) is "0"
	}
	return printed == s
}

func validateKeep(field string, k Keep) error {
	if k.Age < 0 {
		return optErr(field+".Age", "negative")
	}
	if k.Count < 0 {
		return optErr(field+".Count", "negative")
	}
	if k.None && (k.Age != 0 || k.Count != 0) {
		return optErr(field+".None", "cannot be combined with Age or Count")
	}
	return nil
}

func (k Keep) wire() any {
	switch {
	case k.None:
		return true
	case k.Age == 0 && k.Count == 0:
		return nil
	}
	var w wireKeep
	if k.Age > 0 {
		secs := float64(durationMs(k.Age)) / 1000
		w.Age = &secs
	}
	if k.Count > 0 {
		c := k.Count
		w.Count = &c
	}
	return w
}

func validateBackoff(b Backoff) error {
	switch b.Type {
	case BackoffFixed, BackoffExponential:
	case "":
		if b.Delay != 0 || b.Jitter != 0 {
			return optErr("Backoff.Type", "empty but Delay or Jitter set; use %q or %q", BackoffFixed, BackoffExponential)
		}
	default:
		return optErr("Backoff.Type", "unknown backoff type %q; use %q or %q", b.Type, BackoffFixed, BackoffExponential)
	}
	if b.Delay < 0 {
		return optErr("Backoff.Delay", "negative")
	}
	if math.IsNaN(b.Jitter) || b.Jitter < 0 || b.Jitter > 1 {
		return optErr("Backoff.Jitter", "must be within [0, 1]")
	}
	return nil
}

func (b Backoff) wire() *wireBackoff {
	if b.Type == "" {
		return nil
	}
	return &wireBackoff{Type: b.Type, Delay: durationMs(b.Delay), Jitter: b.Jitter}
}

// jobTemplate holds what a job and a scheduler's template have in common.
type jobTemplate struct {
	Attempts         int
	Backoff          Backoff
	Priority         int
	RemoveOnComplete Keep
	RemoveOnFail     Keep
}

func (t jobTemplate) validate() error {
	if t.Attempts < 0 {
		return optErr("Attempts", "negative")
	}
	if err := validateBackoff(t.Backoff); err != nil {
		return err
	}
	if t.Priority < 0 || t.Priority > PriorityLimit {
		return optErr("Priority", "must be within [0, %d]", PriorityLimit)
	}
	if err := validateKeep("RemoveOnComplete", t.RemoveOnComplete); err != nil {
		return err
	}
	return validateKeep("RemoveOnFail", t.RemoveOnFail)
}

func (t jobTemplate) wire() wireOpts {
	return wireOpts{
		Attempts:         t.Attempts,
		Backoff:          t.Backoff.wire(),
		Priority:         t.Priority,
		RemoveOnComplete: t.RemoveOnComplete.wire(),
		RemoveOnFail:     t.RemoveOnFail.wire(),
	}
}

func (o AddOptions) template() jobTemplate {
	return jobTemplate{
		Attempts: o.Attempts, Backoff: o.Backoff, Priority: o.Priority,
		RemoveOnComplete: o.RemoveOnComplete, RemoveOnFail: o.RemoveOnFail,
	}
}

// validate checks every option and returns the job's opts JSON.
func (o AddOptions) validate() ([]byte, error) {
	if o.JobID != "" {
		if err := ValidateJobID(o.JobID); err != nil {
			return nil, err
		}
	}
	if o.Delay < 0 {
		return nil, optErr("Delay", "negative")
	}
	t := o.template()
	if err := t.validate(); err != nil {
		return nil, err
	}
	w := t.wire()
	w.Delay = durationMs(o.Delay)
	w.JobID = o.JobID
	if o.Signature != "" {
		if err := checkString("Signature", o.Signature, 256); err != nil {
			return nil, err
		}
		w.Sig = o.Signature
	}
	if o.Dedup != nil {
		if o.Dedup.ID == "" {
			return nil, optErr("Dedup.ID", "empty")
		}
		if err := checkString("Dedup.ID", o.Dedup.ID, maxIDBytes); err != nil {
			return nil, err
		}
		if o.Dedup.TTL < 0 {
			return nil, optErr("Dedup.TTL", "negative")
		}
		if o.Dedup.KeepLastIfActive && o.Dedup.TTL > 0 {
			return nil, optErr("Dedup.TTL", "not used with KeepLastIfActive (the id is held until the job finishes): set one of them")
		}
		w.De = &wireDedup{ID: o.Dedup.ID, TTL: durationMs(o.Dedup.TTL), KeepLastIfActive: o.Dedup.KeepLastIfActive}
	}
	return json.Marshal(w)
}

// checkData validates job data and returns the bytes to store ("{}" for
// none, as BullMQ stores undefined data).
func checkData(field string, data json.RawMessage) ([]byte, error) {
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) == 0 {
		return []byte("{}"), nil
	}
	if !json.Valid(trimmed) {
		return nil, optErr(field, "not valid JSON")
	}
	return trimmed, nil
}

func checkJobName(field, name string) error {
	return checkString(field, name, maxNameBytes)
}

// parsedOpts is what we read back from a job's opts, written by us or by
// any BullMQ client, leniently: a field of the wrong type reads as absent.
type parsedOpts struct {
	jobTemplate
	DedupID   string
	Signature string
	Repeat    map[string]json.RawMessage
}

func parseOpts(raw string) (parsedOpts, error) {
	// Every job taken is parsed, so the usual object of plain keys is read
	// in place; anything else goes through a map like any JSON.
	var p parsedOpts
	if raw != "" && json.Valid([]byte(raw)) && eachMember(raw, p.apply) {
		return p, nil
	}
	return parseOptsViaMap(raw)
}

// parseOptsViaMap is parseOpts decoding the whole object into a map first:
// what parseOpts does when the in-place reading cannot.
func parseOptsViaMap(raw string) (parsedOpts, error) {
	var p parsedOpts
	if raw == "" {
		return p, nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal([]byte(raw), &m); err != nil {
		return p, err
	}
	for key, value := range m {
		p.apply(key, string(value))
	}
	return p, nil
}

// apply reads one member of the opts object. A key given twice is read
// twice, the last one winning, as when decoding into a map.
func (p *parsedOpts) apply(key, value string) {
	switch key {
	case "attempts":
		p.Attempts = int(numberOf(value))
	case "priority":
		p.Priority = int(numberOf(value))
	case "removeOnComplete":
		p.RemoveOnComplete = parseKeep(json.RawMessage(value))
	case "removeOnFail":
		p.RemoveOnFail = parseKeep(json.RawMessage(value))
	case "backoff":
		p.Backoff = Backoff{}
		var wb struct {
			Type   string  `json:"type"`
			Delay  float64 `json:"delay"`
			Jitter float64 `json:"jitter"`
		}
		if n := numberOf(value); n > 0 {
			p.Backoff = Backoff{Type: BackoffFixed, Delay: msDuration(n)}
		} else if json.Unmarshal([]byte(value), &wb) == nil {
			p.Backoff = Backoff{Type: wb.Type, Delay: msDuration(wb.Delay), Jitter: wb.Jitter}
		}
	case "de":
		p.DedupID = ""
		var de struct {
			ID string `json:"id"`
		}
		if json.Unmarshal([]byte(value), &de) == nil {
			p.DedupID = de.ID
		}
	case SignatureOpt:
		p.Signature = ""
		_ = json.Unmarshal([]byte(value), &p.Signature)
	case "repeat":
		p.Repeat = nil
		_ = json.Unmarshal([]byte(value), &p.Repeat)
	}
}

// eachMember calls fn with each member of the JSON object doc, which must
// be valid JSON, its value as raw JSON text; false, having called fn for
// none or some members, when doc is not an object or a key holds an escape
// (the caller then decodes doc another way).
func eachMember(doc string, fn func(key, value string)) bool {
	i := skipSpace(doc, 0)
	if i >= len(doc) || doc[i] != '{' {
		return false
	}
	i = skipSpace(doc, i+1)
	if i < len(doc) && doc[i] == '}' {
		return true
	}
	for i < len(doc) && doc[i] == '"' {
		end := strings.IndexByte(doc[i+1:], '"')
		if end < 0 {
			return false
		}
		key := doc[i+1 : i+1+end]
		if strings.IndexByte(key, '\\') >= 0 {
			return false
		}
		i = skipSpace(doc, i+2+end)
		if i >= len(doc) || doc[i] != ':' {
			return false
		}
		i = skipSpace(doc, i+1)
		end = skipValue(doc, i)
		if end <= i {
			return false
		}
		fn(key, doc[i:end])
		i = skipSpace(doc, end)
		if i >= len(doc) {
			return false
		}
		switch doc[i] {
		case '}':
			return true
		case ',':
			i = skipSpace(doc, i+1)
		default:
			return false
		}
	}
	return false
}

// skipSpace returns the index of the first byte at or after i that is not
// JSON whitespace.
func skipSpace(doc string, i int) int {
	for i < len(doc) && (doc[i] == ' ' || doc[i] == '\t' || doc[i] == '\n' || doc[i] == '\r') {
		i++
	}
	return i
}

// skipValue returns the index just past the JSON value starting at i in
// valid JSON (strings and nested objects and arrays included), or -1.
func skipValue(doc string, i int) int {
	depth := 0
	for j := i; j < len(doc); j++ {
		switch c := doc[j]; c {
		case '"':
			j++
			for j < len(doc) && doc[j] != '"' {
				if doc[j] == '\\' {
					j++
				}
				j++
			}
			if j >= len(doc) {
				return -1
			}
			if depth == 0 {
				return j + 1
			}
		case '{', '[':
			depth++
		case '}', ']':
			if depth == 0 {
				return j // the end of the enclosing object
			}
			depth--
			if depth == 0 {
				return j + 1
			}
		case ',', ' ', '\t', '\n', '\r':
			if depth == 0 {
				return j
			}
		}
	}
	if depth == 0 {
		return len(doc)
	}
	return -1
}

func parseKeep(raw json.RawMessage) Keep {
	switch s := string(bytes.TrimSpace(raw)); {
	case s == "true":
		return Keep{None: true}
	case s == "" || s == "false" || s == "null":
		return Keep{}
	}
	var n float64
	if json.Unmarshal(raw, &n) == nil {
		if n == 0 {
			return Keep{None: true}
		}
		if n > 0 {
			return Keep{Count: int(n)}
		}
		return Keep{}
	}
	var w struct {
		Age   *float64 `json:"age"`
		Count *float64 `json:"count"`
	}
	if json.Unmarshal(raw, &w) != nil {
		return Keep{}
	}
	var k Keep
	if w.Count != nil {
		if *w.Count == 0 {
			return Keep{None: true}
		}
		if *w.Count > 0 {
			k.Count = int(*w.Count)
		}
	}
	if w.Age != nil && *w.Age > 0 {
		k.Age = msDuration(*w.Age * 1000)
	}
	return k
}

// jsonNumber reads a JSON number, or 0 for anything else. raw is one
// value of a valid JSON document, so a JSON number is exactly what
// strconv.ParseFloat accepts of it (the other values start with a letter,
// a quote, a brace or a bracket, which it refuses).
func jsonNumber(raw json.RawMessage) float64 {
	return numberOf(string(raw))
}

// numberOf is jsonNumber of a value held as a string.
func numberOf(raw string) float64 {
	if len(raw) == 0 {
		return 0
	}
	n, err := strconv.ParseFloat(strings.TrimSpace(raw), 64)
	if err != nil || math.IsNaN(n) || math.IsInf(n, 0) {
		return 0
	}
	return n
}

func msDuration(ms float64) time.Duration {
	if ms <= 0 || math.IsNaN(ms) {
		return 0
	}
	if ms > float64(math.MaxInt64/int64(time.Millisecond)) {
		return time.Duration(math.MaxInt64)
	}
	return time.Duration(ms * float64(time.Millisecond))
}
