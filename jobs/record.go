package jobs

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/internal/atomicfile"
	"github.com/pidispatch/pidispatch/internal/check"
)

// Outcomes of a run (the container contract's exit protocol, plus refusals).
const (
	OutcomeCompleted = "completed" // exit 0
	OutcomePolicy    = "policy"    // refused or stopped by policy; never retried
	OutcomeFailed    = "failed"    // infrastructure failure; retried within attempts
)

// Reason is why a job ended as it did, or why a gate deferred it: a token of a fixed
// vocabulary, never free text, so it can be mirrored fleet-wide, used as a metric label
// and aggregated without leaking anything. Its string is the wire value: in a record's
// JSON, in a policy outcome's result and in a failed job's failedReason.
type Reason string

// MarshalBinary is the reason's wire form: its string's bytes. A Valkey client
// (go-redis) writes a Reason given as a command argument as it writes the
// string.
func (r Reason) MarshalBinary() ([]byte, error) { return []byte(r), nil }

// Reasons: the fixed vocabulary of Record.Reason.
const (
	ReasonCompleted            Reason = "completed"
	ReasonExit1                Reason = "exit-1"  // container exited 1: infrastructure failure
	ReasonPolicy               Reason = "policy"  // container exited 2: the agent refused
	ReasonStalled              Reason = "stalled" // the job's lock was lost; never silently re-run
	ReasonTimeout              Reason = "timeout" // PI_JOB_TIMEOUT passed; the container was stopped
	ReasonSecretProfileUnknown Reason = "secret-profile-unknown"
	ReasonSecretResolveFailed  Reason = "secret-resolve-failed"
	ReasonWaitProfileUnknown   Reason = "wait-profile-unknown"
	ReasonScopeCap             Reason = "scope-cap"
	ReasonOverBudget           Reason = "over-budget"
	ReasonJobImageMissing      Reason = "job-image-missing"
	ReasonNeverStarted         Reason = "never-started" // exit 125-127: the budget slot is given back
	ReasonOperatorCancel       Reason = "operator-cancel"
	ReasonWaitTimeout          Reason = "wait-timeout"
	ReasonWaitMaxChecks        Reason = "wait-max-checks"
	ReasonWaitFaults           Reason = "wait-faults"
	ReasonWaitSuperseded       Reason = "wait-superseded" // a newer delivery of the same intent took over the hold
	ReasonInvalidJob           Reason = "invalid-job"
	ReasonExitOther            Reason = "exit-other"         // container exited with another code (137 killed, 3...): retried
	ReasonWorkerShutdown       Reason = "worker-shutdown"    // stopped when the worker's shutdown grace ran out: retried
	ReasonCronNotAgreed        Reason = "cron-not-agreed"    // a scheduler's run this host's triggers file does not name
	ReasonCostCap              Reason = "cost-cap"           // the gateway refused a model call past the job's dollar cap
	ReasonTokenCap             Reason = "token-cap"          // the gateway refused a model call past the job's token cap
	ReasonDollarCap            Reason = "dollar-cap"         // a fleet dollar window could not hold the job's cap: never started
	ReasonSoftHold             Reason = "soft-hold"          // a count window is past PI_SOFT_HOLD_PCT of its cap
	ReasonFolderNotAllowed     Reason = "folder-not-allowed" // the job's folder is outside PI_FOLDER_ROOTS (or owned by root)
	ReasonImageNotAllowed      Reason = "image-not-allowed"  // the job names an image outside PI_JOB_IMAGE and PI_JOB_IMAGES
	ReasonBudgetCorrupt        Reason = "budget-corrupt"     // a budget counter holds a negative, non-numeric or absurd value
	ReasonJobUnsigned          Reason = "job-unsigned"       // the host holds the fleet key and the job carries no valid signature
)

