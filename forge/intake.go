package forge

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pidispatch/pidispatch/cronsync"
	"github.com/pidispatch/pidispatch/enqueue"
	"github.com/pidispatch/pidispatch/jobs"
)

// Enqueuer is what the intake enqueues through: *enqueue.Router.
type Enqueuer interface {
	EnqueueForge(ctx context.Context, d enqueue.ForgeDelivery) (enqueue.Enqueued, error)
}

// Disarmer writes a one-shot trigger's disarm back to triggers.json
// (cronsync.Disarm on the file's path).
type Disarmer func(index int, name string, at time.Time, jobID string) error

// FileDisarmer disarms triggers in the triggers file at path.
func FileDisarmer(path string) Disarmer {
	return func(index int, name string, at time.Time, jobID string) error {
		return cronsync.Disarm(path, index, name, at, jobID)
	}
}

// IntakeConfig configures an Intake.
type IntakeConfig struct {
	// Enqueuer receives the jobs (an *enqueue.Router). Required.
	Enqueuer Enqueuer
	// Permissions asks each forge whether an actor may spend. A forge
	// without an entry refuses every event that needs a permission.
	Permissions map[jobs.Forge]Permissions
	// SelfIDs are this service's own user ids per forge: their events never
	// start a job (a bot answering itself). Optional.
	SelfIDs map[jobs.Forge]int64
	// ForgeURLs are each forge's own web URL (https://github.com, the
	// GitLab or Forgejo root): a payload whose clone URL is on another host,
	// or on http while the forge is https, is refused malformed. A forge
	// without an entry is read from its Permissions (GitLabPermissions' and
	// ForgejoPermissions' BaseURL; GitHubPermissions' API URL, api.<host>
	// or <host>/api/v3, gives <host>); with neither, a clone URL is only
	// held to http(s) without credentials. Optional.
	ForgeURLs map[jobs.Forge]string
	// PullRequests, when set, records what became of the project's own pull
	// requests (closed, merged, reopened, commits pushed by a person) as
	// their events arrive; those events start a job only when a trigger
	// says so, as any other. Optional.
	PullRequests PullRequestRecorder
	// Status, when set, shows each job on its issue or pull request as
	// queued before it is enqueued (the job's one status comment, which the
	// worker that takes it edits). Optional: without it the worker writes
	// the comment when it first takes the job.
	Status QueuedStatus
	// Disarm, when set, is called after a one-shot trigger enqueued its job.
	Disarm Disarmer
	// Logger receives forge_enqueued, forge_refused and forge_dropped.
	Logger *slog.Logger
	// Host is this host's name, on every log line.
	Host string
	// Now is the clock (disarm times). Default time.Now.
	Now func() time.Time
}

// QueuedStatus writes a job's status comment when the intake accepts it.
// Its failures are logged and never hold a job back.
type QueuedStatus interface {
	// Queued shows the job as queued in its status comment, written before
	// the job is enqueued (so no worker can write one first); a job that has
	// a status comment already keeps it unchanged.
	Queued(ctx context.Context, jobID string, job jobs.Job) error
	// Duplicate says in the comment Queued wrote for jobID that the delivery
	// was folded into job sameAs, queued already: nothing runs as jobID.
	Duplicate(ctx context.Context, jobID string, job jobs.Job, sameAs string) error
}

// statusTimeout bounds writing one queued status comment: a slow forge
// delays the delivery's processing by at most this, never its answer.
const statusTimeout = 10 * time.Second

// Outcome is what became of an event.
type Outcome struct {
	// Status is "enqueued", "refused" (the source or actor may not spend) or
	// "dropped" (no trigger wants the event).
	Status string
	// Reason is the fixed token of a refusal or a drop.
	Reason string
	// Trigger names the trigger that fired.
	Trigger string
	// JobIDs are the jobs enqueued (or found already enqueued).
	JobIDs []string
}

// Outcome statuses.
const (
	StatusEnqueued = "enqueued"
	StatusRefused  = "refused"
	StatusDropped  = "dropped"
	// StatusIgnored: an event type no trigger handles (GitHub's ping, a
	// push, an edited comment): nothing to decide, nothing to spend.
	StatusIgnored = "ignored"
)

// ErrEnqueue marks an event whose jobs could not all be enqueued (Valkey
// failed): the event is undecided, and enqueuing it again converges on the
// same jobs.
var ErrEnqueue = errors.New("enqueue failed")

