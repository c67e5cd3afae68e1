package jobs

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/pidispatch/pidispatch/capabilities"
	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/internal/check"
	"github.com/pidispatch/pidispatch/internal/jobrule"
)

// Kind says where a job came from, which decides what it targets and where it may run.
type Kind string

// Job kinds. Folder kinds (local, cron, chain, and a manual run of a folder) can run only
// on the host that has the folder; a forge job targets a repository any host can clone.
const (
	// KindLocal is `pi-dispatch run <folder>`: a folder on the enqueuing host.
	KindLocal Kind = "local"
	// KindCron is fired by a job scheduler from a triggers.json cron entry (a folder).
	KindCron Kind = "cron"
	// KindChain is a child a finished job asked for through its /outbox; it runs in
	// the parent's folder and carries the parent's job id.
	KindChain Kind = "chain"
	// KindForge is a forge delivery (webhook or poll): a repository and a ref.
	KindForge Kind = "forge"
	// KindManual is an operator-started run of a configured trigger; it targets
	// either a folder or a repository.
	KindManual Kind = "manual"
)

// Limits of the job model.
const (
	MaxTaskBytes      = jobrule.MaxTaskBytes
	MaxJobDataBytes   = 1 << 20 // whole job data, as the queue stores it
	MaxWaitConditions = 4       // the original's 1-4 waitFor conditions
	MaxWaitArgs       = 8
	MaxWaitArgBytes   = 256
	MaxWaitAfter      = 30 * 24 * time.Hour // the original's PI_WAIT_AFTER_MAX_MS
)

// WaitCondition is one entry of a job's waitFor list: exactly one of Profile (a
// check script declared in PI_WAIT_PROFILES, run with Args until it exits 0) or
// After: a delay in Go duration syntax ("90m", 1s to 30 days), counted from the
// start of the job's hold, or an RFC 3339 instant ("2026-05-01T09:00:00Z"). An
// instant already past is met.
type WaitCondition struct {
	Profile string   `json:"profile,omitempty"`
	Args    []string `json:"args,omitempty"`
	After   string   `json:"after,omitempty"`
}

// Job is a job's public description: what travels in the queue's job data and what
// the container reads as /job/job.json. It carries names and references only; a
// secret value never travels in it (SecretsProfile names a resolver on the host).
//
// The JSON field names are the original's camelCase. Unknown fields are refused by
// [ParseJob]: a field this worker does not understand may be a policy (a cost cap, a
// model allowlist) that it would otherwise silently not enforce, and a paid job that
// ignores its own limits is worse than one refused as invalid-job.
type Job struct {
	Kind Kind `json:"kind"`
	// Folder is the absolute, clean path of the workspace (folder kinds).
	Folder string `json:"folder,omitempty"`
	// Repo is the forge repository, "owner/name" (subgroups allowed), for forge jobs.
	Repo string `json:"repo,omitempty"`
	// Ref is the git ref to work on (forge jobs); empty means the default branch.
	Ref string `json:"ref,omitempty"`
	// Flow names the agent flow to run; exactly one of Flow and Command is set.
	Flow string `json:"flow,omitempty"`
	// Command names a prompt command to run instead of a flow.
	Command string `json:"command,omitempty"`
	// Task is the instruction; required with Flow, optional with Command.
	Task string `json:"task,omitempty"`
	// Image overrides PI_JOB_IMAGE for this job. Never pulled.
	Image string `json:"image,omitempty"`
	// SecretsProfile names a resolver in PI_SECRET_PROFILES on the host that runs it.
	SecretsProfile string `json:"secretsProfile,omitempty"`
	// WaitFor holds the job until every condition is met (1 to 4 conditions).
	WaitFor []WaitCondition `json:"waitFor,omitempty"`
	// Resume continues the previous agent session of the same target. Never routed:
	// a session key is guessable from the repository and ref, so it is not published.
	Resume bool `json:"resume,omitempty"`
	// ParentJobID is the job that asked for this chained child.
	ParentJobID string `json:"parentJobId,omitempty"`
	// SchedulerID names the cron trigger that fired a cron job.
	SchedulerID string `json:"schedulerId,omitempty"`

	// Agent settings from a trigger's run object. The worker does not act on
	// them: they reach the job image in /job/job.json, and the agent in the
	// image honours them (its model, turn and cost limits). They are
	// validated here so junk never reaches the image.
	Provider     string   `json:"provider,omitempty"`
	Model        string   `json:"model,omitempty"`
	Models       []string `json:"models,omitempty"`
	MaxTurns     int      `json:"maxTurns,omitempty"`
	MaxCostUSD   string   `json:"maxCostUsd,omitempty"`
	Packages     *bool    `json:"packages,omitempty"`
	ExcludeTools []string `json:"excludeTools,omitempty"`
	SkillsDir    string   `json:"skillsDir,omitempty"`
	GitHub       bool     `json:"github,omitempty"`
	// Network grants the job the worker's configured network (PI_JOB_NETWORK);
	// without it the container has no network at all, and reaches a model only
	// through the worker's model socket (PI_MODEL_UPSTREAM).
	Network bool `json:"network,omitempty"`

	// ForgeEvent holds a forge delivery's fields (forge jobs and manual runs of a
	// forge trigger); inlined in the job data.
	ForgeEvent

	// Attempt is the delivery's attempt number (1 for the first). It is a fact of the
	// queue, not of the job description, so it is never read from or written to the
	// job data: the worker sets it from the queue when it picks the job up.
	Attempt int `json:"-"`
}

