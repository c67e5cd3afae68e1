package dispatch

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/internal/hostfolder"
	"github.com/pidispatch/pidispatch/jobs"
)

// gate is one rung of the ladder a taken job climbs before its container
// runs. check decides from the job and this host's state whether the job goes
// on; a gate that takes something (a slot, a reservation) hands back its
// release in the verdict.
type gate struct {
	name  string
	check func(w *Worker, ctx context.Context, h *held) verdict
}

// gates is the ladder, in order. First what the job itself says (its id,
// its data, whether this host agreed to its scheduler), then what holds it
// back (pause windows, wait conditions, a provider's rate limit), then what
// it takes (the scope slot, then the container-start budget and the dollar
// windows), and last what needs the host's runtime and the
// job's secrets, resolved as late as possible. Nothing is spent before the
// budget gate, and a job stopped past it releases its reservation. The
// host-wide slot (PI_CONCURRENCY) is no rung: fetchLoop takes it before it
// fetches the job.
var gates = []gate{
	{"job-id", (*Worker).gateJobID},
	{"attempts", (*Worker).gateAttempts},
	{"job-data", (*Worker).gateJobData},
	{"job-signed", (*Worker).gateJobSigned},
	{"flow", (*Worker).gateFlow},
	{"forge", (*Worker).gateForge},
	{"image-allowed", (*Worker).gateImageAllowed},
	{"folder", (*Worker).gateFolder},
	{"cron", (*Worker).gateCron},
	{"pause-window", (*Worker).gatePauseWindow},
	{"secret-profile", (*Worker).gateSecretProfile},
	{"wait-profile", (*Worker).gateWaitProfiles},
	{"hold", (*Worker).gateHold},
	{"rate-limit", (*Worker).gateRateLimit},
	{"thread", (*Worker).gateThread},
	{"scope-slot", (*Worker).gateScopeSlot},
	{"predicted", (*Worker).gatePredicted},
	{"budget", (*Worker).gateBudget},
	{"dollars", (*Worker).gateDollars},
	{"image", (*Worker).gateImage},
	{"secrets", (*Worker).gateSecrets},
}

// climb walks ladder (gates) in order until one stops the job. It returns
// that gate's verdict (goOn when every gate let the job go on) without acting
// on it, and the release of everything the gates took, last taken first, for
// the caller to run when the job's handling ends (after its outcome is
// reported).
func (w *Worker) climb(ctx context.Context, h *held, ladder []gate) (stop verdict, release func(started bool)) {
	var taken []func(bool)
	release = func(started bool) {
		for i := len(taken) - 1; i >= 0; i-- {
			taken[i](started)
		}
	}
	for _, g := range ladder {
		h.gate = g.name
		v := g.check(w, ctx, h)
		if v.release != nil {
			taken = append(taken, v.release)
		}
		if v.act != actGoOn {
			return v, release
		}
	}
	return goOn, release
}

// gateJobID: a peer may write any id BullMQ allows; one that breaks the job
// id rule is refused before anything is spent: one record, failed, never run.
func (w *Worker) gateJobID(_ context.Context, h *held) verdict {
	if err := fleet.CheckJobID(h.job.ID); err != nil {
		h.log.Warn("job_id_invalid", "err", err)
		h.rec.JobID, h.rec.JobIDQuoted = jobs.RefusedJobID(h.job.ID)
		return failFinalFor(jobs.ReasonInvalidJob)
	}
	return goOn
}

// MaxAttempts is the most attempts a job may have; a queue entry naming more
// (a peer wrote it) is failed invalid-job.
const MaxAttempts = 1000

// gateAttempts fails, before anything is spent, a job already at or past its
// attempts: a peer may write any attemptsMade and attempts into a job hash,
// and a job the queue should have failed must not run once more. Counts a
// queue could not have written (negative, or attempts past MaxAttempts) fail
// it too.
func (w *Worker) gateAttempts(_ context.Context, h *held) verdict {
	made, allowed := h.job.AttemptsMade, max(h.job.Attempts, 1)
	if made < 0 || h.job.Attempts < 0 || h.job.Attempts > MaxAttempts || made >= allowed {
		h.log.Warn("job_attempts_spent", "attemptsMade", made, "attempts", h.job.Attempts)
		return failFinalFor(jobs.ReasonInvalidJob)
	}
	return goOn
}

