package stack

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/pidispatch/pidispatch/config"
	"github.com/pidispatch/pidispatch/cronsync"
	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/forge/token"
	"github.com/pidispatch/pidispatch/forge/workspace"
	"github.com/pidispatch/pidispatch/jobs"
)

// WithForgeWorkspaces gives forge jobs their repository: m clones it before
// the job and publishes the job's changes after it, on the host.
func WithForgeWorkspaces(m *workspace.Manager) Option {
	return func(d *dispatch.Deps) { d.Workspaces = workspaces{m} }
}

// ForgePolicies answers forge jobs' publish policies from the forge
// triggers of the host's own triggers file (each trigger's publish object),
// and follows the file as it changes. A job whose trigger the file does not
// have, or whose forge or repository that trigger does not cover, gets the
// safe default: no CI changes, a draft. It is a dispatch.Background: Run
// watches the file until its context ends.
type ForgePolicies struct {
	path, host string
	log        *slog.Logger
	set        atomic.Pointer[[]cronsync.ForgeTrigger]
}

var _ dispatch.Background = (*ForgePolicies)(nil)

// LoadForgePolicies reads the forge triggers of the triggers file at path.
// A file that does not parse is a *config.ConfigError naming
// PI_TRIGGERS_FILE, the file and every broken rule; a missing file is an
// empty set until it appears.
func LoadForgePolicies(path, host string, logger *slog.Logger) (*ForgePolicies, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	p := &ForgePolicies{path: path, host: host, log: logger}
	data, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		p.set.Store(&[]cronsync.ForgeTrigger{})
		return p, nil
	case err != nil:
		return nil, &config.ConfigError{Var: "PI_TRIGGERS_FILE", Value: path, Rule: err.Error()}
	}
	fts, err := cronsync.ParseForgeTriggers(data)
	if err != nil {
		return nil, &config.ConfigError{Var: "PI_TRIGGERS_FILE", Value: path,
			Rule: "invalid forge triggers: " + strings.ReplaceAll(err.Error(), "\n", "; ")}
	}
	p.set.Store(&fts)
	return p, nil
}

// Policy is job's publish policy (workspace.Config.Policy).
func (p *ForgePolicies) Policy(job jobs.Job) workspace.PublishPolicy {
	ft, ok := p.trigger(job)
	if !ok {
		return workspace.PublishPolicy{}
	}
	return workspace.PublishPolicy{AllowCI: ft.Publish.AllowCI, Ready: !ft.Publish.Draft, Labels: ft.Publish.Labels}
}

// Trigger is what job's trigger says in the host's own file: the trigger
// section of its event, with the operator's instructions, and a comment
// trigger's phrase (workspace.Config.Trigger). A job naming a trigger the
// file does not have, or one that does not cover its forge and repository,
// gets none: what the agent is told the operator asked is never the job
// data's word.
func (p *ForgePolicies) Trigger(job jobs.Job) workspace.TriggerInfo {
	ft, ok := p.trigger(job)
	if !ok {
		return workspace.TriggerInfo{}
	}
	return workspace.TriggerInfo{
		Event:  jobs.EventTrigger{Name: ft.Name, Type: ft.Type, Instructions: ft.Job.Instructions},
		Phrase: ft.Phrase,
	}
}

// errNoTriggersFile refuses every forge job of a host with forge
// credentials and no triggers file.
var errNoTriggersFile = errors.New("this host has no triggers file (PI_TRIGGERS_FILE) to check it against")