// FieldError says which field of a job or policy file broke which rule.
// Rule never repeats a value that could be secret.
type FieldError = check.FieldError

// ErrInvalidJob marks every error ParseJob and Job.Validate return, so the worker can
// refuse the job (reason invalid-job) rather than retry it.
var ErrInvalidJob = errors.New("invalid job")

// invalidJob wraps err so errors.Is(err, ErrInvalidJob) holds and a *FieldError stays
// reachable with errors.As.
type invalidJob struct{ err error }

func (e *invalidJob) Error() string   { return "invalid job: " + e.err.Error() }
func (e *invalidJob) Unwrap() []error { return []error{ErrInvalidJob, e.err} }

// ParseJob decodes job data strictly: valid UTF-8, one JSON object, no duplicate keys,
// no unknown fields (the error names the field), then Validate.
func ParseJob(data []byte) (Job, error) {
	var j Job
	if err := check.DecodeStrict(data, MaxJobDataBytes, &j); err != nil {
		return Job{}, &invalidJob{err}
	}
	if err := j.Validate(); err != nil {
		return Job{}, err
	}
	return j, nil
}

// Validate checks the job against the model's rules and returns the first broken one
// as a *FieldError wrapped so that errors.Is(err, ErrInvalidJob) holds.
func (j Job) Validate() error {
	if err := j.validate(); err != nil {
		return &invalidJob{err}
	}
	return nil
}

// validate applies the model's rules in a fixed order, so a job always reports the same first broken one.
func (j Job) validate() error {
	for _, step := range []func() error{
		j.validateKind, j.validateTarget, j.validateWork, j.validateRuntime, j.validateWait,
		j.validateResume, j.validateScheduler, j.validateAgent, j.validateForge, j.validateParent,
	} {
		if err := step(); err != nil {
			return err
		}
	}
	return nil
}

// validateKind checks that the kind targets what it must: a folder kind a folder, a forge job a repository.
func (j Job) validateKind() error {
	switch j.Kind {
	case KindLocal, KindCron, KindChain:
		if j.Folder == "" {
			return check.Field("folder", "required for a %s job", j.Kind)
		}
		if j.Repo != "" || j.Ref != "" {
			return check.Field("repo", "a %s job targets a folder, not a repository", j.Kind)
		}
	case KindForge:
		if j.Repo == "" {
			return check.Field("repo", "required for a forge job")
		}
		if j.Folder != "" {
			return check.Field("folder", "a forge job targets a repository, not a folder")
		}
	case KindManual:
		if (j.Folder == "") == (j.Repo == "") {
			return check.Field("folder", "a manual job needs exactly one of folder and repo")
		}
		if j.Folder != "" && j.Ref != "" {
			return check.Field("ref", "only a repository has a ref")
		}
	case "":
		return check.Field("kind", "required (local, cron, chain, forge or manual)")
	default:
		return check.Field("kind", "unknown kind %s (want local, cron, chain, forge or manual)", check.Quote(string(j.Kind)))
	}
	return nil
}

// validateTarget checks the folder, repository and ref syntax, as they become paths and git arguments.
func (j Job) validateTarget() error {
	if j.Folder != "" {
		if rule := check.AbsClean(j.Folder); rule != "" {
			return check.Field("folder", "%s", rule)
		}
	}
	if j.Repo != "" && !check.Repo(j.Repo) {
		return check.Field("repo", "must be owner/name (segments of [A-Za-z0-9._-], no '.' or '..' segment, at most %d bytes)", check.MaxRefLen)
	}
	if j.Ref != "" && !validRef(j.Ref) {
		return check.Field("ref", "must be a git ref of [A-Za-z0-9._/-], not starting with '-' or '/', without '..' (at most %d bytes)", check.MaxRefLen)
	}
	return nil
}