// Deferral reasons: why a gate put a job back in delayed (not an attempt, never
// recorded). They name the deferral in the log and to observers.
const (
	ReasonPauseWindow          Reason = "pause-window"           // a pause window matches the job's scope
	ReasonScopeBusy            Reason = "scope-busy"             // the job's scope slot is taken
	ReasonThreadBusy           Reason = "thread-busy"            // an older job of the same issue or pull request runs or waits first
	ReasonThreadUnreachable    Reason = "thread-unreachable"     // the thread's line could not be read
	ReasonBudgetUnreachable    Reason = "budget-unreachable"     // the spend caps could not be read
	ReasonDollarsUnreachable   Reason = "dollars-unreachable"    // the dollar windows could not be read
	ReasonPredictedOverBudget  Reason = "predicted-over-budget"  // the p90 cost of runs like it does not fit what is left of its dollar windows or cap
	ReasonDockerUnreachable    Reason = "docker-unreachable"     // the runtime could not say whether the image is present
	ReasonRateLimited          Reason = "rate-limited"           // the job's provider is rate limited: RateLimitedOn names it
	ReasonWaitAfter            Reason = "wait-after"             // a waitFor `after` has not passed
	ReasonWaitCheck            Reason = "wait-check"             // a wait round left a condition unmet
	ReasonWaitThrottled        Reason = "wait-throttled"         // a wait round was denied a check slot
	ReasonWaitStateLost        Reason = "wait-state-lost"        // the hold state was deleted during the round
	ReasonWaitStateUnavailable Reason = "wait-state-unavailable" // the worker has no hold store
	ReasonWaitStateUnreachable Reason = "wait-state-unreachable" // the hold state could not be read or written
)

// RateLimitedOn is the deferral reason of a job whose provider is rate limited:
// "rate-limited:<provider>".
func RateLimitedOn(provider string) Reason { return ReasonRateLimited + ":" + Reason(provider) }

// Forge reasons: why the host refused to publish a forge job's changes (outcome
// policy), or could not reach its repository (outcome failed).
const (
	ReasonProtectedBranch  Reason = "protected-branch"  // the publish branch is the default or a protected branch
	ReasonHistoryRewritten Reason = "history-rewritten" // the job's history does not descend from the commit it was given
	ReasonCIChange         Reason = "ci-change"         // the changes touch CI configuration the trigger does not allow
	ReasonTooManyFiles     Reason = "too-many-files"    // more files changed than PI_PUBLISH_MAX_FILES
	ReasonTooLarge         Reason = "too-large"         // more bytes changed than PI_PUBLISH_MAX_BYTES
	ReasonUnsafePath       Reason = "unsafe-path"       // a submodule, or a symbolic link leading out of the repository
	ReasonRepoGone         Reason = "repo-gone"         // the repository (or the pull request) no longer exists
	ReasonForgeAuth        Reason = "forge-auth"        // the forge refused the host's credential
	ReasonForgeUnavailable Reason = "forge-unavailable" // the forge kept failing (5xx, 429, network): retried
	ReasonNoForge          Reason = "no-forge"          // this host has no credential for the job's forge: nothing was cloned or run
	ReasonForgeRejected    Reason = "forge-rejected"    // the forge answered a request of the job's was wrong (a 4xx other than 401, 403, 404, 429): final
	ReasonForgeNotAgreed   Reason = "forge-not-agreed"  // no forge trigger of this host's triggers file covers the job (trigger, forge, repository, event, flow): nothing minted
)

// Reasons lists every valid Record.Reason.
var Reasons = []Reason{
	ReasonCompleted, ReasonExit1, ReasonPolicy, ReasonStalled, ReasonTimeout,
	ReasonSecretProfileUnknown, ReasonSecretResolveFailed, ReasonWaitProfileUnknown,
	ReasonScopeCap, ReasonOverBudget, ReasonJobImageMissing, ReasonNeverStarted,
	ReasonOperatorCancel, ReasonWaitTimeout, ReasonWaitMaxChecks, ReasonWaitFaults,
	ReasonWaitSuperseded, ReasonInvalidJob, ReasonExitOther, ReasonWorkerShutdown,
	ReasonCronNotAgreed, ReasonCostCap, ReasonTokenCap, ReasonDollarCap, ReasonSoftHold,
	ReasonJobUnsigned, ReasonFolderNotAllowed, ReasonImageNotAllowed, ReasonBudgetCorrupt,
	ReasonProtectedBranch, ReasonHistoryRewritten, ReasonCIChange, ReasonTooManyFiles,
	ReasonTooLarge, ReasonUnsafePath, ReasonRepoGone, ReasonForgeAuth, ReasonForgeUnavailable, ReasonNoForge,
	ReasonForgeRejected, ReasonForgeNotAgreed,
}