// Admit answers whether the host's own triggers file covers job: a
// trigger of that name for the job's forge and repository, whose event
// the job's fields agree with (a comment trigger's job names its comment,
// a label trigger's its label, one of the trigger's any or all, a pull_request
// trigger's a pull request, a numbered trigger's that number), and whose
// flow is the job's. Anything else is refused (workspace.Config.Admit).
func (p *ForgePolicies) Admit(job jobs.Job) error {
	ft, ok := p.trigger(job)
	switch {
	case !ok:
		return fmt.Errorf("trigger %q does not cover %s %s", jobs.ClipName(job.Trigger), job.Forge, jobs.ClipName(job.Repo))
	case ft.Job.Flow != "" && job.Flow != ft.Job.Flow:
		return fmt.Errorf("trigger %q runs flow %q, the job asks %q", ft.Name, ft.Job.Flow, jobs.ClipName(job.Flow))
	case ft.Number != 0 && job.Number != ft.Number:
		return fmt.Errorf("trigger %q is for #%d only", ft.Name, ft.Number)
	}
	switch ft.Type {
	case cronsync.TypeComment:
		if job.CommentID == 0 {
			return fmt.Errorf("comment trigger %q: the job names no comment", ft.Name)
		}
	case cronsync.TypeLabel:
		if job.Label == "" || (len(ft.Any) > 0 && !slices.Contains(ft.Any, job.Label) && !slices.Contains(ft.All, job.Label)) {
			return fmt.Errorf("label trigger %q: the job's label %q is not one of its labels", ft.Name, jobs.ClipName(job.Label))
		}
	case cronsync.TypePullRequest:
		if !job.PullRequest {
			return fmt.Errorf("pull_request trigger %q: the job is not about a pull request", ft.Name)
		}
	}
	return nil
}

// trigger finds job's trigger in the host's file, when it covers the job's
// forge and repository.
func (p *ForgePolicies) trigger(job jobs.Job) (cronsync.ForgeTrigger, bool) {
	for _, ft := range *p.set.Load() {
		if ft.Name != job.Trigger {
			continue
		}
		return ft, ft.Forge == job.Forge && slices.Contains(ft.Repos, job.Repo)
	}
	return cronsync.ForgeTrigger{}, false
}

// Forges lists the forges the file's forge triggers name, once each.
func (p *ForgePolicies) Forges() []jobs.Forge {
	var out []jobs.Forge
	for _, ft := range *p.set.Load() {
		if !slices.Contains(out, ft.Forge) {
			out = append(out, ft.Forge)
		}
	}
	return out
}

// CheckForgeCredentials refuses a host whose triggers file has forge
// triggers for a forge it holds no credential for (m nil: none at all): its
// jobs could only be refused no-forge. The error is a *config.ConfigError.
func CheckForgeCredentials(p *ForgePolicies, m *workspace.Manager) error {
	if p == nil {
		return nil
	}
	for _, f := range p.Forges() {
		if m == nil || !m.Serves(f) {
			return &config.ConfigError{Var: "PI_TRIGGERS_FILE", Value: p.path,
				Rule: fmt.Sprintf("has %s triggers but this host holds no %s credential: set it (docs/forges.md) or remove those triggers", f, f)}
		}
	}
	return nil
}

// CheckForgeGit refuses a host that holds forge credentials (m not nil)
// when its git is older than workspace.MinGitVersion, answers no version or
// cannot be run: an older git silently ignores the environment publish
// configures it with, the token header among it, so the worker stops at
// boot rather than at its first forge job. The error is CheckHostGit's.
func CheckForgeGit(ctx context.Context, m *workspace.Manager) error {
	if m == nil {
		return nil
	}
	_, err := CheckHostGit(ctx, m.GitProgram())
	return err
}

// CheckHostGit runs program ("": "git") --version and answers its version,
// or a *config.ConfigError naming the program, the version found, the one
// required and the fix, with the workspace's error (workspace.ErrGitTooOld,
// workspace.ErrGitVersionUnknown, or the failure to run it) under it.
func CheckHostGit(ctx context.Context, program string) (workspace.GitVersion, error) {
	if program == "" {
		program = "git"
	}
	v, err := workspace.ReadGitVersion(ctx, program)
	if err == nil {
		return v, nil
	}
	if p, lookErr := exec.LookPath(program); lookErr == nil {
		program = p
	}
	need := workspace.MinGitVersion
	fix := fmt.Sprintf("install git %s or later (first on PATH), or remove this host's forge credentials", need)
	var ge *workspace.GitVersionError
	var rule string
	switch {
	case errors.As(err, &ge) && errors.Is(err, workspace.ErrGitTooOld):
		rule = fmt.Sprintf("is git %s; forge jobs need git %s or later: %s", ge.Found, need, fix)
	case errors.As(err, &ge):
		rule = fmt.Sprintf("--version answered %q, not a git version; forge jobs need git %s or later: %s",
			strings.TrimSpace(ge.Said), need, fix)
	default:
		rule = fmt.Sprintf("could not be run (%v); forge jobs need git %s or later: %s", err, need, fix)
	}
	return v, &forgeGitError{ce: &config.ConfigError{Var: "git", Value: program, Rule: rule}, err: err}
}

