package cronsync

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/adhocore/gronx"

	"github.com/pidispatch/pidispatch/internal/check"
	"github.com/pidispatch/pidispatch/internal/jobrule"
	"github.com/pidispatch/pidispatch/jobs"
	"github.com/pidispatch/pidispatch/queue"
)

// Limits of a triggers file.
const (
	MaxFileBytes    = 4 << 20 // a triggers file is configuration, not data
	MaxTriggers     = 1000    // bounds the parse: a pattern that never fires costs ~3ms to prove
	MaxIDBytes      = 128     // "repeat:<id>:<millis>" stays a valid job id (at most 256 bytes)
	MaxTaskBytes    = jobrule.MaxTaskBytes
	maxNameBytes    = jobrule.MaxNameBytes
	maxSecretRefLen = 256
)

// TypeCron is on.type of a cron trigger.
const TypeCron = "cron"

// ErrInvalidTriggers is wrapped by every *TriggerError.
var ErrInvalidTriggers = errors.New("invalid triggers file")

// TriggerError is one problem of a triggers file. ParseTriggers returns all of
// them at once, joined with errors.Join, so an operator fixes a file in one
// pass rather than one error per restart.
type TriggerError struct {
	// Index is the trigger's position in "triggers", or -1 for the file as a
	// whole.
	Index int
	// ID is the trigger's on.id when it has a readable one.
	ID string
	// Field is the path of the offending field inside the trigger ("on.pattern",
	// "run.folder"), or of the file ("triggers") when Index is -1.
	Field string
	// Reason says what is wrong. It quotes a value only when the value cannot
	// be secret (a pattern, a key name, a zone); never a task or a secret
	// reference.
	Reason string
}

func (e *TriggerError) Error() string {
	var b strings.Builder
	if e.Index >= 0 {
		fmt.Fprintf(&b, "triggers[%d]", e.Index)
		if e.ID != "" {
			fmt.Fprintf(&b, " (id %s)", clipQuote(e.ID))
		}
		b.WriteString(": ")
	}
	if e.Field != "" {
		b.WriteString(e.Field)
		b.WriteString(": ")
	}
	b.WriteString(e.Reason)
	return b.String()
}

// Unwrap makes errors.Is(err, ErrInvalidTriggers) hold.
func (e *TriggerError) Unwrap() error { return ErrInvalidTriggers }

// Triggers is a parsed triggers file.
type Triggers struct {
	// Cron holds the cron entries in file order. It is never nil: a file with
	// no cron entry is an opinion ("no schedulers"), not an absence.
	Cron []Entry
	// Others holds every non-cron trigger as written, for front-ends.
	Others []Other
}

// Other is a trigger that is not cron (a label, comment, pull_request or issue
// rule): checked only for shape here, validated by the front-end that owns it.
type Other struct {
	Index int
	Type  string          // on.type
	Raw   json.RawMessage // the whole trigger object, compacted
}

// Entry is one authored cron trigger.
type Entry struct {
	// Index is the trigger's position in the file.
	Index int
	// SchedulerID is on.id: the job scheduler's id, unique in the file.
	SchedulerID string
	// Pattern is on.pattern as written: 5 fields (minute first) or 6 (second
	// first).
	Pattern string
	// TZ is on.tz, the IANA zone the pattern is read in. Empty: the host's zone
	// (Options.TZ), as the original read every pattern in its host's zone.
	TZ string
	// Run is the run object as written: its keys in the file's order, compacted,
	// with <, >, & and U+2028/9 in \u escapes (the same value). Fingerprints
	// canonicalize it, so key order and spacing never make two hosts disagree.
	Run json.RawMessage
	// Local is Run parsed and validated.
	Local LocalRun
}