// MaxTelemetryBytes bounds Record.Telemetry (the container's exit line is read from an
// 8 KiB tail, so it cannot be longer).
const MaxTelemetryBytes = 8 << 10

// maxRecordRead bounds how much of a file PruneRecords reads to find its endedAt.
const maxRecordRead = 1 << 20

// Record is the run record of one attempt of a job: one JSON file per attempt in
// PI_LOGS_DIR (RecordName), written before anything else reports the outcome. It is an explicit list of fields, never job data
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
	Reason    Reason    `json:"reason"`
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
	// JobIDQuoted is set only on the record of a job whose id breaks the job
	// id rule (fleet.CheckJobID; a peer wrote it): the real id, Go-quoted so
	// control characters and invalid UTF-8 show as escapes, cut to 1 KiB.
	// JobID is then RefusedJobID's stand-in.
	JobIDQuoted string `json:"jobIdQuoted,omitempty"`
	// Spend is what the run's model calls spent through the worker's gateway;
	// omitted when no call went through it.
	Spend *Spend `json:"spend,omitempty"`
	// Queue is the queue the job was taken from. It is part of the record's
	// name (RecordName), so equal job ids on two queues keep two records;
	// empty in records written before queues named them.
	Queue string `json:"queue,omitempty"`
	// PullRequestURL is the pull (merge) request a forge job's changes were
	// published as; omitted when nothing was published.
	PullRequestURL string `json:"pullRequestUrl,omitempty"`
	// StatusCommentURL is the forge job's status comment, where the person
	// who asked follows it; omitted when none was written before the record.
	StatusCommentURL string `json:"statusCommentUrl,omitempty"`
	// PushedCommit is the commit the host pushed to the job's branch, and
	// BaseCommit the commit the job's workspace was cloned at (forge jobs).
	PushedCommit string `json:"pushedCommit,omitempty"`
	BaseCommit   string `json:"baseCommit,omitempty"`
	// Outputs says what the host did with each file the job wrote to
	// /job/out: posted, or refused as a whole with the reason.
	Outputs []OutputResult `json:"outputs,omitempty"`
	// PromptDigest is the first 16 hex digits of the SHA-256 of the prompt
	// the job was given (/job/prompt.md); omitted when it was given none.
	PromptDigest string `json:"promptDigest,omitempty"`
	// Trigger names the triggers.json entry (forge trigger or cron entry)
	// that made the job; omitted for jobs no trigger made.
	Trigger string `json:"trigger,omitempty"`
	// Timings and Container say where the attempt's time went and what its
	// container used; PullRequest what became of its pull request (joined
	// when read). Each is omitted when unknown.
	Timings     *Timings            `json:"timings,omitempty"`
	Container   *ContainerStats     `json:"container,omitempty"`
	PullRequest *PullRequestOutcome `json:"pullRequest,omitempty"`
	// Predicted is the cost the worker predicted for the run when it
	// admitted it; omitted when it made no prediction.
	Predicted *Prediction `json:"predicted,omitempty"`
}

// Spend basis: how Spend.Dollars was found.
const (
	// BasisMetered: every call's usage came from the provider's own report.
	BasisMetered = "metered"
	// BasisEstimated: at least one call's provider reported no usage, and
	// its tokens were estimated from the bytes sent and received.
	BasisEstimated = "estimated"
)

// Spend is a run's model spend, as the gateway metered it.
type Spend struct {
	// Dollars is Micros in dollars.
	Dollars float64 `json:"dollars"`
	Micros  int64   `json:"micros"`
	// Basis is BasisMetered or BasisEstimated.
	Basis string `json:"basis"`
	// Calls is the number of model calls forwarded; Refused the calls the
	// gateway refused (a cap, a rate limit).
	Calls   int         `json:"calls"`
	Refused int         `json:"refused,omitempty"`
	Tokens  SpendTokens `json:"tokens"`
	// Unpriced names the provider/model pairs the pricing table does not
	// know: their tokens are counted, their dollars are not (never priced as
	// zero silently: a record with Unpriced is a lower bound).
	Unpriced []string `json:"unpriced,omitempty"`
	// CapHit is ReasonCostCap or ReasonTokenCap when the gateway stopped the
	// job at a cap.
	CapHit Reason `json:"capHit,omitempty"`
	// OvershootMicros is what the provider billed past the bounds the
	// gateway reserved (a call it could not bound exactly); the gateway
	// stops the job's calls at the first.
	OvershootMicros int64 `json:"overshootMicros,omitempty"`
	// Models splits the spend by provider and model (at most 16; omitted in
	// records written before it existed).
	Models []ModelSpend `json:"models,omitempty"`
}