// gateJobData refuses a job whose queue entry or data does not parse, and
// fills the record from the data of one that does.
func (w *Worker) gateJobData(_ context.Context, h *held) verdict {
	if h.job.Corrupt != "" || h.job.DeferredFailure != "" {
		return refuseFor(jobs.ReasonInvalidJob)
	}
	spec, err := jobs.ParseJob(h.job.Data)
	if err != nil {
		h.log.Warn("job_invalid", "err", err)
		return refuseFor(jobs.ReasonInvalidJob)
	}
	h.spec = spec
	h.rec.Kind = spec.Kind
	h.rec.Target = spec.Target()
	h.rec.Flow = spec.Flow
	if spec.Image != "" {
		h.rec.Image = spec.Image
	}
	return goOn
}

// gateJobSigned lets a job through when the fleet key signed it for this
// queue and id, or when its queue takes unsigned jobs (PI_UNSIGNED_QUEUES,
// the operator's explicit opt-in). A job scheduler's run is made inside
// Valkey, where no key is: it goes on to the cron gate, which runs it only
// when this host's own triggers file names exactly that run. Anything else
// is refused job-unsigned, a host without a key included: every other job
// names a folder or a repository, and a Valkey writer without the key must
// not have this host run one of its choosing.
func (w *Worker) gateJobSigned(_ context.Context, h *held) verdict {
	if h.job.SchedulerID != "" || h.spec.Kind == jobs.KindCron {
		return goOn
	}
	queue := h.q.Name()
	if fleet.UnsignedAllowed(w.cfg.UnsignedQueues, queue) {
		return goOn
	}
	key := w.cfg.FleetKey
	if !key.IsSet() {
		h.log.Warn("job_unsigned", "why", "this host holds no fleet key",
			"fix", "set PI_FLEET_KEY_FILE on every host (pi-dispatch init writes one), or PI_UNSIGNED_QUEUES="+queue+" to run jobs anyone who can write to Valkey can queue")
		return refuseFor(jobs.ReasonJobUnsigned)
	}
	if key.VerifyJob(queue, h.job.ID, h.job.Data, h.job.Signature) {
		return goOn
	}
	why := "bad signature"
	if h.job.Signature == "" {
		why = "no signature"
	}
	h.log.Warn("job_unsigned", "why", why)
	return refuseFor(jobs.ReasonJobUnsigned)
}

// gateFlow refuses a job whose flow this host does not know: a flow is the
// prompt the job is given, and a job never runs on a silent default. A
// command job names no flow.
func (w *Worker) gateFlow(_ context.Context, h *held) verdict {
	if h.spec.Flow == "" {
		return goOn
	}
	if _, ok := w.flows.Lookup(h.spec.Flow); !ok {
		h.log.Warn("job_flow_unknown", "flow", h.spec.Flow, "flows", strings.Join(w.flows.Names(), ","),
			"fix", "name one of the host's flows, or add "+h.spec.Flow+".md to PI_FLOWS_DIR")
		return refuseFor(jobs.ReasonInvalidJob)
	}
	return goOn
}

// gateForge refuses a forge job on a host that cannot clone and publish it
// (no forge credential, or none for the job's forge), before anything is
// spent: run without its repository, the job would report completed with no
// clone, no pull request and no word to the person who asked.
func (w *Worker) gateForge(_ context.Context, h *held) verdict {
	if h.spec.Forge == "" || h.spec.Repo == "" || h.spec.Folder != "" {
		return goOn
	}
	if w.deps.Workspaces == nil || !w.deps.Workspaces.Serves(h.spec.Forge) {
		h.log.Warn("job_forge_not_configured", "forge", h.spec.Forge,
			"fix", "give this host the forge's credential (docs/forges.md), or keep forge jobs off it")
		return refuseFor(jobs.ReasonNoForge)
	}
	if err := w.deps.Workspaces.Admit(h.spec); err != nil {
		h.log.Warn("job_forge_not_agreed", "forge", h.spec.Forge, "repo", h.spec.Repo, "trigger", h.spec.Trigger, "why", err.Error(),
			"fix", "a forge job runs only when this host's PI_TRIGGERS_FILE has its trigger for its forge and repository")
		return refuseFor(jobs.ReasonForgeNotAgreed)
	}
	if h.spec.Kind == jobs.KindForge {
		h.rec.Trigger = JobTrigger(h.spec, h.job.SchedulerID) // the entry of this host's triggers file that covers it
	}
	return goOn
}

