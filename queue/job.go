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

	// State is set by Get.
	State State
	// Token is the lock token a fetched job is held with.
	Token string
	// Corrupt is non-empty when a field could not be read (for example data
	// that is not JSON). A consumer should fail such a job with this reason.
	Corrupt string
}

// parseJob builds a Job from a flat HGETALL reply.
func parseJob(id string, flat []any) *Job {
	j := &Job{ID: id}
	fields := make(map[string]string, len(flat)/2)
	for i := 0; i+1 < len(flat); i += 2 {
		k, _ := flat[i].(string)
		v, _ := flat[i+1].(string)
		fields[k] = v
	}
	var corrupt []string
	j.Name = fields["name"]
	if d := fields["data"]; d != "" {
		if json.Valid([]byte(d)) {
			j.Data = json.RawMessage(d)
		} else {
			corrupt = append(corrupt, "data is not JSON")
		}
	} else {
		j.Data = json.RawMessage("{}")
	}
	opts, err := parseOpts(fields["opts"])
	if err != nil {
		corrupt = append(corrupt, "opts is not a JSON object")
	}
	j.Attempts = opts.Attempts
	j.Backoff = opts.Backoff
	j.Priority = opts.Priority
	j.RemoveOnComplete = opts.RemoveOnComplete
	j.RemoveOnFail = opts.RemoveOnFail
	j.DedupID = fields["deid"]
	if j.DedupID == "" {
		j.DedupID = opts.DedupID
	}
	if p := atoi(fields["priority"]); p > 0 {
		j.Priority = p
	}
	j.AttemptsMade = atoi(fields["atm"])
	if j.AttemptsMade == 0 {
		j.AttemptsMade = atoi(fields["attemptsMade"])
	}
	j.AttemptsStarted = atoi(fields["ats"])
	j.StalledCount = atoi(fields["stc"])
	j.Timestamp = msTime(fields["timestamp"])
	j.ProcessedOn = msTime(fields["processedOn"])
	j.FinishedOn = msTime(fields["finishedOn"])
	j.Delay = time.Duration(atoi(fields["delay"])) * time.Millisecond
	j.FailedReason = fields["failedReason"]
	if rv, ok := fields["returnvalue"]; ok {
		if json.Valid([]byte(rv)) {
			j.ReturnValue = json.RawMessage(rv)
		} else {
			corrupt = append(corrupt, "returnvalue is not JSON")
		}
	}
	j.SchedulerID = fields["rjk"]
	j.ProcessedBy = fields["pb"]
	j.DeferredFailure = fields["defa"]
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
	if ms <= 0 || ms > 1e15 {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}

// String identifies the job in logs.
func (j *Job) String() string { return fmt.Sprintf("job %q (%s)", j.ID, j.Name) }