// validateWork checks what runs: exactly one of a flow and a command, and a flow's task.
func (j Job) validateWork() error {
	if (j.Flow == "") == (j.Command == "") {
		return check.Field("flow", "exactly one of flow and command is required")
	}
	if j.Flow != "" && !check.Name(j.Flow) {
		return check.Field("flow", "must match %s (at most %d bytes)", check.NameSyntax, check.MaxNameLen)
	}
	if j.Command != "" && !check.Name(j.Command) {
		return check.Field("command", "must match %s (at most %d bytes)", check.NameSyntax, check.MaxNameLen)
	}
	if j.Flow != "" && j.Task == "" {
		return check.Field("task", "required with a flow")
	}
	if rule := check.Text(j.Task, MaxTaskBytes); rule != "" {
		return check.Field("task", "%s", rule)
	}
	return nil
}

// validateRuntime checks the image and secrets profile, which name things on the host that runs the job.
func (j Job) validateRuntime() error {
	if j.Image != "" && !ValidImageRef(j.Image) {
		return check.Field("image", "not a valid image reference ([registry/]name[:tag][@digest], lowercase name)")
	}
	if j.SecretsProfile != "" && !check.Name(j.SecretsProfile) {
		return check.Field("secretsProfile", "must match %s (at most %d bytes)", check.NameSyntax, check.MaxNameLen)
	}
	return nil
}

// validateWait checks the wait conditions, which a cron job cannot have: its schedule is its condition.
func (j Job) validateWait() error {
	if j.WaitFor == nil {
		return nil
	}
	if err := validateWaitFor(j.WaitFor); err != nil {
		return err
	}
	if j.Kind == KindCron {
		return check.Field("waitFor", "a cron job cannot wait: its schedule is its condition")
	}
	return nil
}

// validateResume refuses resume where a session cannot or must not be continued.
func (j Job) validateResume() error {
	if !j.Resume {
		return nil
	}
	switch {
	case j.Kind == KindCron:
		return check.Field("resume", "a cron job cannot resume a session")
	case j.Command != "":
		return check.Field("resume", "a command job cannot resume a session")
	case j.SecretsProfile != "":
		return check.Field("resume", "a job with a secrets profile cannot resume a session (the session would carry the secrets)")
	}
	return nil
}

// validateScheduler checks the scheduler id, which only a cron job carries and its job id embeds.
func (j Job) validateScheduler() error {
	if j.SchedulerID == "" {
		return nil
	}
	if j.Kind != KindCron {
		return check.Field("schedulerId", "only a cron job has a scheduler")
	}
	if !check.Name(strings.NewReplacer("@", "-", "#", "-").Replace(j.SchedulerID)) {
		return check.Field("schedulerId", "must be letters, digits and . _ @ # - (at most %d bytes)", check.MaxNameLen)
	}
	return nil
}

// validateParent checks that a chain job, and only a chain job, names the job that asked for it.
func (j Job) validateParent() error {
	if j.Kind == KindChain && j.ParentJobID == "" {
		return check.Field("parentJobId", "required for a chain job")
	}
	if j.ParentJobID == "" {
		return nil
	}
	if j.Kind != KindChain {
		return check.Field("parentJobId", "only a chain job has a parent")
	}
	if !ValidJobID(j.ParentJobID) {
		return check.Field("parentJobId", "must match %s", jobIDSyntax)
	}
	return nil
}

// validateAgent checks the agent settings against the rules a triggers file's
// run object obeys too (package jobrule), so a cron trigger the worker would
// refuse is refused when its file is read.
func (j Job) validateAgent() error {
	token := func(field, s string) error {
		if s != "" && !jobrule.Token(s) {
			return check.Field(field, "must be 1-%d printable characters without spaces", jobrule.MaxNameBytes)
		}
		return nil
	}
	if err := token("provider", j.Provider); err != nil {
		return err
	}
	if err := token("model", j.Model); err != nil {
		return err
	}
	bad, shortEnough := jobrule.Models(j.Models)
	if !shortEnough {
		return check.Field("models", "at most %d models", jobrule.MaxModels)
	}
	if bad >= 0 {
		return check.Field(fmt.Sprintf("models[%d]", bad), "must be 1-%d printable characters without spaces", jobrule.MaxNameBytes)
	}
	if j.MaxTurns != 0 && !jobrule.Turns(j.MaxTurns) {
		return check.Field("maxTurns", "must be between 1 and %d", jobrule.MaxTurns)
	}
	if j.MaxCostUSD != "" && !jobrule.Cost(j.MaxCostUSD) {
		return check.Field("maxCostUsd", `must be a positive decimal string such as "2.50"`)
	}
	for i, t := range j.ExcludeTools {
		switch jobrule.ExcludeTool(j.ExcludeTools, i) {
		case "unknown":
			return check.Field(fmt.Sprintf("excludeTools[%d]", i), "%s is not one of %s", check.Quote(t), strings.Join(jobrule.ExcludableTools, " "))
		case "twice":
			return check.Field(fmt.Sprintf("excludeTools[%d]", i), "%s is listed twice", check.Quote(t))
		}
	}
	if j.SkillsDir != "" {
		if rule := check.AbsClean(j.SkillsDir); rule != "" {
			return check.Field("skillsDir", "%s", rule)
		}
	}
	return nil
}