// forgeGitError is CheckHostGit's refusal: a *config.ConfigError (a boot
// refused, exit 2) over the workspace's own error, which callers branch on.
type forgeGitError struct {
	ce  *config.ConfigError
	err error
}

func (e *forgeGitError) Error() string   { return e.ce.Error() }
func (e *forgeGitError) Unwrap() []error { return []error{e.ce, e.err} }

// Run follows the triggers file until ctx ends: a valid new content
// replaces the set, an invalid one keeps the last good set (logged
// triggers_reload_invalid).
func (p *ForgePolicies) Run(ctx context.Context) error {
	return cronsync.WatchForge(ctx, p.path, cronsync.ForgeWatchConfig{Logger: p.log, Host: p.host}, func(fts []cronsync.ForgeTrigger) {
		p.set.Store(&fts)
	})
}

// WithForgePolicies runs p's watch of the triggers file beside the worker.
func WithForgePolicies(p *ForgePolicies) Option {
	return func(d *dispatch.Deps) { d.Background = append(d.Background, p) }
}

// ForgeWorkspacesFromEnv builds the workspace manager from the environment
// (config.LoadPublish and config.LoadForgeCredentials, the parser the
// receiver uses too; PI_EVENT_MAX_COMMENTS). triggers answers each job's
// publish policy and its trigger's instructions and phrase from the host's
// own triggers file (nil: no CI changes, draft pull requests, no
// instructions). It returns nil, nil when no forge credential is configured.
func ForgeWorkspacesFromEnv(getenv func(string) string, host string, logger *slog.Logger, triggers *ForgePolicies) (*workspace.Manager, error) {
	limits, err := config.LoadPublish(getenv)
	if err != nil {
		return nil, err
	}
	cfg, err := config.Load(getenv)
	if err != nil {
		return nil, err
	}
	creds, err := config.LoadForgeCredentials(getenv)
	if err != nil {
		return nil, err
	}
	forges, err := ForgesFromCredentials(creds)
	if err != nil || len(forges) == 0 {
		return nil, err
	}
	wc := workspace.Config{
		Forges: forges, Host: host, Logger: logger, MaxComments: cfg.EventMaxComments,
		Limits: workspace.Limits{MaxFiles: limits.MaxFiles, MaxBytes: limits.MaxBytes},
	}
	if wc.MaxComments == 0 {
		wc.MaxComments = -1 // PI_EVENT_MAX_COMMENTS=0: none
	}
	if triggers != nil {
		wc.Policy, wc.Trigger, wc.Admit = triggers.Policy, triggers.Trigger, triggers.Admit
	} else {
		// Without the host's own triggers no forge job can be checked.
		wc.Admit = func(jobs.Job) error { return errNoTriggersFile }
	}
	return workspace.New(wc)
}

// ForgesFromCredentials makes each forge's minter and API from its
// credential, as the workers use them: a GitHub App's key is read (a
// *config.ConfigError when it cannot be). None configured: an empty map.
func ForgesFromCredentials(creds config.ForgeCredentials) (map[jobs.Forge]workspace.Forge, error) {
	forges := map[jobs.Forge]workspace.Forge{}
	if gh := creds.GitHub; gh != nil {
		api := &workspace.GitHub{APIURL: gh.APIURL}
		switch gh.Source {
		case config.GitHubAuthApp:
			key, err := gh.PrivateKey()
			if err != nil {
				return nil, err
			}
			forges[jobs.ForgeGitHub] = workspace.Forge{API: api, Minter: &token.GitHubApp{
				AppID: gh.AppID, InstallationID: gh.InstallationID, Key: key, APIURL: gh.APIURL,
			}}
		default:
			forges[jobs.ForgeGitHub] = workspace.Forge{API: api, Minter: token.Static{Token: token.New(gh.PAT.Reveal(), time.Time{})}}
		}
	}
	if fj := creds.Forgejo; fj != nil {
		forges[jobs.ForgeForgejo] = workspace.Forge{API: &workspace.Gitea{URL: fj.URL}, Minter: token.Static{Token: token.New(fj.Token.Reveal(), time.Time{})}}
	}
	if gl := creds.GitLab; gl != nil {
		// Each job's project token is a user of its own; status notes are
		// written with GITLAB_TOKEN's user, as the receiver writes them, so
		// one note serves the job from queued to its outcome.
		parent := token.New(gl.Token.Reveal(), time.Time{})
		forges[jobs.ForgeGitLab] = workspace.Forge{API: &workspace.GitLab{URL: gl.URL},
			Minter: &token.GitLabProject{URL: gl.URL, Parent: parent}, Status: token.Static{Token: parent}}
	}
	return forges, nil
}

