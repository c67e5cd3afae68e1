package queue

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// State is where a job is, in BullMQ's terms.
type State string

// Job states.
const (
	StateWaiting         State = "waiting"
	StatePaused          State = "paused"
	StateActive          State = "active"
	StateDelayed         State = "delayed"
	StatePrioritized     State = "prioritized"
	StateCompleted       State = "completed"
	StateFailed          State = "failed"
	StateWaitingChildren State = "waiting-children"
	StateUnknown         State = "unknown"
)

// Job is a job as stored in its BullMQ hash. Fields a peer wrote as junk
// read as zero values; Corrupt says what could not be read.
type Job struct {
	ID   string
	Name string
	// Data is the job's JSON payload; nil when Corrupt reports it unreadable.
	Data json.RawMessage

	// Options the job was added with (read back from its opts).
	Attempts         int
	Backoff          Backoff
	Priority         int
	RemoveOnComplete Keep
	RemoveOnFail     Keep
	DedupID          string
	// Signature is the fleet signature its producer put in its opts
	// (AddOptions.Signature); empty when none.
	Signature string

	// AttemptsMade counts finished attempts (failures and the completion);
	// deferrals do not count. AttemptsStarted counts takes.
	AttemptsMade    int
	AttemptsStarted int
	StalledCount    int

	// Timestamp is when the job was added; ProcessedOn when it was last
	// taken; FinishedOn when it completed or failed for good. Zero when
	// unset. Written with the server's clock by our scripts (BullMQ clients
	// write their own clock).
	Timestamp   time.Time
	ProcessedOn time.Time
	FinishedOn  time.Time
	// Delay is the delay the job was last put in delayed with.
	Delay time.Duration

	FailedReason string
	// ReturnValue is the completed job's result as JSON.
	ReturnValue json.RawMessage
	// SchedulerID is set on a job scheduler's runs.
	SchedulerID string
	// ProcessedBy is the worker name that last took the job, if it gave one.
	ProcessedBy string
	// DeferredFailure is set by BullMQ's own stalled check ("defa"): a job
	// that carries it must be failed without running (Fail with NoRetry).
	DeferredFailure string
	// GateWaits is the note the last DeferNoted left on the job ("pigw"),
	// as any writer of the hash left it: the worker checks it.
	GateWaits string

	// State is set by Get.
	State State
	// Token is the lock token a fetched job is held with.
	Token string
	// Corrupt is non-empty when a field could not be read (for example data
	// that is not JSON). A consumer should fail such a job with this reason.
	Corrupt string
}

// hashFields are the job hash fields parseJob reads.
type hashFields struct {
	name, data, opts, deid, priority, atm, attemptsMade, ats, stc string
	timestamp, processedOn, finishedOn, delay, failedReason       string
	returnValue, rjk, pb, defa, pigw                              string
	hasReturnValue                                                bool
}

// takeFieldOrder numbers the job hash fields parseJob reads, from 1, as
// lib.lua's jobFieldIndex does (a test keeps the two the same): a take
// returns its job's fields with these numbers in place of the names.
var takeFieldOrder = [...]string{"name", "data", "opts", "deid", "priority", "atm", "attemptsMade", "ats", "stc",
	"timestamp", "processedOn", "finishedOn", "delay", "failedReason", "returnvalue", "rjk", "pb", "defa", "pigw"}

// set records field k's value; it ignores fields parseJob does not read.
func (f *hashFields) set(k, v string) {
	switch k {
	case "name":
		f.name = v
	case "data":
		f.data = v
	case "opts":
		f.opts = v
	case "deid":
		f.deid = v
	case "priority":
		f.priority = v
	case "atm":
		f.atm = v
	case "attemptsMade":
		f.attemptsMade = v
	case "ats":
		f.ats = v
	case "stc":
		f.stc = v
	case "timestamp":
		f.timestamp = v
	case "processedOn":
		f.processedOn = v
	case "finishedOn":
		f.finishedOn = v
	case "delay":
		f.delay = v
	case "failedReason":
		f.failedReason = v
	case "returnvalue":
		f.returnValue, f.hasReturnValue = v, true
	case "rjk":
		f.rjk = v
	case "pb":
		f.pb = v
	case "defa":
		f.defa = v
	case "pigw":
		f.pigw = v
	}
}