// LocalRun is the run object of a cron trigger: a local folder and what to run
// in it. The fields follow the original's triggers.json run schema.
type LocalRun struct {
	Kind           string            `json:"kind"`           // always "local" for cron
	Folder         string            `json:"folder"`         // absolute, clean
	Flow           string            `json:"flow,omitempty"` // exactly one of Flow and Command
	Command        string            `json:"command,omitempty"`
	Task           string            `json:"task,omitempty"` // required with Flow
	Image          string            `json:"image,omitempty"`
	SecretsProfile string            `json:"secretsProfile,omitempty"`
	Secrets        map[string]string `json:"secrets,omitempty"` // ENV name -> reference, never a value
	Packages       *bool             `json:"packages,omitempty"`
	ExcludeTools   []string          `json:"excludeTools,omitempty"`
	SkillsDir      string            `json:"skillsDir,omitempty"`
	GitHub         bool              `json:"github,omitempty"`
	Network        bool              `json:"network,omitempty"` // join the worker's PI_JOB_NETWORK
	Provider       string            `json:"provider,omitempty"`
	Model          string            `json:"model,omitempty"`
	MaxTurns       int               `json:"maxTurns,omitempty"`
	Models         []string          `json:"models,omitempty"`
	MaxCostUSD     string            `json:"maxCostUsd,omitempty"` // a decimal string, as in the original
	Backend        string            `json:"backend,omitempty"`
}

// Keys a cron trigger may carry, by object.
var (
	triggerKeys = []string{"on", "run"}
	cronOnKeys  = []string{"type", "id", "pattern", "tz"}
	cronRunKeys = []string{
		"kind", "folder", "flow", "command", "task", "image", "secretsProfile", "secrets",
		"packages", "excludeTools", "skillsDir", "github", "provider", "model", "maxTurns",
		"models", "maxCostUsd", "backend", "network",
	}
	// refusedOnCron are run keys of other triggers that a cron trigger must not
	// carry, with the reason.
	refusedOnCron = map[string]string{
		"waitFor":      "a cron trigger cannot wait: its schedule is its condition",
		"resume":       "a cron trigger cannot resume a session",
		"replicas":     "replicas are for webhook triggers only",
		"instructions": "instructions are for forge triggers only",
		"repository":   "repository is for forge triggers only",
		"once":         "once is for one-shot forge triggers only",
	}
	// unsupportedRunKeys are keys of the original's run schema that this
	// worker cannot honour. They are refused rather than ignored: an operator
	// expects each to take effect. (Agent settings such as model or maxTurns
	// travel to the job image in /job/job.json, which honours them.)
	unsupportedRunKeys = map[string]string{
		"secrets": "per-trigger secret references are not supported: name a resolver with secretsProfile (PI_SECRET_PROFILES)",
		"backend": "only the local Docker engine is supported",
	}
)

var (
	schedulerIDRE = regexp.MustCompile(`^[A-Za-z0-9._@#-]+$`)
	envNameRE     = regexp.MustCompile(`^[A-Z_][A-Z0-9_]*$`)
)

// ParseTriggers validates a triggers file, {"triggers": [{"on": {...}, "run":
// {...}}, ...]}, and returns its cron entries and its other triggers.
//
// A cron trigger is checked completely: on.type "cron", on.id (unique, letters,
// digits and . _ @ # -, no ':'), on.pattern (5 or 6 fields that gronx, the
// queue and BullMQ all read, and that fire at least once), optional on.tz (an
// IANA zone) and a run object (kind "local", an absolute folder, exactly one of
// flow and command, a task with a flow, and the optional fields of the
// original's schema). An unknown or misspelled key is refused, with a guess at
// the key that was meant. Other triggers are checked only for shape (an object
// whose on is an object with a type, and whose run, when present, is an
// object). Duplicate keys anywhere are refused. No filesystem is touched.
//
// Every problem is returned at once as errors.Join of *TriggerError values.
func ParseTriggers(data []byte) (*Triggers, error) {
	top, err := topObject(data)
	if err != nil {
		return nil, err
	}
	file := &triggerParser{index: -1} // the file's own problems come first
	file.unknownKeys("", top, []string{"triggers"})
	list, ok := file.triggerList(top)
	if !ok {
		return nil, errors.Join(file.errs...)
	}
	out, errs := parseTriggerList(list)
	if errs = append(file.errs, errs...); len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return out, nil
}

