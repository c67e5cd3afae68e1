package dispatch

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/pidispatch/pidispatch/registry"
)

// Outcomes of a run (the container contract's exit protocol, plus refusals).
const (
	OutcomeCompleted = "completed" // exit 0
	OutcomePolicy    = "policy"    // refused or stopped by policy; never retried
	OutcomeFailed    = "failed"    // infrastructure failure; retried within attempts
)

// Reasons: the fixed vocabulary of Record.Reason. A record never carries free text, so
// it can be mirrored fleet-wide and aggregated without leaking anything.
const (
	ReasonCompleted            = "completed"
	ReasonExit1                = "exit-1"  // container exited 1: infrastructure failure
	ReasonPolicy               = "policy"  // container exited 2: the agent refused
	ReasonStalled              = "stalled" // the job's lock was lost; never silently re-run
	ReasonTimeout              = "timeout" // PI_JOB_TIMEOUT passed; the container was stopped
	ReasonSecretProfileUnknown = "secret-profile-unknown"
	ReasonSecretResolveFailed  = "secret-resolve-failed"
	ReasonWaitProfileUnknown   = "wait-profile-unknown"
	ReasonScopeCap             = "scope-cap"
	ReasonOverBudget           = "over-budget"
	ReasonJobImageMissing      = "job-image-missing"
	ReasonNeverStarted         = "never-started" // exit 125-127: the budget slot is given back
	ReasonOperatorCancel       = "operator-cancel"
	ReasonWaitTimeout          = "wait-timeout"
	ReasonWaitMaxChecks        = "wait-max-checks"
	ReasonWaitFaults           = "wait-faults"
	ReasonWaitSuperseded       = "wait-superseded" // a newer delivery of the same intent took over the hold
	ReasonInvalidJob           = "invalid-job"
	ReasonExitOther            = "exit-other"      // container exited with another code (137 killed, 3...): retried
	ReasonWorkerShutdown       = "worker-shutdown" // stopped when the worker's shutdown grace ran out: retried
	ReasonCronNotAgreed        = "cron-not-agreed" // a scheduler's run this host's triggers file does not name
)

// Reasons lists every valid Record.Reason.
var Reasons = []string{
	ReasonCompleted, ReasonExit1, ReasonPolicy, ReasonStalled, ReasonTimeout,
	ReasonSecretProfileUnknown, ReasonSecretResolveFailed, ReasonWaitProfileUnknown,
	ReasonScopeCap, ReasonOverBudget, ReasonJobImageMissing, ReasonNeverStarted,
	ReasonOperatorCancel, ReasonWaitTimeout, ReasonWaitMaxChecks, ReasonWaitFaults,
	ReasonWaitSuperseded, ReasonInvalidJob, ReasonExitOther, ReasonWorkerShutdown,
	ReasonCronNotAgreed,
}

// MaxTelemetryBytes bounds Record.Telemetry (the container's exit line is read from an
// 8 KiB tail, so it cannot be longer).
const MaxTelemetryBytes = 8 << 10

// maxRecordRead bounds how much of a file PruneRecords reads to find its endedAt.
const maxRecordRead = 1 << 20

// Record is a job's run record: one JSON file per job in PI_LOGS_DIR, written before
// anything else reports the outcome. It is an explicit list of fields, never job data
// spread into it, so it holds no secret and no task text: Target is "local:<basename>"
// or a repository, Reason a fixed token, Telemetry the container's own exit line.
type Record struct {
	JobID     string    `json:"jobId"`
	Kind      Kind      `json:"kind"`
	Target    string    `json:"target"`
	Flow      string    `json:"flow"`
	StartedAt time.Time `json:"startedAt"`
	EndedAt   time.Time `json:"endedAt"`
	Outcome   string    `json:"outcome"`
	Reason    string    `json:"reason"`
	// ExitCode is the container's exit code; null when no container ran.
	ExitCode *int   `json:"exitCode"`
	Attempt  int    `json:"attempt"`
	Host     string `json:"host"`
	Image    string `json:"image"`
	// Network is the network the container joined: "none" unless the job was
	// granted PI_JOB_NETWORK; omitted when no container ran.
	Network string `json:"network,omitempty"`
	// Telemetry is the container's exit line ({"event":"exit", turns, tokens, cost}),
	// a JSON object of at most 8 KiB; omitted when there was none.
	Telemetry json.RawMessage `json:"telemetry,omitempty"`
}

// Validate checks a record before it is written: a job id, a known outcome and reason
// (completed if and only if the outcome is completed), a valid host name, times in
// order, telemetry a small JSON object.
func (r Record) Validate() error {
	switch {
	case r.JobID == "" || len(r.JobID) > maxJobIDLen || textRule(r.JobID, maxJobIDLen) != "" || strings.ContainsFunc(r.JobID, isControl):
		return fieldErr("jobId", "must be 1 to %d bytes of text without control characters", maxJobIDLen)
	case r.Outcome != OutcomeCompleted && r.Outcome != OutcomePolicy && r.Outcome != OutcomeFailed:
		return fieldErr("outcome", "must be completed, policy or failed")
	case !slices.Contains(Reasons, r.Reason):
		// Not echoed: an unknown reason may be free text, and free text may be anything.
		return fieldErr("reason", "not one of the fixed reasons (dispatch.Reasons)")
	case (r.Outcome == OutcomeCompleted) != (r.Reason == ReasonCompleted):
		return fieldErr("reason", "is completed exactly when the outcome is completed")
	case r.Kind != "" && !slices.Contains([]Kind{KindLocal, KindCron, KindChain, KindForge, KindManual}, r.Kind):
		return fieldErr("kind", "unknown kind")
	case r.StartedAt.IsZero():
		return fieldErr("startedAt", "required")
	case r.EndedAt.IsZero():
		return fieldErr("endedAt", "required")
	case r.EndedAt.Before(r.StartedAt):
		return fieldErr("endedAt", "is before startedAt")
	case r.Attempt < 0:
		return fieldErr("attempt", "must not be negative")
	}
	if err := registry.ValidateName(r.Host); err != nil {
		return fieldErr("host", "not a valid worker name")
	}
	for _, f := range []struct{ name, v string }{{"target", r.Target}, {"flow", r.Flow}, {"image", r.Image}, {"network", r.Network}} {
		if textRule(f.v, 1024) != "" || strings.ContainsFunc(f.v, isControl) {
			return fieldErr(f.name, "must be at most 1024 bytes of text without control characters")
		}
	}
	if len(r.Telemetry) > 0 {
		t := bytes.TrimSpace(r.Telemetry)
		if len(r.Telemetry) > MaxTelemetryBytes || len(t) == 0 || t[0] != '{' || !json.Valid(t) {
			return fieldErr("telemetry", "must be a JSON object of at most %d bytes", MaxTelemetryBytes)
		}
	}
	return nil
}