func validateWaitFor(conds []WaitCondition) error {
	if len(conds) == 0 || len(conds) > MaxWaitConditions {
		return check.Field("waitFor", "must hold 1 to %d conditions, not %d", MaxWaitConditions, len(conds))
	}
	for i, c := range conds {
		at := fmt.Sprintf("waitFor[%d]", i)
		if (c.Profile == "") == (c.After == "") {
			return check.Field(at, "exactly one of profile and after is required")
		}
		if c.After != "" {
			if len(c.Args) > 0 {
				return check.Field(at+".args", "only a profile condition takes args")
			}
			_, _, rule := ParseAfter(c.After)
			if rule != "" {
				return check.Field(at+".after", "%s", rule)
			}
			continue
		}
		if !check.Name(c.Profile) {
			return check.Field(at+".profile", "must match %s (at most %d bytes)", check.NameSyntax, check.MaxNameLen)
		}
		if len(c.Args) > MaxWaitArgs {
			return check.Field(at+".args", "at most %d args, not %d", MaxWaitArgs, len(c.Args))
		}
		for k, a := range c.Args {
			if rule := check.Text(a, MaxWaitArgBytes); rule != "" {
				return check.Field(fmt.Sprintf("%s.args[%d]", at, k), "%s", rule)
			}
		}
	}
	return nil
}

// maxAfterInstantLen bounds an RFC 3339 instant ("2026-05-01T09:00:00.123456789+01:00"
// is 35 bytes).
const maxAfterInstantLen = 64

// ParseAfter reads a wait condition's `after` value: a delay (Go duration syntax, 1s to
// MaxWaitAfter) or, when it holds a 'T' or a '-' (which no duration has), an RFC
// 3339 instant. Exactly one of delay and at is set when rule is "".
func ParseAfter(s string) (delay time.Duration, at time.Time, rule string) {
	if strings.ContainsAny(s, "T-") {
		if len(s) > maxAfterInstantLen || !utf8.ValidString(s) {
			return 0, time.Time{}, `must be a Go duration such as "90m" or an RFC 3339 instant such as "2026-05-01T09:00:00Z"`
		}
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return 0, time.Time{}, `must be an RFC 3339 instant such as "2026-05-01T09:00:00Z" (or a Go duration such as "90m")`
		}
		return 0, t, ""
	}
	d, rule := check.Duration(s)
	if rule == "" && (d < time.Second || d > MaxWaitAfter) {
		rule = fmt.Sprintf("must be between 1s and %s", MaxWaitAfter)
	}
	if rule != "" {
		return 0, time.Time{}, rule
	}
	return d, time.Time{}, ""
}

// Needs is what the job needs from the host that runs it, as capability tokens
// ("s:<secretsProfile>", "w:<profile>"), sorted and unique. Routing reads it at enqueue.
func (j Job) Needs() []string {
	var waits []string
	for _, c := range j.WaitFor {
		if c.Profile != "" {
			waits = append(waits, c.Profile)
		}
	}
	return capabilities.Needs(j.SecretsProfile, waits)
}

// WaitProfiles lists the profile names of the job's wait conditions, in order.
func (j Job) WaitProfiles() []string {
	var out []string
	for _, c := range j.WaitFor {
		if c.Profile != "" {
			out = append(out, c.Profile)
		}
	}
	return out
}

// Scope is what scoped limits and pause windows match the job against: the folder of
// a folder job, the repository of a repository job. It is derived, never read from the
// job data, so a producer cannot move a job out of its own limits.
func (j Job) Scope() string {
	if j.Folder != "" {
		return j.Folder
	}
	return j.Repo
}