// fileError is a problem of the file as a whole, which no trigger owns.
func fileError(field, format string, args ...any) error {
	return &TriggerError{Index: -1, Field: field, Reason: fmt.Sprintf(format, args...)}
}

// topObject reads the file's top-level object; text too big, not UTF-8 or not JSON is the one error to fix.
func topObject(data []byte) (map[string]json.RawMessage, error) {
	switch {
	case len(data) > MaxFileBytes:
		return nil, fileError("", "file is %d bytes, more than %d", len(data), MaxFileBytes)
	case !utf8.Valid(data):
		return nil, fileError("", "file is not valid UTF-8")
	case !json.Valid(data):
		return nil, fileError("", "%s", syntaxError(data))
	}
	// A duplicate key is refused because readers disagree on it: JavaScript's
	// JSON.parse keeps the last, so a Node host and this one could read the
	// same file differently. Keys are looked up exactly here, so only
	// byte-equal keys are duplicates.
	if err := check.Walk(data, check.ExactKeys); err != nil {
		return nil, fileError("", "%v", err)
	}
	top, ok := object(bytes.TrimSpace(data))
	if !ok {
		return nil, fileError("", `must be a JSON object {"triggers": [...]}`)
	}
	return top, nil
}

// triggerList returns the "triggers" array; ok is false when there is none whose triggers could be parsed.
func (p *triggerParser) triggerList(top map[string]json.RawMessage) (list []json.RawMessage, ok bool) {
	rawList, present := top["triggers"]
	if !present || bytes.Equal(rawList, []byte("null")) || json.Unmarshal(rawList, &list) != nil {
		p.fail("triggers", "must be an array")
		return nil, false
	}
	if len(list) > MaxTriggers {
		p.fail("triggers", "%d triggers, more than %d", len(list), MaxTriggers)
		return nil, false
	}
	return list, true
}

// parseTriggerList parses every trigger in file order, so all their problems are reported at once.
func parseTriggerList(list []json.RawMessage) (*Triggers, []error) {
	out := &Triggers{Cron: []Entry{}}
	var errs []error
	firstID := map[string]int{}
	fires := map[string]bool{}
	for i, raw := range list {
		p := &triggerParser{index: i, fires: fires}
		entry, other, isCron := p.parse(raw)
		if isCron && p.id != "" {
			p.claimID(firstID, p.id)
		}
		switch {
		case len(p.errs) > 0:
			errs = append(errs, p.errs...)
		case isCron:
			out.Cron = append(out.Cron, entry)
		default:
			out.Others = append(out.Others, other)
		}
	}
	return out, errs
}

// MarshalJSON writes the triggers back as a triggers file that ParseTriggers
// reads into an equal value: cron entries from their fields, other triggers as
// written, in file order.
func (t *Triggers) MarshalJSON() ([]byte, error) {
	n := len(t.Cron) + len(t.Others)
	items := make([]json.RawMessage, n)
	put := func(i int, raw json.RawMessage) error {
		if i < 0 || i >= n || items[i] != nil {
			return fmt.Errorf("cronsync: trigger index %d out of place", i)
		}
		items[i] = raw
		return nil
	}
	for _, e := range t.Cron {
		raw, err := e.triggerJSON()
		if err != nil {
			return nil, err
		}
		if err := put(e.Index, raw); err != nil {
			return nil, err
		}
	}
	for _, o := range t.Others {
		if err := put(o.Index, compact(o.Raw)); err != nil {
			return nil, err
		}
	}
	var b bytes.Buffer
	b.WriteString(`{"triggers":[`)
	for i, raw := range items {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(raw)
	}
	b.WriteString("]}")
	return b.Bytes(), nil
}

// triggerJSON is the entry as a trigger object.
func (e Entry) triggerJSON() (json.RawMessage, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	on := struct {
		Type    string `json:"type"`
		ID      string `json:"id"`
		Pattern string `json:"pattern"`
		TZ      string `json:"tz,omitempty"`
	}{TypeCron, e.SchedulerID, e.Pattern, e.TZ}
	if err := enc.Encode(on); err != nil {
		return nil, err
	}
	run := compact(e.Run)
	if len(run) == 0 {
		run = json.RawMessage("null")
	}
	return json.RawMessage(`{"on":` + strings.TrimSpace(b.String()) + `,"run":` + string(run) + `}`), nil
}