// Intake matches events against the forge triggers and enqueues the jobs
// they start. It is safe for concurrent use; SetTriggers swaps the set.
type Intake struct {
	cfg      IntakeConfig
	log      *slog.Logger
	triggers atomic.Pointer[[]cronsync.ForgeTrigger]
	setMu    sync.Mutex // orders SetTriggers and markDisarmed
	disarmMu sync.Mutex // one write of the triggers file at a time
}

// NewIntake returns an Intake with no triggers: call SetTriggers.
func NewIntake(cfg IntakeConfig) (*Intake, error) {
	if cfg.Enqueuer == nil {
		return nil, errors.New("forge: intake needs an Enqueuer")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	in := &Intake{cfg: cfg, log: log.With("host", cfg.Host)}
	in.SetTriggers(nil)
	return in, nil
}

// SetTriggers replaces the forge triggers (a live reload).
func (in *Intake) SetTriggers(t []cronsync.ForgeTrigger) {
	t = append([]cronsync.ForgeTrigger(nil), t...)
	in.setMu.Lock()
	in.triggers.Store(&t)
	in.setMu.Unlock()
}

// Refuse logs a refusal the caller decided (a receiver's bad signature):
// forge_refused with the reason, one line, nothing enqueued.
func (in *Intake) Refuse(f jobs.Forge, delivery, reason string, attrs ...any) {
	in.log.Warn("forge_refused", append([]any{"forge", f, "delivery", delivery, "reason", reason}, attrs...)...)
}

// Ignore logs an event of a type no trigger handles (forge_ignored, one
// line): answered, never stored, nothing spent. eventType is the forge's word
// for it (the event header).
func (in *Intake) Ignore(f jobs.Forge, delivery, eventType string) {
	in.log.Info("forge_ignored", "forge", f, "delivery", delivery, "event", eventType)
}

// Handle matches ev, checks its actor and enqueues its jobs. An error means
// the event could be neither enqueued nor decided (a permission lookup or
// Valkey failed): it must be handled again later (the inbox retries it; see
// RetryAt for when the forge asked to be asked again). An event of a type no
// trigger handles (an empty Kind) is ignored: forge_ignored, whatever its
// repository. An event about the project's own pull request is also
// followed (IntakeConfig.PullRequests), last, so a retry after an enqueue
// failure does not count a push twice.
func (in *Intake) Handle(ctx context.Context, ev Event) (Outcome, error) {
	out, err := in.handle(ctx, ev)
	if err != nil {
		return out, err
	}
	if err := in.follow(ctx, ev); err != nil {
		return Outcome{}, err
	}
	return out, nil
}

// handle matches, authorizes and enqueues: Handle without the following.
func (in *Intake) handle(ctx context.Context, ev Event) (Outcome, error) {
	if ev.Kind == "" {
		in.log.Info("forge_ignored", "forge", ev.Forge, "delivery", ev.DeliveryID, "action", ev.Action)
		return Outcome{Status: StatusIgnored, Reason: ReasonUnhandled}, nil
	}
	attrs := []any{"forge", ev.Forge, "delivery", ev.DeliveryID, "repo", ev.Repo, "number", ev.Number}
	if ev.CloneURL != "" {
		if err := CheckCloneURL(ev.CloneURL, in.forgeURL(ev.Forge)); err != nil {
			return in.refuseEvent(attrs, ReasonMalformed, "why", err.Error())
		}
	}
	t, need, reason := Match(*in.triggers.Load(), ev)
	switch {
	case reason == ReasonUnknownRepository:
		return in.refuseEvent(attrs, reason)
	case reason != "":
		in.log.Info("forge_dropped", append(attrs, "event", ev.Kind, "action", ev.Action, "reason", reason)...)
		return Outcome{Status: StatusDropped, Reason: reason}, nil
	}
	attrs = append(attrs, "trigger", t.Name)
	if out, err := in.authorize(ctx, ev, need, attrs); out.Status != "" || err != nil {
		return out, err
	}
	out, err := in.enqueueReplicas(ctx, t, ev, attrs)
	if err != nil {
		return Outcome{}, err
	}
	if t.Once && in.cfg.Disarm != nil {
		in.disarm(t, out.JobIDs[0], attrs)
	}
	return out, nil
}

// forgeURL is f's own web URL: ForgeURLs, else the one its permission lookup
// asks; "" when neither says.
func (in *Intake) forgeURL(f jobs.Forge) string {
	if u := in.cfg.ForgeURLs[f]; u != "" {
		return u
	}
	p := in.cfg.Permissions[f]
	if c, ok := p.(*CachedPermissions); ok {
		p = c.Inner
	}
	switch p := p.(type) {
	case GitLabPermissions:
		return p.BaseURL
	case ForgejoPermissions:
		return p.BaseURL
	case GitHubPermissions:
		return githubWebURL(p.BaseURL)
	}
	return ""
}

// githubWebURL is the web root of GitHub's API at api: https://api.github.com
// (or api.<tenant>.ghe.com) serves the host without its api. prefix, GitHub
// Enterprise Server serves <host>/api/v3 from <host>; any other API URL (a
// test double) names no web root.
func githubWebURL(api string) string {
	u, err := url.Parse(api)
	if err != nil || u.Host == "" {
		return ""
	}
	switch p := strings.TrimSuffix(u.Path, "/"); {
	case p == "" && strings.HasPrefix(u.Host, "api."):
		return u.Scheme + "://" + strings.TrimPrefix(u.Host, "api.")
	case p == "/api/v3":
		return u.Scheme + "://" + u.Host
	}
	return ""
}

// gitlabTokenBot matches the user names GitLab gives the bot user of a
// project or group access token (project_<id>_bot_<hex>, and the older
// project_<id>_bot, project_<id>_bot1).
var gitlabTokenBot = regexp.MustCompile(`^(project|group)_[0-9]+_bot[0-9]*(_[0-9a-f]{1,64})?$`)

// refuseEvent logs forge_refused with the event's attributes and the reason: a refusal is decided, never redelivered.
func (in *Intake) refuseEvent(attrs []any, reason string, more ...any) (Outcome, error) {
	in.log.Warn("forge_refused", append(append(attrs, "reason", reason), more...)...)
	return Outcome{Status: StatusRefused, Reason: reason}, nil
}

// authorize refuses an actor that may not spend (a zero Outcome and no error let the event through).
func (in *Intake) authorize(ctx context.Context, ev Event, need Need, attrs []any) (Outcome, error) {
	if self, ok := in.cfg.SelfIDs[ev.Forge]; ok && self == ev.SenderID {
		return in.refuseEvent(attrs, ReasonSelf)
	}
	if ev.Forge == jobs.ForgeGitLab && gitlabTokenBot.MatchString(ev.SenderLogin) {
		// Each job's project token is a bot user of its own, unknown to
		// SelfIDs: its merge requests and notes must not start jobs.
		return in.refuseEvent(attrs, ReasonSelf, "why", "a GitLab project or group access token's bot user")
	}
	perms := in.cfg.Permissions[ev.Forge]
	if perms == nil {
		return in.refuseEvent(attrs, ReasonAuthorNotAllowed, "why", "no permission lookup configured for this forge")
	}
	ok, err := perms.Allowed(ctx, ev, need)
	switch {
	case errors.Is(err, ErrLookupForbidden):
		return in.refuseEvent(attrs, ReasonLookupForbidden, "need", need.String(), "err", err.Error())
	case err != nil:
		in.log.Error("forge_permission_lookup_failed", append(attrs, "rateLimited", errors.Is(err, ErrRateLimited), "err", err.Error())...)
		return Outcome{}, err
	case !ok:
		return in.refuseEvent(attrs, ReasonAuthorNotAllowed, "need", need.String(), "sender", ev.SenderID)
	}
	return Outcome{}, nil
}

// enqueueReplicas enqueues the trigger's jobs under ids fixed by the delivery, so a redelivery converges on them.
func (in *Intake) enqueueReplicas(ctx context.Context, t cronsync.ForgeTrigger, ev Event, attrs []any) (Outcome, error) {
	out := Outcome{Status: StatusEnqueued, Trigger: t.Name}
	n := max(t.Replicas, 1)
	for i := 1; i <= n; i++ {
		d := Delivery(t, ev, i)
		queued := in.queuedStatus(ctx, d, attrs)
		e, err := in.cfg.Enqueuer.EnqueueForge(ctx, d)
		if err != nil {
			// Replicas enqueued so far keep their ids: a redelivery
			// converges on n jobs.
			in.log.Error("forge_enqueue_failed", append(attrs, "jobId", d.JobID, "err", err.Error())...)
			return Outcome{}, fmt.Errorf("%w: %s: %w", ErrEnqueue, d.JobID, err)
		}
		if queued && e.JobID != d.JobID {
			in.duplicateStatus(ctx, d, e.JobID, attrs)
		}
		out.JobIDs = append(out.JobIDs, e.JobID)
		in.log.Info("forge_enqueued", append(attrs, "jobId", e.JobID, "queue", e.Queue, "added", e.Added,
			"replica", d.Job.Replica, "replicas", d.Job.Replicas)...)
	}
	return out, nil
}

// queuedStatus writes d's queued status comment, when the intake writes
// them, and reports whether it did.
func (in *Intake) queuedStatus(ctx context.Context, d enqueue.ForgeDelivery, attrs []any) bool {
	if in.cfg.Status == nil {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, statusTimeout)
	defer cancel()
	if err := in.cfg.Status.Queued(ctx, d.JobID, d.Job); err != nil {
		in.log.Warn("forge_status_failed", append(attrs, "jobId", d.JobID, "state", "queued", "err", err.Error())...)
		return false
	}
	return true
}

// duplicateStatus says in d's comment that it was folded into job sameAs.
func (in *Intake) duplicateStatus(ctx context.Context, d enqueue.ForgeDelivery, sameAs string, attrs []any) {
	ctx, cancel := context.WithTimeout(ctx, statusTimeout)
	defer cancel()
	if err := in.cfg.Status.Duplicate(ctx, d.JobID, d.Job, sameAs); err != nil {
		in.log.Warn("forge_status_failed", append(attrs, "jobId", d.JobID, "state", "duplicate", "err", err.Error())...)
	}
}

// disarm writes a one-shot trigger's disarm to the file and disarms it in memory, so it fires no more.
func (in *Intake) disarm(t cronsync.ForgeTrigger, jobID string, attrs []any) {
	in.disarmMu.Lock()
	err := in.cfg.Disarm(t.Index, t.Name, in.cfg.Now(), jobID)
	in.disarmMu.Unlock()
	// Disarmed in memory either way: a one-shot trigger fires once per
	// process even when the file could not be written.
	in.markDisarmed(t.Index)
	if err != nil {
		in.log.Error("forge_disarm_failed", append(attrs, "err", err.Error())...)
	} else {
		in.log.Info("forge_trigger_disarmed", attrs...)
	}
}

// markDisarmed disarms the trigger in the live set at once, before the file
// watcher reloads it.
func (in *Intake) markDisarmed(index int) {
	in.setMu.Lock()
	defer in.setMu.Unlock()
	cur := *in.triggers.Load()
	next := append([]cronsync.ForgeTrigger(nil), cur...)
	for i := range next {
		if next[i].Index == index {
			next[i].Disarmed = true
		}
	}
	in.triggers.Store(&next)
}

// JobIDPrefix is the job id prefix of each forge's deliveries.
func JobIDPrefix(f jobs.Forge) string {
	switch f {
	case jobs.ForgeGitLab:
		return "gl-"
	case jobs.ForgeForgejo:
		return "fj-"
	}
	return "gh-"
}

// Delivery is the enqueue request for replica i (1-based) of the job trigger
// t starts for ev: the delivery id as the job id (with -r<i> for a replica)
// and the 10-minute dedup id <forge>:<repo>#<n>:<trigger>[:r<i>].
func Delivery(t cronsync.ForgeTrigger, ev Event, i int) enqueue.ForgeDelivery {
	job := t.Job
	job.Kind = jobs.KindForge
	job.Repo = ev.Repo
	job.Forge = ev.Forge
	job.RepoID = ev.RepoID
	job.Number = ev.Number
	job.PullRequest = ev.PullRequest
	job.DeliveryID = ev.DeliveryID
	job.Trigger = t.Name
	job.CommentID, job.ReviewID, job.ActorID = ev.CommentID, ev.ReviewID, ev.SenderID
	job.Label = firstLabel(t, ev.Added)
	id := JobIDPrefix(ev.Forge) + ev.DeliveryID
	dedup := string(ev.Forge) + ":" + ev.Repo + "#" + strconv.Itoa(ev.Number) + ":" + t.Name
	if t.Replicas > 1 {
		job.Replica, job.Replicas = i, t.Replicas
		id += "-r" + strconv.Itoa(i)
		dedup += ":r" + strconv.Itoa(i)
	}
	return enqueue.ForgeDelivery{JobID: id, DedupID: dedup, Job: job}
}

// firstLabel is the added label the trigger fired on: the first of added
// that the trigger names (any or all), else the first added; one line, cut
// to the job's bound.
func firstLabel(t cronsync.ForgeTrigger, added []string) string {
	for _, l := range added {
		if contains(t.Any, l) || contains(t.All, l) {
			return jobs.ClipName(l)
		}
	}
	if len(added) > 0 {
		return jobs.ClipName(added[0])
	}
	return ""
}