// SpendTokens are the tokens of a run's model calls.
type SpendTokens struct {
	Input      int64 `json:"input"`
	Output     int64 `json:"output"`
	CacheRead  int64 `json:"cacheRead"`
	CacheWrite int64 `json:"cacheWrite"`
}

// Total is every token.
func (t SpendTokens) Total() int64 { return t.Input + t.Output + t.CacheRead + t.CacheWrite }

// maxJobIDQuoted bounds Record.JobIDQuoted.
const maxJobIDQuoted = 1 << 10

// Validate checks a record before it is written: a job id, a known outcome and reason
// (completed if and only if the outcome is completed), a valid host name, times in
// order, telemetry a small JSON object.
func (r Record) Validate() error {
	switch {
	case fleet.CheckJobID(r.JobID) != nil:
		return check.Field("jobId", "must be 1 to %d bytes of text without control characters", fleet.MaxJobIDBytes)
	case len(r.JobIDQuoted) > maxJobIDQuoted+4 || strings.ContainsFunc(r.JobIDQuoted, func(c rune) bool { return c < 0x20 || c >= 0x7f }):
		return check.Field("jobIdQuoted", "must be at most %d bytes of printable ASCII", maxJobIDQuoted)
	case r.Outcome != OutcomeCompleted && r.Outcome != OutcomePolicy && r.Outcome != OutcomeFailed:
		return check.Field("outcome", "must be completed, policy or failed")
	case !slices.Contains(Reasons, r.Reason):
		// Not echoed: an unknown reason may be free text, and free text may be anything.
		return check.Field("reason", "not one of the fixed reasons (dispatch.Reasons)")
	case (r.Outcome == OutcomeCompleted) != (r.Reason == ReasonCompleted):
		return check.Field("reason", "is completed exactly when the outcome is completed")
	case r.Kind != "" && !slices.Contains([]Kind{KindLocal, KindCron, KindChain, KindForge, KindManual}, r.Kind):
		return check.Field("kind", "unknown kind")
	case r.StartedAt.IsZero():
		return check.Field("startedAt", "required")
	case r.EndedAt.IsZero():
		return check.Field("endedAt", "required")
	case r.EndedAt.Before(r.StartedAt):
		return check.Field("endedAt", "is before startedAt")
	case r.Attempt < 0:
		return check.Field("attempt", "must not be negative")
	}
	if err := fleet.ValidateName(r.Host); err != nil {
		return check.Field("host", "not a valid worker name")
	}
	if r.Queue != "" && !ValidQueueName(r.Queue) {
		return check.Field("queue", "must be 1 to %d bytes of [A-Za-z0-9._@-], not starting with '.'", maxQueueName)
	}
	if len(r.Outputs) > len(Outputs) {
		return check.Field("outputs", "at most %d entries", len(Outputs))
	}
	for _, o := range r.Outputs {
		if check.Text(o.File, 64) != "" || check.Text(o.Status, 16) != "" || check.Text(o.Reason, 512) != "" || strings.ContainsFunc(o.Reason, isControl) {
			return check.Field("outputs", "each entry is a file, a status and a one-line reason of at most 512 bytes")
		}
	}
	if r.PromptDigest != "" && !isHex16(r.PromptDigest) {
		return check.Field("promptDigest", "must be 16 hex digits")
	}
	if !validCommit(r.PushedCommit) || !validCommit(r.BaseCommit) {
		return check.Field("pushedCommit", "commits must be 40 or 64 hex digits")
	}
	for _, f := range []struct{ name, v string }{{"pullRequestUrl", r.PullRequestURL}, {"statusCommentUrl", r.StatusCommentURL}} {
		if u := f.v; u != "" && (len(u) > 1024 || !(strings.HasPrefix(u, "https://") || strings.HasPrefix(u, "http://")) || strings.ContainsFunc(u, isControl)) {
			return check.Field(f.name, "must be an http(s) URL of at most 1024 bytes")
		}
	}
	if r.Trigger != "" && !check.Name(r.Trigger) {
		return check.Field("trigger", "must be a trigger name")
	}
	if err := r.validateUsage(); err != nil {
		return err
	}
	if err := r.Predicted.validate(); err != nil {
		return err
	}
	for _, f := range []struct{ name, v string }{{"target", r.Target}, {"flow", r.Flow}, {"image", r.Image}, {"network", r.Network}} {
		if check.Text(f.v, 1024) != "" || strings.ContainsFunc(f.v, isControl) {
			return check.Field(f.name, "must be at most 1024 bytes of text without control characters")
		}
	}
	if len(r.Telemetry) > 0 {
		t := bytes.TrimSpace(r.Telemetry)
		if len(r.Telemetry) > MaxTelemetryBytes || len(t) == 0 || t[0] != '{' || !json.Valid(t) {
			return check.Field("telemetry", "must be a JSON object of at most %d bytes", MaxTelemetryBytes)
		}
	}
	if r.Spend != nil {
		return r.Spend.validate()
	}
	return nil
}