// triggerParser collects the problems of one trigger.
type triggerParser struct {
	index int
	id    string
	errs  []error
	fires map[string]bool // pattern NUL zone -> fires at least once, shared by one parse
}

func (p *triggerParser) fail(field, format string, args ...any) {
	p.add(field, fmt.Sprintf(format, args...))
}

func (p *triggerParser) add(field, reason string) {
	p.errs = append(p.errs, &TriggerError{Index: p.index, ID: p.id, Field: field, Reason: reason})
}

// unknownKeys reports each key of obj (at prefix) not in known, so a misspelled key is never ignored.
func (p *triggerParser) unknownKeys(prefix string, obj map[string]json.RawMessage, known []string) {
	for _, k := range sortedKeys(obj) {
		if !slices.Contains(known, k) {
			p.add(unknownKey(prefix, k, known))
		}
	}
}

// claimID records id as this trigger's in first, or reports it as a duplicate, as an id names one trigger.
func (p *triggerParser) claimID(first map[string]int, id string) {
	if i, dup := first[id]; dup {
		p.fail("on.id", "duplicate of triggers[%d]", i)
	} else {
		first[id] = p.index
	}
}

// parse checks one trigger. isCron reports which of entry and other it filled.
func (p *triggerParser) parse(raw json.RawMessage) (entry Entry, other Other, isCron bool) {
	trig, ok := object(raw)
	if !ok {
		p.fail("", `must be an object {"on": {...}, "run": {...}}`)
		return entry, other, false
	}
	on, ok := object(trig["on"])
	if !ok {
		p.fail("on", "must be an object with a type")
		return entry, other, false
	}
	typ, ok := stringValue(on["type"])
	if !ok || typ == "" {
		p.fail("on.type", "must be a non-empty string (cron, label, comment, pull_request or issue)")
		return entry, other, false
	}
	if typ != TypeCron {
		if r, present := trig["run"]; present {
			if _, ok := object(r); !ok {
				p.fail("run", "must be an object")
			}
		}
		return entry, Other{Index: p.index, Type: typ, Raw: compact(raw)}, false
	}

	// A cron trigger. Read the id first so every message can name it.
	if id, ok := stringValue(on["id"]); ok && id != "" && len(id) <= MaxIDBytes && utf8.ValidString(id) {
		p.id = id
	}
	entry = Entry{Index: p.index}
	p.unknownKeys("", trig, triggerKeys)
	p.parseOn(on, &entry)
	runRaw, present := trig["run"]
	run, ok := object(runRaw)
	if !present || !ok {
		p.fail("run", "must be an object")
		return entry, other, true
	}
	entry.Run = compact(runRaw)
	before := len(p.errs)
	p.parseRun(run, &entry.Local)
	if len(p.errs) == before {
		p.validateJob(entry)
	}
	return entry, other, true
}

func (p *triggerParser) parseOn(on map[string]json.RawMessage, e *Entry) {
	p.unknownKeys("on", on, cronOnKeys)
	if raw, present := on["id"]; !present {
		p.fail("on.id", "required")
	} else if id, ok := stringValue(raw); !ok {
		p.fail("on.id", "must be a string")
	} else if reason := idRule(id); reason != "" {
		p.fail("on.id", "%s", reason)
	} else {
		e.SchedulerID = id
	}

	if raw, present := on["pattern"]; !present {
		p.fail("on.pattern", "required")
	} else if pattern, ok := stringValue(raw); !ok {
		p.fail("on.pattern", "must be a string")
	} else if reason := patternRule(pattern); reason != "" {
		p.fail("on.pattern", "%s %s", clipQuote(pattern), reason)
	} else {
		e.Pattern = pattern
	}

	if raw, present := on["tz"]; present {
		if tz, ok := stringValue(raw); !ok {
			p.fail("on.tz", "must be a string")
		} else if reason := zoneRule(tz); reason != "" {
			p.fail("on.tz", "%s", reason)
		} else {
			e.TZ = tz
		}
	}
	// A pattern that is valid but never fires in its zone (30 February) would
	// fail only at install time; say so at load instead.
	if e.Pattern != "" && (e.TZ != "" || on["tz"] == nil) && !p.firesOnce(e.Pattern, e.TZ) {
		p.fail("on.pattern", "%s never fires (no matching date)", clipQuote(e.Pattern))
		e.Pattern = ""
	}
}