func isControl(r rune) bool { return r < 0x20 || r == 0x7f }

// SanitizeJobID maps a job id to a file name stem: every byte outside [A-Za-z0-9._-]
// becomes '-', a leading '.' becomes '-' (no hidden file, no ".."), and the result is
// cut at 200 bytes. The run mirror uses the same stem.
func SanitizeJobID(id string) string {
	b := []byte(id)
	if len(b) > 200 {
		b = b[:200]
	}
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			b[i] = '-'
		}
	}
	if len(b) > 0 && b[0] == '.' {
		b[0] = '-'
	}
	return string(b)
}

// WriteRecord validates r and writes it to <dir>/<SanitizeJobID(jobId)>.json
// atomically: a temp file in dir, fsync, mode 0640, rename over the final name, fsync of
// the directory. A reader sees the old record or the new one, never half of one. dir is
// created (0750) when missing. Times are written in UTC with millisecond precision, as
// the original writes them.
func WriteRecord(dir string, r Record) (path string, err error) {
	if err := r.Validate(); err != nil {
		return "", fmt.Errorf("run record: %w", err)
	}
	r.StartedAt = r.StartedAt.UTC().Truncate(time.Millisecond)
	r.EndedAt = r.EndedAt.UTC().Truncate(time.Millisecond)
	if len(r.Telemetry) > 0 {
		var buf bytes.Buffer
		if err := json.Compact(&buf, r.Telemetry); err != nil {
			return "", fmt.Errorf("run record: telemetry: %w", err)
		}
		r.Telemetry = buf.Bytes()
	}
	data, err := json.Marshal(r)
	if err != nil {
		return "", fmt.Errorf("run record: %w", err)
	}
	data = append(data, '\n')

	if err := os.MkdirAll(dir, 0o750); err != nil {
		return "", fmt.Errorf("run record: %w", err)
	}
	name := SanitizeJobID(r.JobID) + ".json"
	final := filepath.Join(dir, name)
	tmp, err := os.CreateTemp(dir, "."+name+".tmp-*")
	if err != nil {
		return "", fmt.Errorf("run record: %w", err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if _, err = tmp.Write(data); err != nil {
		return "", fmt.Errorf("run record: %w", err)
	}
	if err = tmp.Chmod(0o640); err != nil {
		return "", fmt.Errorf("run record: %w", err)
	}
	if err = tmp.Sync(); err != nil {
		return "", fmt.Errorf("run record: %w", err)
	}
	if err = tmp.Close(); err != nil {
		return "", fmt.Errorf("run record: %w", err)
	}
	if err = os.Rename(tmp.Name(), final); err != nil {
		return "", fmt.Errorf("run record: %w", err)
	}
	if d, derr := os.Open(dir); derr == nil {
		// The rename is durable once the directory is; a failure here loses nothing
		// already visible, so it is not an error of the write.
		_ = d.Sync()
		d.Close()
	}
	return final, nil
}

// PruneRecords removes run records in dir older than olderThan and returns how many it
// removed. A record's age is its endedAt when the file has a readable one, else the
// file's mtime. It touches only regular files named *.json (not hidden): never a .log,
// a temp file, a directory or a symlink. A missing dir has nothing to prune. Failures
// on single files are joined into the error; the rest are still pruned.
func PruneRecords(dir string, olderThan time.Time) (int, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("prune records: %w", err)
	}
	var errs []error
	removed := 0
	for _, e := range entries {
		name := e.Name()
		if !e.Type().IsRegular() || !strings.HasSuffix(name, ".json") || strings.HasPrefix(name, ".") {
			continue
		}
		p := filepath.Join(dir, name)
		at, err := recordTime(p, e)
		if err != nil {
			if !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, err)
			}
			continue
		}
		if !at.Before(olderThan) {
			continue
		}
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
			continue
		}
		removed++
	}
	if len(errs) > 0 {
		return removed, fmt.Errorf("prune records: %w", errors.Join(errs...))
	}
	return removed, nil
}

// recordTime is a record file's endedAt, or its mtime when it has none readable.
func recordTime(p string, e fs.DirEntry) (time.Time, error) {
	info, err := e.Info()
	if err != nil {
		return time.Time{}, err
	}
	if f, err := os.Open(p); err == nil {
		data, rerr := io.ReadAll(io.LimitReader(f, maxRecordRead+1))
		f.Close()
		var rec struct {
			EndedAt time.Time `json:"endedAt"`
		}
		if rerr == nil && len(data) <= maxRecordRead && json.Unmarshal(data, &rec) == nil && !rec.EndedAt.IsZero() {
			return rec.EndedAt, nil
		}
	}
	return info.ModTime(), nil
}