// maxUnpriced bounds Spend.Unpriced.
const maxUnpriced = 16

// validate checks a spend a peer may have written: known words, no negative
// counts, dollars that agree with the micros, a short list of short names.
func (s Spend) validate() error {
	t := s.Tokens
	switch {
	case s.Basis != BasisMetered && s.Basis != BasisEstimated:
		return check.Field("spend.basis", "must be metered or estimated")
	case s.Micros < 0 || s.Calls < 0 || s.Refused < 0 || t.Input < 0 || t.Output < 0 || t.CacheRead < 0 || t.CacheWrite < 0:
		return check.Field("spend", "counts must not be negative")
	case s.Dollars != USD(s.Micros):
		return check.Field("spend.dollars", "must equal micros / 1000000")
	case s.CapHit != "" && s.CapHit != ReasonCostCap && s.CapHit != ReasonTokenCap:
		return check.Field("spend.capHit", "must be cost-cap or token-cap")
	case len(s.Unpriced) > maxUnpriced:
		return check.Field("spend.unpriced", "at most %d models", maxUnpriced)
	}
	for _, m := range s.Unpriced {
		if check.Text(m, 200) != "" || strings.ContainsFunc(m, isControl) {
			return check.Field("spend.unpriced", "must be model names of at most 200 bytes")
		}
	}
	return s.validateModels()
}

func isControl(r rune) bool { return r < 0x20 || r == 0x7f }

// validCommit: empty, or a SHA-1 or SHA-256 object name in lower-case hex.
func validCommit(s string) bool {
	if s == "" {
		return true
	}
	if len(s) != 40 && len(s) != 64 {
		return false
	}
	return !strings.ContainsFunc(s, func(c rune) bool { return !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') })
}

// Record names. A job id maps to a stem (SanitizeJobID), and each attempt of
// the job on a queue to its own file, <queue>+<stem>.attempt-<n>.json, and
// its own mirror key: a retry never overwrites the record of an earlier
// attempt, the same attempt written twice is one record, and the same id on
// two queues (two producers picked it) keeps two records. Records written
// before the queue was part of the name, <stem>.attempt-<n>.json, are still
// read.
const (
	maxPlainStem  = 200 // an id used as its own stem is at most this long
	maxStemPrefix = 160 // the readable part of a stem that carries a digest
	stemDigestSep = '~' // outside the plain stem's charset
	queueSep      = "+" // outside the stem's charset and a queue name's
	attemptSep    = ".attempt-"
	recordExt     = ".json"
	maxQueueName  = 100
)

// ValidQueueName reports whether a queue may name a record: 1 to 100 bytes
// of [A-Za-z0-9._@-], not starting with '.' ("pi-jobs", "pi-jobs@web-1").
func ValidQueueName(q string) bool {
	if q == "" || len(q) > maxQueueName || q[0] == '.' {
		return false
	}
	for i := 0; i < len(q); i++ {
		c := q[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("._@-", c) >= 0) {
			return false
		}
	}
	return true
}

// SanitizeJobID maps a job id to a file name stem, injectively: an id of at
// most 200 bytes of [A-Za-z0-9._-] that does not start with '.' is its own
// stem; any other id becomes a readable part (each byte outside that set as
// '-', a leading '.' as '-', cut at 160 bytes), '~' and the first 16 hex
// digits of the SHA-256 of the whole id. Two ids never share a stem (short of
// a SHA-256 collision): "X:coll:1" and "X-coll-1" get different ones. The run
// mirror uses the same stem.
func SanitizeJobID(id string) string {
	plain := len(id) > 0 && len(id) <= maxPlainStem && id[0] != '.'
	b := []byte(id)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			b[i] = '-'
			plain = false
		}
	}
	if plain {
		return id
	}
	if len(b) > maxStemPrefix {
		b = b[:maxStemPrefix]
	}
	if len(b) > 0 && b[0] == '.' {
		b[0] = '-'
	}
	sum := sha256.Sum256([]byte(id))
	return string(b) + string(stemDigestSep) + hex.EncodeToString(sum[:8])
}