// firesOnce reports whether pattern has a next run in zone tz (UTC when
// empty), remembering the answer for the rest of the parse.
func (p *triggerParser) firesOnce(pattern, tz string) bool {
	key := pattern + "\x00" + tz
	if ok, known := p.fires[key]; known {
		return ok
	}
	loc := time.UTC
	if tz != "" {
		if l, err := time.LoadLocation(tz); err == nil {
			loc = l
		}
	}
	_, err := gronx.NextTickAfter(strings.TrimSpace(pattern), time.Now().In(loc), false)
	if p.fires != nil {
		p.fires[key] = err == nil
	}
	return err == nil
}

// idRule returns why id cannot be a scheduler id, or "". The charset is the
// job-id charset, because every run's job id is "repeat:<id>:<millis>" and a
// chained child carries it as its parent.
func idRule(id string) string {
	switch {
	case id == "":
		return "must not be empty"
	case len(id) > MaxIDBytes:
		return fmt.Sprintf("longer than %d bytes", MaxIDBytes)
	case strings.Contains(id, ":"):
		return fmt.Sprintf("%s contains ':', which separates the parts of a run's job id", clipQuote(id))
	case !schedulerIDRE.MatchString(id):
		return fmt.Sprintf("%s: use letters, digits and . _ @ # - only", clipQuote(id))
	}
	if err := queue.ValidateSchedulerID(id); err != nil {
		return err.Error()
	}
	return ""
}

// patternRule returns why pattern is not an installable cron pattern, or "".
// The original accepted 5 or 6 fields; the queue (and so BullMQ) must read it
// the same way, which queue.ValidatePattern decides.
func patternRule(pattern string) string {
	if n := len(strings.Fields(pattern)); n != 5 && n != 6 {
		return fmt.Sprintf("has %d fields; want 5 (minute first) or 6 (second first)", n)
	}
	if !gronx.IsValid(strings.TrimSpace(pattern)) || queue.ValidatePattern(pattern) != nil {
		return "is not a valid cron pattern"
	}
	return ""
}

// zoneRule returns why tz is not a zone every host resolves the same, or "".
func zoneRule(tz string) string {
	switch {
	case tz == "":
		return `must be an IANA zone such as "Europe/Amsterdam" (omit tz for the host's zone)`
	case tz == "Local":
		return `"Local" means a different zone on every host; name the zone`
	case len(tz) > 64 || !zoneNameOK(tz):
		return fmt.Sprintf("%s is not an IANA zone name", clipQuote(tz))
	}
	if _, err := time.LoadLocation(tz); err != nil {
		return fmt.Sprintf("unknown time zone %s", clipQuote(tz))
	}
	return ""
}

// zoneNameOK: segments of [A-Za-z0-9_+-] separated by '/', the first starting
// with a letter or '_' (the registry publishes the same shape).
func zoneNameOK(v string) bool {
	for i, seg := range strings.Split(v, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return false
		}
		for j := 0; j < len(seg); j++ {
			c := seg[j]
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '+' || c == '-') {
				return false
			}
		}
		if c := seg[0]; i == 0 && !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_') {
			return false
		}
	}
	return true
}

// parseRun checks the shape of a cron trigger's run object into l. The values
// of a job's fields are the worker's rules (jobs.Job.Validate), which
// validateJob applies to the job data the scheduler will fire, so the file and
// the worker cannot disagree.
func (p *triggerParser) parseRun(run map[string]json.RawMessage, l *LocalRun) {
	p.runKeys(run)
	f := fieldReader{p: p, obj: run, prefix: "run"}
	p.runTarget(f, l)
	p.runWork(f, l)
	p.runAgent(f, l)
}