// workspaces adapts a workspace.Manager to dispatch.Workspaces.
type workspaces struct{ m *workspace.Manager }

func (w workspaces) Serves(forge jobs.Forge) bool { return w.m.Serves(forge) }

func (w workspaces) Admit(job jobs.Job) error { return w.m.Admit(job) }

func (w workspaces) Prepare(ctx context.Context, jobID string, job jobs.Job, dir string) (dispatch.Workspace, error) {
	c, err := w.m.Prepare(ctx, workspace.Job{ID: jobID, Job: job}, dir)
	if err != nil {
		return nil, workspaceError(err)
	}
	return checkout{c}, nil
}

type checkout struct{ c *workspace.Checkout }

var _ dispatch.Workspace = checkout{}

func (c checkout) Event() *jobs.Event { return c.c.Event() }

func (c checkout) Publish(ctx context.Context, res dispatch.WorkspaceResult) (dispatch.WorkspacePublished, error) {
	pub, err := c.c.Publish(ctx, workspace.Result{Outcome: res.Outcome, Reason: res.Reason, Turns: res.Turns, Dollars: res.Dollars,
		PullRequest: res.PullRequest, Outputs: res.Outputs, Refused: res.Refused, NoChanges: res.NoChanges})
	out := dispatch.WorkspacePublished{PullRequestURL: pub.PullRequestURL, PushedCommit: pub.PushedCommit, BaseCommit: pub.BaseCommit,
		Outputs: pub.Outputs}
	if err != nil {
		return out, workspaceError(err)
	}
	return out, nil
}

func (c checkout) Close() error { return c.c.Close() }

// workspaceError maps the workspace's errors to the record's outcomes.
func workspaceError(err error) error {
	var refusal *workspace.RefusalError
	switch {
	case errors.As(err, &refusal):
		return &dispatch.WorkspaceError{Outcome: jobs.OutcomePolicy, Reason: refusal.Reason, Err: err}
	case errors.Is(err, token.ErrNoRepository):
		return &dispatch.WorkspaceError{Outcome: jobs.OutcomeFailed, Reason: jobs.ReasonRepoGone, Err: err}
	case errors.Is(err, token.ErrRefused):
		return &dispatch.WorkspaceError{Outcome: jobs.OutcomeFailed, Reason: jobs.ReasonForgeAuth, Err: err}
	case errors.Is(err, workspace.ErrNotForge):
		return &dispatch.WorkspaceError{Outcome: jobs.OutcomeFailed, Reason: jobs.ReasonInvalidJob, Err: err}
	case errors.Is(err, token.ErrRejected):
		// The same request would be rejected again: a retry spends for nothing.
		return &dispatch.WorkspaceError{Outcome: jobs.OutcomeFailed, Reason: jobs.ReasonForgeRejected, Err: err}
	}
	return &dispatch.WorkspaceError{Outcome: jobs.OutcomeFailed, Reason: jobs.ReasonForgeUnavailable, Retry: true, Err: fmt.Errorf("forge: %w", err)}
}

func (w workspaces) Status(ctx context.Context, jobID string, job jobs.Job, s dispatch.JobStatus) (string, error) {
	return w.m.Status(ctx, workspace.Job{ID: jobID, Job: job}, workspace.Status{
		State: s.State, Reason: s.Reason, Attempt: s.Attempt, Attempts: s.Attempts, Until: s.Until,
		PullRequestURL: s.PullRequestURL, Turns: s.Turns, Dollars: s.Dollars, Outputs: s.Outputs,
	})
}