// RecordName is the name of the run record of one attempt of a job taken
// from queue, in its logs dir and, without ".json", in the run mirror:
// <queue>+<SanitizeJobID(jobID)>.attempt-<attempt>.json. An empty queue
// gives the name records had before queues named them.
func RecordName(queue, jobID string, attempt int) string {
	return RecordMember(queue, jobID, attempt) + recordExt
}

// RecordMember is a record's run mirror member and key suffix: its file name
// without .json.
func RecordMember(queue, jobID string, attempt int) string {
	name := SanitizeJobID(jobID) + attemptSep + strconv.Itoa(attempt)
	if queue != "" {
		name = queue + queueSep + name
	}
	return name
}

// OwnName reports whether member (a file name without .json, or a mirror
// member) is rec's own name: a record stored under another queue's or
// another job's name is refused by its readers.
func OwnName(member string, rec Record) bool {
	return member == RecordMember(rec.Queue, rec.JobID, rec.Attempt)
}

// parseRecordName splits a record file name into its queue ("" in the
// older form), stem and attempt.
func parseRecordName(name string) (queue, stem string, attempt int, ok bool) {
	base, found := strings.CutSuffix(name, recordExt)
	if !found {
		return "", "", 0, false
	}
	if q, rest, cut := strings.Cut(base, queueSep); cut {
		if !ValidQueueName(q) {
			return "", "", 0, false
		}
		queue, base = q, rest
	}
	i := strings.LastIndex(base, attemptSep)
	if i <= 0 {
		return "", "", 0, false
	}
	n, err := strconv.Atoi(base[i+len(attemptSep):])
	if err != nil || n < 0 || strconv.Itoa(n) != base[i+len(attemptSep):] {
		return "", "", 0, false
	}
	return queue, base[:i], n, true
}

// RefusedJobID is the record of a job whose id breaks the job id rule
// (fleet.CheckJobID): its JobID is "refused-id~" and the first 16 hex digits
// of the SHA-256 of the real id, which the record keeps, quoted, in
// JobIDQuoted. A valid id is returned as it is, with quoted empty.
func RefusedJobID(id string) (jobID, quoted string) {
	if fleet.CheckJobID(id) == nil {
		return id, ""
	}
	sum := sha256.Sum256([]byte(id))
	raw := id
	if len(raw) > maxJobIDQuoted {
		raw = raw[:maxJobIDQuoted]
	}
	quoted = strconv.QuoteToASCII(raw)
	if len(quoted) > maxJobIDQuoted {
		// Escapes grow it; cut at a rune boundary of the ASCII text, then close.
		quoted = quoted[:maxJobIDQuoted] + `..."`
	}
	return "refused-id~" + hex.EncodeToString(sum[:8]), quoted
}