// runKeys reports the run keys a cron trigger refuses or cannot honour, and the keys nobody knows.
func (p *triggerParser) runKeys(run map[string]json.RawMessage) {
	for _, k := range sortedKeys(run) {
		if reason, refused := refusedOnCron[k]; refused {
			p.fail("run."+k, "%s", reason)
		} else if reason, unsupported := unsupportedRunKeys[k]; unsupported {
			p.fail("run."+k, "%s", reason)
			delete(run, k) // one message per key: no second complaint about its value
		} else if !slices.Contains(cronRunKeys, k) {
			p.add(unknownKey("run", k, cronRunKeys))
		}
	}
}

// runTarget reads kind and folder: a cron trigger always runs in a local folder.
func (p *triggerParser) runTarget(f fieldReader, l *LocalRun) {
	if kind, ok := f.str("kind"); !ok {
		if _, present := f.obj["kind"]; !present {
			p.fail("run.kind", `required ("local" for a cron trigger)`)
		}
	} else if kind != "local" {
		p.fail("run.kind", `must be "local" for a cron trigger, not %s`, clipQuote(kind))
	} else {
		l.Kind = kind
	}
	if _, present := f.obj["folder"]; !present {
		p.fail("run.folder", "required: the absolute folder the job runs in")
	} else {
		l.Folder, _ = f.str("folder")
	}
}

// runWork reads what the job runs, and with which image and secrets.
func (p *triggerParser) runWork(f fieldReader, l *LocalRun) {
	l.Flow, _ = f.str("flow")
	l.Command, _ = f.str("command")
	l.Task, _ = f.str("task")
	l.Image, _ = f.str("image")
	l.SecretsProfile, _ = f.str("secretsProfile")
	if raw, present := f.obj["secrets"]; present {
		l.Secrets = p.secrets(raw)
	}
}

// runAgent reads the agent settings, which travel to the job image in /job/job.json.
func (p *triggerParser) runAgent(f fieldReader, l *LocalRun) {
	if b, ok := f.boolean("packages"); ok {
		l.Packages = &b
	}
	l.ExcludeTools = f.strs("excludeTools")
	l.SkillsDir, _ = f.str("skillsDir")
	l.GitHub, _ = f.boolean("github")
	l.Network, _ = f.boolean("network")
	l.Provider, _ = f.str("provider")
	l.Model, _ = f.str("model")
	p.runMaxTurns(f, l)
	if _, present := f.obj["models"]; present {
		if l.Models = f.strs("models"); l.Models != nil && len(l.Models) == 0 {
			p.fail("run.models", "must be an array of 1 to %d model names", jobrule.MaxModels)
		}
	}
	l.MaxCostUSD, _ = f.str("maxCostUsd")
	l.Backend, _ = f.str("backend")
}

// runMaxTurns reads maxTurns as a whole number; its bounds are the worker's rule, applied by validateJob.
func (p *triggerParser) runMaxTurns(f fieldReader, l *LocalRun) {
	raw, present := f.obj["maxTurns"]
	if !present {
		return
	}
	n, err := strconv.Atoi(string(raw))
	if err != nil {
		p.fail("run.maxTurns", "must be a whole number from 1 to %d", jobrule.MaxTurns)
		return
	}
	l.MaxTurns = n
}

// fieldReader reads one object of a trigger, so cron and forge triggers word a wrong type alike.
type fieldReader struct {
	p      *triggerParser
	obj    map[string]json.RawMessage
	prefix string // "on" or "run"
}

// str returns the string at key; ok is false when it is absent or (reported) not a string.
func (f fieldReader) str(key string) (string, bool) {
	raw, present := f.obj[key]
	if !present {
		return "", false
	}
	s, ok := stringValue(raw)
	if !ok {
		f.p.fail(f.prefix+"."+key, "must be a string")
		return "", false
	}
	return s, true
}