// Thread is the conversation a job answers: "<forge>:<repo>#<number>" for a
// forge job about an issue or a pull request (GitLab's numbers are
// iids), "local:<folder>" for a folder job, else "". Jobs of one thread run
// one at a time, oldest first, share one branch and continue one agent
// session.
func (j Job) Thread() string {
	switch {
	case j.Forge != "" && j.Repo != "" && j.Number > 0:
		return string(j.Forge) + ":" + j.Repo + "#" + strconv.Itoa(j.Number)
	case j.Folder != "":
		return "local:" + j.Folder
	}
	return ""
}

// Target is what a run record says the job worked on: "local:<basename>" for a folder
// (the full path can name a person and is mirrored fleet-wide; the original records the
// basename for the same reason) and the repository for a repository job.
func (j Job) Target() string {
	if j.Folder != "" {
		return "local:" + path.Base(filepath.ToSlash(j.Folder))
	}
	return j.Repo
}

// localIDMinute is the original's ISO minute: new Date().toISOString().slice(0, 16).
const localIDMinute = "2006-01-02T15:04"

// LocalJobID is the id of a local run: "local-" + the first 16 hex of
// sha256(folder NUL flow NUL task NUL minute), minute being the UTC ISO minute
// ("2026-11-30T02:11"). The same run asked for twice within one minute is one job.
// A command job passes "cmd:<command>" as flow, as the original does.
func LocalJobID(folder, flow, task string, minute time.Time) string {
	return "local-" + hash16(folder, flow, task, minute.UTC().Format(localIDMinute))
}

// emptyJobJSON is the JSON of a Job{} (kind is never omitted).
const emptyJobJSON = `{"kind":""}`

// LocalRunID is the id [Producer.EnqueueLocal] gives job, a local run asked
// for at minute. A job that sets only its folder, flow (or command) and task
// gets LocalJobID, the original's id. Every other field that changes what
// runs (the image, the agent settings, the secrets profile, waitFor, resume)
// joins the hash as one more part, the job's JSON without the four fields
// already hashed, so the same run on another image is another job, never a
// duplicate of the first. extra parts (a nonce for a forced fresh run)
// follow. The id stays "local-" + 16 hex.
func LocalRunID(job Job, minute time.Time, extra ...string) string {
	flow := job.Flow
	if job.Command != "" {
		flow = "cmd:" + job.Command
	}
	parts := []string{job.Folder, flow, job.Task, minute.UTC().Format(localIDMinute)}
	rest := job
	rest.Kind, rest.Folder, rest.Flow, rest.Command, rest.Task = "", "", "", "", ""
	if b, err := json.Marshal(rest); err == nil && string(b) != emptyJobJSON {
		parts = append(parts, string(b))
	}
	return "local-" + hash16(append(parts, extra...)...)
}

// ChainJobID is the id of a chained child: "chain-" + the first 16 hex of
// sha256(parent NUL flow NUL task). No time component, so a retried parent asks for
// the same child and the queue deduplicates it.
func ChainJobID(parent, flow, task string) string {
	return "chain-" + hash16(parent, flow, task)
}

func hash16(parts ...string) string {
	sum := sha256.Sum256([]byte(strings.Join(parts, "\x00")))
	return hex.EncodeToString(sum[:])[:16]
}

// Shared validation helpers, used by the job model, the policy files and the config.

const (
	jobIDSyntax = `^[A-Za-z0-9._:@#-]{1,256}$`
)

// ValidJobID reports whether id is one of the ids this package's jobs carry: the
// job id rule (fleet.CheckJobID) and only letters, digits and . _ : @ # - (what
// local-, chain-, repeat:<id>:<ms> and forge delivery ids are made of). A parent
// job id must be one.
func ValidJobID(id string) bool {
	if fleet.CheckJobID(id) != nil {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("._:@#-", c) >= 0) {
			return false
		}
	}
	return true
}

var refRE = regexp.MustCompile(`^[A-Za-z0-9._][A-Za-z0-9._/-]*$`)

func validRef(s string) bool {
	return len(s) <= check.MaxRefLen && refRE.MatchString(s) && !strings.Contains(s, "..") &&
		!strings.Contains(s, "//") && !strings.HasSuffix(s, "/") && !strings.HasSuffix(s, ".lock")
}

// ValidImageRef reports whether s is a plausible container image reference
// ("pi-job:latest", "ghcr.io/acme/pi-job:1.2@sha256:..."). It checks syntax only;
// whether the image is present is the runtime's question.
func ValidImageRef(s string) bool { return jobrule.ImageRef(s) }