// ReadRecords reads every record of jobID in dir, one per attempt and
// queue, in attempt order, in both the current and the older name form. A
// missing dir holds none. An unreadable or invalid file of the job, or one
// whose content names another queue, job or attempt than its file name, is
// an error naming it.
func ReadRecords(dir, jobID string) ([]Record, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read records: %w", err)
	}
	want := SanitizeJobID(jobID)
	var out []Record
	for _, e := range entries {
		_, stem, _, ok := parseRecordName(e.Name())
		if !ok || stem != want || !e.Type().IsRegular() {
			continue
		}
		rec, err := ReadRecordFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		if !OwnName(strings.TrimSuffix(e.Name(), recordExt), rec) {
			return nil, fmt.Errorf("read record %s: its content names another queue, job or attempt", e.Name())
		}
		out = append(out, rec)
	}
	slices.SortFunc(out, func(a, b Record) int { return a.Attempt - b.Attempt })
	return out, nil
}

// ReadRecordFile reads and validates one record file.
func ReadRecordFile(p string) (Record, error) {
	f, err := os.Open(p)
	if err != nil {
		return Record{}, fmt.Errorf("read record: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxRecordRead+1))
	if err != nil {
		return Record{}, fmt.Errorf("read record %s: %w", p, err)
	}
	var rec Record
	if len(data) > maxRecordRead {
		return Record{}, fmt.Errorf("read record %s: larger than %d bytes", p, maxRecordRead)
	}
	if err := json.Unmarshal(data, &rec); err != nil {
		return Record{}, fmt.Errorf("read record %s: %w", p, err)
	}
	if err := rec.Validate(); err != nil {
		return Record{}, fmt.Errorf("read record %s: %w", p, err)
	}
	return rec, nil
}

// WriteRecord validates r and writes it to <dir>/<RecordName(jobId, attempt)>
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
	name := RecordName(r.Queue, r.JobID, r.Attempt)
	final := filepath.Join(dir, name)
	if err := atomicfile.Write(final, data, 0o640, "."+name+tmpInfix+"*"); err != nil {
		return "", fmt.Errorf("run record: %w", err)
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

// tmpInfix marks a record's temp file: .<name>.tmp-<random>.
const tmpInfix = ".tmp-"

// RecoverRecordTemps finishes, at boot, the record writes a crash
// interrupted: a temp file that holds a whole valid record whose final file
// is missing is renamed into place (the crash fell between the fsync and the
// rename); every other temp file (cut short, or superseded) is removed. Only
// temp files last modified before olderThan are touched: another worker
// sharing the dir may be writing one right now. It returns how many it
// completed and removed.
func RecoverRecordTemps(dir string, olderThan time.Time) (completed, removed int, err error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, 0, nil
	}
	if err != nil {
		return 0, 0, fmt.Errorf("recover record temps: %w", err)
	}
	var errs []error
	for _, e := range entries {
		name, ok := tempRecordName(e.Name())
		if !ok || !e.Type().IsRegular() {
			continue
		}
		if info, ierr := e.Info(); ierr != nil || !info.ModTime().Before(olderThan) {
			continue
		}
		p := filepath.Join(dir, e.Name())
		final := filepath.Join(dir, name)
		if rec, rerr := ReadRecordFile(p); rerr == nil && RecordName(rec.Queue, rec.JobID, rec.Attempt) == name {
			if _, serr := os.Lstat(final); errors.Is(serr, fs.ErrNotExist) {
				if err := os.Rename(p, final); err != nil {
					errs = append(errs, err)
					continue
				}
				completed++
				continue
			}
		}
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
			continue
		}
		removed++
	}
	if len(errs) > 0 {
		return completed, removed, fmt.Errorf("recover record temps: %w", errors.Join(errs...))
	}
	return completed, removed, nil
}

// tempRecordName is the final name a record temp file was written for.
func tempRecordName(tmp string) (string, bool) {
	rest, ok := strings.CutPrefix(tmp, ".")
	if !ok {
		return "", false
	}
	i := strings.LastIndex(rest, tmpInfix)
	if i <= 0 {
		return "", false
	}
	name := rest[:i]
	if _, _, _, ok := parseRecordName(name); !ok && !strings.HasSuffix(name, recordExt) {
		return "", false
	}
	return name, true
}

func isHex16(s string) bool {
	return len(s) == 16 && !strings.ContainsFunc(s, func(c rune) bool { return !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') })
}