// boolean returns the boolean at key; ok is false when it is absent or (reported) not a boolean.
func (f fieldReader) boolean(key string) (bool, bool) {
	raw, present := f.obj[key]
	if !present {
		return false, false
	}
	var b bool
	if json.Unmarshal(raw, &b) != nil {
		f.p.fail(f.prefix+"."+key, "must be true or false")
		return false, false
	}
	return b, true
}

// strs returns the array of strings at key, or nil when it is absent or (reported) anything else.
func (f fieldReader) strs(key string) []string {
	raw, present := f.obj[key]
	if !present {
		return nil
	}
	var out []string
	if json.Unmarshal(raw, &out) != nil || bytes.Equal(raw, []byte("null")) {
		f.p.fail(f.prefix+"."+key, "must be an array of strings")
		return nil
	}
	return out
}

// validateJob applies the worker's job rules (jobs.ParseJob) to the data
// e's scheduler fires, and reports the first broken one under "run.".
func (p *triggerParser) validateJob(e Entry) {
	if e.SchedulerID == "" {
		e.SchedulerID = "trigger" // on.id is reported on its own
	}
	data, err := jobData(e)
	if err != nil {
		p.fail("run", "must be an object")
		return
	}
	_, err = jobs.ParseJob(data)
	var fe *check.FieldError
	switch {
	case err == nil:
	case errors.As(err, &fe):
		p.fail("run."+fe.Field, "%s", fe.Rule)
	default:
		p.fail("run", "%s", strings.TrimPrefix(err.Error(), "invalid job: "))
	}
}

func (p *triggerParser) secrets(raw json.RawMessage) map[string]string {
	m, ok := object(raw)
	if !ok {
		p.fail("run.secrets", `must be an object {"ENV_NAME": "reference"}`)
		return nil
	}
	out := make(map[string]string, len(m))
	for _, k := range sortedKeys(m) {
		field := "run.secrets." + k
		if len(k) > maxNameBytes || !envNameRE.MatchString(k) {
			field = "run.secrets"
			p.fail(field, "%s is not an environment variable name ([A-Z_][A-Z0-9_]*)", clipQuote(k))
			continue
		}
		ref, ok := stringValue(m[k])
		if !ok || ref == "" || len(ref) > maxSecretRefLen || textRule(ref, maxSecretRefLen) != "" {
			// Never quote the reference: it may be a secret pasted by mistake.
			p.fail(field, "must be a non-empty reference string of at most %d bytes", maxSecretRefLen)
			continue
		}
		out[k] = ref
	}
	return out
}

// stringValue decodes raw as a JSON string.
func stringValue(raw json.RawMessage) (string, bool) {
	if len(raw) == 0 || raw[0] != '"' {
		return "", false
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return "", false
	}
	return s, true
}

// textRule returns "" when s is valid UTF-8 without NUL and at most limit bytes.
func textRule(s string, limit int) string {
	switch {
	case len(s) > limit:
		return fmt.Sprintf("longer than %d bytes", limit)
	case !utf8.ValidString(s):
		return "not valid UTF-8"
	case strings.IndexByte(s, 0) >= 0:
		return "contains a NUL byte"
	}
	return ""
}

// unknownKey reports an unknown key of the object at prefix ("on", "run", or ""
// for the top level), guessing what was meant.
func unknownKey(prefix, key string, known []string) (field, reason string) {
	field = keyPath(prefix, key)
	reason = "unknown key"
	if s := suggest(key, known); s != "" {
		reason += fmt.Sprintf(" (did you mean %q?)", s)
	}
	return field, reason
}

var plainKeyRE = regexp.MustCompile(`^[A-Za-z0-9_$-]{1,64}$`)

// keyPath names key inside prefix; a key that is not a plain identifier is
// quoted and clipped, so a hostile key cannot garble the message.
func keyPath(prefix, key string) string {
	if !plainKeyRE.MatchString(key) {
		return prefix + "[" + clipQuote(key) + "]"
	}
	if prefix == "" {
		return key
	}
	return prefix + "." + key
}