// parseJob builds a Job from a flat HGETALL reply (field, value, ...).
func parseJob(id string, flat []any) *Job {
	var f hashFields
	for i := 0; i+1 < len(flat); i += 2 {
		k, _ := flat[i].(string)
		v, _ := flat[i+1].(string)
		f.set(k, v)
	}
	return f.job(id)
}

// parseTakenJob builds a Job from a take's fields: number, value, ...,
// numbered by takeFieldOrder (0 for a field it does not read). It runs for
// every job taken.
func parseTakenJob(id string, numbered []any) *Job {
	var f hashFields
	for i := 0; i+1 < len(numbered); i += 2 {
		n, _ := numbered[i].(int64)
		v, ok := numbered[i+1].(string)
		if ok && n >= 1 && n <= int64(len(takeFieldOrder)) {
			f.set(takeFieldOrder[n-1], v)
		}
	}
	return f.job(id)
}

// job builds the Job the fields describe.
func (f *hashFields) job(id string) *Job {
	j := &Job{ID: id}
	var corrupt []string
	j.Name = f.name
	if d := f.data; d != "" {
		if json.Valid([]byte(d)) {
			j.Data = json.RawMessage(d)
		} else {
			corrupt = append(corrupt, "data is not JSON")
		}
	} else {
		j.Data = json.RawMessage("{}")
	}
	opts, err := parseOpts(f.opts)
	if err != nil {
		corrupt = append(corrupt, "opts is not a JSON object")
	}
	j.Attempts = opts.Attempts
	j.Backoff = opts.Backoff
	j.Priority = opts.Priority
	j.RemoveOnComplete = opts.RemoveOnComplete
	j.RemoveOnFail = opts.RemoveOnFail
	j.Signature = opts.Signature
	j.DedupID = f.deid
	if j.DedupID == "" {
		j.DedupID = opts.DedupID
	}
	if p := atoi(f.priority); p > 0 {
		j.Priority = p
	}
	j.AttemptsMade = atoi(f.atm)
	if j.AttemptsMade == 0 {
		j.AttemptsMade = atoi(f.attemptsMade)
	}
	j.AttemptsStarted = atoi(f.ats)
	j.StalledCount = atoi(f.stc)
	j.Timestamp = msTime(f.timestamp)
	j.ProcessedOn = msTime(f.processedOn)
	j.FinishedOn = msTime(f.finishedOn)
	j.Delay = time.Duration(atoi(f.delay)) * time.Millisecond
	j.FailedReason = f.failedReason
	if f.hasReturnValue {
		if json.Valid([]byte(f.returnValue)) {
			j.ReturnValue = json.RawMessage(f.returnValue)
		} else {
			corrupt = append(corrupt, "returnvalue is not JSON")
		}
	}
	j.SchedulerID = f.rjk
	j.ProcessedBy = f.pb
	j.DeferredFailure = f.defa
	j.GateWaits = f.pigw
	j.Corrupt = strings.Join(corrupt, "; ")
	return j
}

// atoi reads a decimal (BullMQ writes some numbers as floats), 0 for junk.
func atoi(s string) int {
	if s == "" {
		return 0
	}
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		return int(n)
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(f) || math.Abs(f) > 9e15 {
		return 0
	}
	return int(f)
}

func msTime(s string) time.Time {
	if s == "" {
		return time.Time{}
	}
	ms, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		f, ferr := strconv.ParseFloat(s, 64)
		if ferr != nil || math.IsNaN(f) || math.Abs(f) > 1e15 {
			return time.Time{}
		}
		ms = int64(f)
	}
	return msInstant(ms)
}

// msInstant is the time of a Unix millisecond count, zero when it is not a
// plausible one.
func msInstant(ms int64) time.Time {
	if ms <= 0 || ms > 1e15 {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}

// String identifies the job in logs.
func (j *Job) String() string { return fmt.Sprintf("job %q (%s)", j.ID, j.Name) }