// gateImageAllowed refuses a job whose data names an image this host did
// not allow (PI_JOB_IMAGE, PI_JOB_IMAGES): whoever writes job data must not
// choose what runs.
func (w *Worker) gateImageAllowed(_ context.Context, h *held) verdict {
	if !w.cfg.ImageAllowed(h.spec.Image) {
		h.log.Warn("job_image_not_allowed", "image", h.spec.Image, "fix", "add the image to PI_JOB_IMAGES to allow it")
		return refuseFor(jobs.ReasonImageNotAllowed)
	}
	return goOn
}

// gateFolder lets a folder job on only when its folder, every symlink
// resolved, is a directory inside PI_FOLDER_ROOTS, and not owned by root
// unless PI_CONTAINER_USER was set explicitly (under the owner rule it would
// run as root). The resolved path is what the container mounts, so a folder
// replaced by a symlink after this check is not followed.
func (w *Worker) gateFolder(_ context.Context, h *held) verdict {
	if h.spec.Folder == "" {
		return goOn
	}
	resolved, err := hostfolder.Resolve(h.spec.Folder, w.cfg.FolderRoots)
	if err != nil {
		h.log.Warn("job_folder_not_allowed", "err", err)
		return refuseFor(jobs.ReasonFolderNotAllowed)
	}
	if !w.cfg.ContainerUserExplicit {
		if uid, ok := hostfolder.UID(resolved); !ok || uid == 0 {
			h.log.Warn("job_folder_not_allowed", "err", "the folder is owned by root (or its owner cannot be read); set PI_CONTAINER_USER to run such a folder's jobs as a chosen user")
			return refuseFor(jobs.ReasonFolderNotAllowed)
		}
	}
	h.folder = resolved
	return goOn
}

// gateCron lets a job through unless a job scheduler made it (its queue
// entry names the scheduler, or its data says kind cron) and this host did
// not agree to it: then it is left for another host or refused.
func (w *Worker) gateCron(ctx context.Context, h *held) verdict {
	sid := h.job.SchedulerID
	if sid == "" {
		sid = h.spec.SchedulerID
	}
	if sid == "" && h.spec.Kind != jobs.KindCron {
		return goOn
	}
	v := CronVerdict{Reason: "no cron gate"}
	if w.deps.Cron != nil {
		v = w.deps.Cron.AdmitCron(ctx, h.q.Name(), sid, h.job.Data)
	}
	switch {
	case v.Run:
		h.rec.Trigger = JobTrigger(h.spec, h.job.SchedulerID) // the entry of this host's triggers file that made the run
		return goOn
	case v.Leave:
		w.log.Info("cron_run_left", "jobId", h.job.ID, "queue", h.q.Name(), "schedulerId", sid, "why", v.Reason)
		return deferFor(w.tune.BusyDeferral, jobs.ReasonCronNotAgreed)
	default:
		w.log.Warn("cron_run_refused", "jobId", h.job.ID, "queue", h.q.Name(), "schedulerId", sid, "why", v.Reason)
		return refuseFor(jobs.ReasonCronNotAgreed)
	}
}

// gatePauseWindow: a job a pause window matches waits for the window's end.
func (w *Worker) gatePauseWindow(_ context.Context, h *held) verdict {
	if until, ok := w.pauses.Match(h.spec.Scope(), w.tune.Now()); ok {
		if d := until.Sub(w.tune.Now()); d > time.Second {
			return deferFor(d, jobs.ReasonPauseWindow)
		}
	}
	return goOn
}

// gateSecretProfile refuses a job whose secrets profile this host does not
// declare, and notes the resolver of one it does.
func (w *Worker) gateSecretProfile(_ context.Context, h *held) verdict {
	if h.spec.SecretsProfile == "" {
		return goOn
	}
	p, ok := w.cfg.SecretProfiles[h.spec.SecretsProfile]
	if !ok {
		return refuseFor(jobs.ReasonSecretProfileUnknown)
	}
	h.resolver = p
	return goOn
}

// gateWaitProfiles refuses a job that waits on a profile this host does not
// declare.
func (w *Worker) gateWaitProfiles(_ context.Context, h *held) verdict {
	for _, name := range h.spec.WaitProfiles() {
		if _, ok := w.cfg.WaitProfiles[name]; !ok {
			return refuseFor(jobs.ReasonWaitProfileUnknown)
		}
	}
	return goOn
}

// gateThread lines a forge job up behind the older jobs of its issue or pull
// request, fleet-wide: one job of a thread runs at a time, oldest first, so
// two of them never race on the thread's branch. The job keeps the thread
// through a deferral or a retry; its final outcome frees it (threadDone).
// A line that cannot be read defers the job.
func (w *Worker) gateThread(ctx context.Context, h *held) verdict {
	thread := h.spec.Thread()
	if w.deps.Threads == nil || h.spec.Forge == "" || thread == "" {
		return goOn
	}
	at := h.job.EnqueuedAt
	if at.IsZero() {
		at = h.job.ProcessedOn
	}
	turn, err := w.deps.Threads.Turn(ctx, thread, h.job.ID, at, w.cfg.JobTimeout+10*time.Minute)
	if err != nil {
		h.log.Warn("thread_unreachable_deferred", "err", err)
		return deferFor(w.tune.UnreachableDeferral, jobs.ReasonThreadUnreachable)
	}
	if !turn.Granted {
		h.log.Info("thread_busy_deferred", "behind", turn.Behind)
		return deferFor(w.tune.BusyDeferral, jobs.ReasonThreadBusy)
	}
	h.thread = thread
	return goOn
}

// gateScopeSlot takes the job's scope slot: one job per local folder; a
// scope's concurrent limit, fleet-wide for forge scopes when this host
// declared a name. A busy scope defers the job.
func (w *Worker) gateScopeSlot(ctx context.Context, h *held) verdict {
	release, ok := w.takeScope(ctx, h)
	if !ok {
		return deferFor(w.tune.BusyDeferral, jobs.ReasonScopeBusy)
	}
	return verdict{act: actGoOn, release: func(bool) { release() }}
}

// gateBudget reserves the container start against the spend caps. A budget
// that cannot be read defers the job (money fails closed); a spent one
// refuses it. The reservation is released unless the container started.
func (w *Worker) gateBudget(ctx context.Context, h *held) verdict {
	var limit *ScopeLimit
	if l, ok := w.limits.Lookup(h.spec.Scope()); ok {
		limit = &l
	}
	res, err := w.deps.Budget.Reserve(ctx, h.spec.Scope(), limit)
	if errors.Is(err, ErrBudgetCorrupt) {
		h.log.Error("budget_corrupt", "err", err, "fix", "repair or delete the named budget key; no job starts while it holds a value no fleet wrote")
		return refuseFor(jobs.ReasonBudgetCorrupt)
	}
	if err != nil {
		h.log.Warn("budget_unreachable_deferred", "err", err)
		return deferFor(w.tune.UnreachableDeferral, jobs.ReasonBudgetUnreachable)
	}
	if !res.Granted {
		h.log.Info("budget_refused", "window", res.Window, "count", res.Count, "cap", res.Cap)
		return refuseFor(res.Reason())
	}
	return verdict{act: actGoOn, release: func(started bool) {
		if started {
			return
		}
		if err := w.deps.Budget.Release(context.WithoutCancel(ctx), res); err != nil {
			h.log.Warn("budget_release_failed", "err", err)
		}
	}}
}

// gateImage: the job's image must be present here; it is never pulled.
func (w *Worker) gateImage(ctx context.Context, h *held) verdict {
	present, err := w.deps.Runtime.ImagePresent(ctx, h.rec.Image)
	if err != nil {
		h.log.Warn("image_check_failed_deferred", "err", err)
		return deferFor(w.tune.UnreachableDeferral, jobs.ReasonDockerUnreachable)
	}
	if !present {
		return refuseFor(jobs.ReasonJobImageMissing)
	}
	return goOn
}

// gateSecrets resolves the job's secrets, as late as possible and never
// written anywhere; a resolver that fails refuses the job.
func (w *Worker) gateSecrets(ctx context.Context, h *held) verdict {
	if h.resolver == "" {
		return goOn
	}
	vals, err := w.deps.Secrets.Resolve(ctx, h.resolver, h.spec.SecretsProfile, w.cfg.SecretResolveTimeout)
	if err != nil {
		h.log.Warn("secret_resolve_failed", "profile", h.spec.SecretsProfile, "err", err)
		return refuseFor(jobs.ReasonSecretResolveFailed)
	}
	h.secrets = vals
	return goOn
}
