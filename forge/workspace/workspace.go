// Package workspace gives a forge job its repository and publishes what the
// job changed, on the host: the job itself never holds a forge credential.
//
// Prepare clones the commit the job continues from (its thread's branch
// where an earlier job pushed it, the head of the project's own pull
// request, another pull request's head, else the default branch), shallow,
// into the job's workspace folder, with the credential handed to git
// as an HTTP header through its environment and nothing left in .git/config.
// A host-only copy of the same commit stays outside the workspace. With the
// same token it then reads what the job was asked (Checkout.Event): the
// issue or pull request, the triggering comment, review or label, the last
// comments of the thread and each person's permission, every text clipped,
// the trigger's own section from the host's configuration (Config.Trigger).
//
// Publish reads the workspace after the job as untrusted data: the job's
// history must descend from the commit it was given; the files it left
// (committed or not) become ONE commit the host makes on that base; the
// changes are checked against the host's PublishPolicy (CI configuration,
// submodules, symbolic links leaving the repository, files and bytes changed);
// the commit is pushed, fast-forward only, to the thread's branch
// (pi/issue-<n>, pi/pr-<n>) or the project's own pull request's head branch,
// never the default or a protected branch, nor the branch of a pull request
// the project did not open; and a pull (merge) request, a draft by default,
// is opened unless one from that branch is already open, so the thread's
// jobs and a retry share one. A flow that changes no code (Result.NoChanges)
// publishes no change. Then the job's outputs (comment.md, review.json,
// labels.json) are validated by forge/output in the job's context and
// posted with the job's token, each on its own. What became of the job is
// said in its one status comment (Manager.Status), edited in place. A job
// no trigger of the host covers (Config.Admit) is refused before any token
// is minted, and every token a job got is revoked when it ends, whichever
// way it ends (Checkout.Close).
package workspace

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/pidispatch/pidispatch/forge"
	"github.com/pidispatch/pidispatch/forge/token"
	"github.com/pidispatch/pidispatch/jobs"
)

// Defaults of Limits.
const (
	MaxFilesDefault = 200
	MaxBytesDefault = 5 << 20
)

// Limits bound what one publish may change.
type Limits struct {
	// MaxFiles is the most files added, changed or removed; 0: MaxFilesDefault.
	MaxFiles int
	// MaxBytes is the most bytes of added or changed file contents; 0: MaxBytesDefault.
	MaxBytes int64
}

// PublishPolicy is what the host allows the jobs of one trigger to publish.
// It comes from the host's own trigger configuration, looked up by the job's
// trigger name, never from the job.
type PublishPolicy struct {
	// AllowCI lets the changes touch CI configuration (.github/workflows,
	// .gitlab-ci.yml, .forgejo/workflows, .gitea/workflows).
	AllowCI bool
	// Ready opens the pull request ready for review instead of as a draft.
	Ready bool
	// Labels are the labels the job's labels.json may add or remove (the
	// trigger's publish.labels); none: every label change is refused.
	Labels []string
}

// Forge is what the host uses for one kind of forge: its minter and its API.
type Forge struct {
	Minter token.Minter
	API    API
	// Status, when set, mints the token every status comment is written
	// with, instead of the job's own token: an identity that outlives a
	// job, so the receiver's queued comment, a later attempt and another
	// host all find the one comment by its author and may edit it. GitLab
	// needs it: each job's project token is a bot user of its own, which
	// may not edit a note another user wrote. Unset on GitLab with a
	// *token.GitLabProject minter, New sets it to that minter's Parent.
	Status token.Minter
}

// Config configures a Manager.
type Config struct {
	// Forges by kind; a job of a kind not here is refused by Prepare.
	Forges map[jobs.Forge]Forge
	// Policy answers the publish policy of a job from the host's own
	// configuration of its trigger (job.Trigger, checked against the job's
	// forge and repository: a job naming a trigger that does not cover it
	// gets the zero policy); nil: the zero policy (no CI changes, drafts).
	Policy func(job jobs.Job) PublishPolicy
	Limits Limits
	// StateDir holds the host-only copies (never mounted in a container);
	// "": os.TempDir()/pidispatch-forge.
	StateDir string
	// Git is the git program; "": "git".
	Git string
	// Host names this worker in logs and in the commit's committer.
	Host string
	// Logger; nil: slog.Default().
	Logger *slog.Logger
	// Now is the clock; nil: time.Now.
	Now func() time.Time
	// Retries is how many times a forge call answered 5xx, 429 or nothing is
	// tried again; 0: 3. Backoff is the first wait, doubled each time; 0: 1s.
	// A wait the forge asks for (Retry-After, a rate limit's reset) is
	// honoured when it is longer, up to MaxRetryWait (0: 2 minutes); past
	// it the call fails at once (forge-unavailable: the job is retried).
	Retries      int
	Backoff      time.Duration
	MaxRetryWait time.Duration
	// Trigger answers, from the host's own trigger configuration (looked up
	// by job.Trigger and checked against the job's forge and repository, as
	// Policy is), the trigger section of the job's event and a comment
	// trigger's phrase, which is taken out of the triggering comment. Never
	// from the job's data: what the agent is told its trigger asked is the
	// operator's word. nil: an empty trigger section and no phrase.
	Trigger func(job jobs.Job) TriggerInfo
	// Admit answers whether the host's own trigger configuration covers the
	// job (its trigger, forge, repository, event and flow): an error says
	// why not, and the job is refused before any token is minted, so
	// whoever can write job data cannot have the host clone, push or
	// comment where no trigger of the operator's says. nil: every job is
	// admitted (a caller that vouches for its jobs itself).
	Admit func(job jobs.Job) error
	// MaxComments is how many of the thread's last comments a job's event
	// holds (the older ones are counted, not shown); 0:
	// jobs.DefaultEventComments, negative: none, at most jobs.MaxEventComments.
	MaxComments int
}

// Manager prepares and publishes forge jobs' workspaces.
type Manager struct {
	cfg    Config
	log    *slog.Logger
	status statuses
	liveMu sync.Mutex
	live   map[string]*Checkout // the prepared, unpublished checkouts by job id
}

// New makes a Manager.
func New(cfg Config) (*Manager, error) {
	if len(cfg.Forges) == 0 {
		return nil, errors.New("forge workspace: no forge configured")
	}
	forges := make(map[jobs.Forge]Forge, len(cfg.Forges))
	for kind, f := range cfg.Forges {
		if f.Minter == nil || f.API == nil {
			return nil, fmt.Errorf("forge workspace: %s needs a minter and an API", kind)
		}
		if gp, ok := f.Minter.(*token.GitLabProject); ok && kind == jobs.ForgeGitLab && f.Status == nil {
			f.Status = token.Static{Token: gp.Parent}
		}
		forges[kind] = f
	}
	cfg.Forges = forges // the caller's map is not written to
	if cfg.Git == "" {
		cfg.Git = "git"
	}
	if cfg.StateDir == "" {
		cfg.StateDir = filepath.Join(os.TempDir(), "pidispatch-forge")
	}
	if cfg.Limits.MaxFiles <= 0 {
		cfg.Limits.MaxFiles = MaxFilesDefault
	}
	if cfg.Limits.MaxBytes <= 0 {
		cfg.Limits.MaxBytes = MaxBytesDefault
	}
	if cfg.Retries <= 0 {
		cfg.Retries = 3
	}
	if cfg.Backoff <= 0 {
		cfg.Backoff = time.Second
	}
	if cfg.MaxRetryWait <= 0 {
		cfg.MaxRetryWait = 2 * time.Minute
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Host == "" {
		cfg.Host = "pidispatch"
	}
	switch {
	case cfg.MaxComments == 0:
		cfg.MaxComments = jobs.DefaultEventComments
	case cfg.MaxComments < 0:
		cfg.MaxComments = 0
	}
	cfg.MaxComments = min(cfg.MaxComments, jobs.MaxEventComments)
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
		return nil, fmt.Errorf("forge workspace state dir: %w", err)
	}
	return &Manager{cfg: cfg, log: log.With("host", cfg.Host), live: map[string]*Checkout{}}, nil
}

// Job is what Prepare needs of a job.
type Job struct {
	ID  string
	Job jobs.Job
}

// RefusalError is a publish the host refused; Reason is a jobs.Reason*.
type RefusalError struct {
	Reason jobs.Reason
	// Path is the first path that broke the rule, when one did.
	Path string
}

func (e *RefusalError) Error() string {
	if e.Path != "" {
		return fmt.Sprintf("publish refused: %s (%s)", e.Reason, e.Path)
	}
	return "publish refused: " + string(e.Reason)
}

// ErrNotForge: the job is not a forge job (no forge or no repository).
var ErrNotForge = errors.New("not a forge job")

// ErrNotAgreed: no trigger of the host's own configuration covers the job
// (Config.Admit).
var ErrNotAgreed = errors.New("no trigger of this host covers the forge job")

// ErrRepoIDMismatch: the forge answers the job's repository name with
// another repository id than the delivery named. The repository was renamed
// or transferred and another took its name (repo-jacking): the job is not
// for that one. It comes wrapped with token.ErrNoRepository, so the job
// ends repo-gone, final, without a clone.
var ErrRepoIDMismatch = errors.New("the repository under the job's name is not the one the delivery named")

// Admit reports whether the host's own trigger configuration covers job
// (Config.Admit); the error wraps ErrNotAgreed and says why.
func (m *Manager) Admit(job jobs.Job) error {
	if m.cfg.Admit == nil {
		return nil
	}
	if err := m.cfg.Admit(job); err != nil {
		return fmt.Errorf("%w: %w", ErrNotAgreed, err)
	}
	return nil
}

// Checkout is one job's prepared workspace. Publish it after the job ran,
// then Close it.
type Checkout struct {
	m        *Manager
	job      Job
	forge    Forge
	dir      string // the workspace
	state    string // the host-only repository
	repo     Repository
	base     string      // the commit the workspace was cloned at
	baseRef  string      // the branch a pull request targets
	branch   string      // the branch the workspace has checked out
	pull     PullHead    // a pull request job's head, as the forge answered it
	target   string      // the branch the job's changes are pushed to ("": none may be)
	own      bool        // the job is on a pull request the project opened: target is its head
	resumed  bool        // the workspace is the thread's branch as an earlier job left it
	fresh    footprint   // the workspace as the host made it, before the job
	event    *jobs.Event // what the job was asked, read at Prepare
	log      *slog.Logger
	tokMu    sync.Mutex
	tok      token.Token
	minted   []token.Token // revoked after publishing, when the minter can
	closeOne sync.Once
}

// Base is the commit the workspace was cloned at.
func (c *Checkout) Base() string { return c.base }

// Branch is the branch the job's changes are published to: the thread's
// branch (ThreadBranch), or the head branch of the project's own pull
// request the job is on; "" when the job's changes may go nowhere (a pull
// request from a fork).
func (c *Checkout) Branch() string { return c.target }

// ThreadBranch is the branch the jobs of one thread publish to, one after
// the other: pi/issue-<n> for issue n, pi/pr-<n> for pull (merge) request n
// (GitLab numbers merge requests apart from issues), pi/<job id> for a job
// about neither.
func ThreadBranch(j Job) string {
	switch {
	case j.Job.Number > 0 && j.Job.PullRequest:
		return fmt.Sprintf("pi/pr-%d", j.Job.Number)
	case j.Job.Number > 0:
		return fmt.Sprintf("pi/issue-%d", j.Job.Number)
	}
	return "pi/" + jobs.SanitizeJobID(j.ID)
}

// ownBranchPrefix is the prefix of every branch the project publishes to.
const ownBranchPrefix = forge.OwnBranchPrefix

// Close revokes the job's tokens (on a context of its own: a worker
// stopping mid-job must not leave a token valid for its hour, or a GitLab
// project token for days) and removes the host-only copy. Every path ends
// here: a failed preparation, a publish, a cancelled or stopped job.
func (c *Checkout) Close() error {
	var err error
	c.closeOne.Do(func() {
		c.m.liveMu.Lock()
		if c.m.live[c.job.ID] == c {
			delete(c.m.live, c.job.ID)
		}
		c.m.liveMu.Unlock()
		c.revokeDetached(context.Background())
		err = os.RemoveAll(c.state)
	})
	return err
}

// Prepare clones the job's repository into dir (an empty folder), reads the
// job's event from the forge (Checkout.Event), posts the start comment, and
// returns the checkout to publish after the job. A job whose event cannot be
// read does not run: the error is the forge's (token.ErrUnavailable is worth
// a retry; token.ErrNoRepository, the issue or pull request gone, is not).
func (m *Manager) Prepare(ctx context.Context, job Job, dir string) (*Checkout, error) {
	f, ok := m.cfg.Forges[job.Job.Forge]
	if !ok || job.Job.Repo == "" {
		return nil, fmt.Errorf("%w: forge %q", ErrNotForge, job.Job.Forge)
	}
	if err := m.Admit(job.Job); err != nil {
		return nil, err // before any token is minted
	}
	state, err := os.MkdirTemp(m.cfg.StateDir, jobs.SanitizeJobID(job.ID)+"-")
	if err != nil {
		return nil, err
	}
	c := &Checkout{m: m, job: job, forge: f, dir: dir, state: state,
		log: m.log.With("jobId", job.ID, "repo", job.Job.Repo, "forge", string(job.Job.Forge))}
	if err := c.prepare(ctx); err != nil {
		_ = c.Close()
		return nil, err
	}
	m.liveMu.Lock()
	m.live[job.ID] = c
	m.liveMu.Unlock()
	return c, nil
}

// liveCheckout answers the job's prepared, unpublished checkout, if any.
func (m *Manager) liveCheckout(jobID string) *Checkout {
	m.liveMu.Lock()
	defer m.liveMu.Unlock()
	return m.live[jobID]
}

func (c *Checkout) prepare(ctx context.Context) error {
	if err := c.lookupRepository(ctx); err != nil {
		return err
	}
	ref, err := c.checkoutRef(ctx)
	if err != nil {
		return err
	}
	if err := c.fetchBase(ctx, ref); err != nil {
		return err
	}
	if err := c.initWorkspace(ctx); err != nil {
		return err
	}
	if c.fresh, err = measureFresh(c.dir); err != nil {
		return err
	}
	if err := c.buildEvent(ctx); err != nil {
		return err
	}
	c.log.Info("forge_workspace_prepared", "base", c.base, "branch", c.branch)
	return nil
}

// lookupRepository asks the forge for the repository's id, clone URL and
// default branch. A job that names the repository's id (RepoID, from the
// delivery) runs only on the repository with that id: a name can be taken by
// another repository between the delivery and the run, and the job's token,
// clone, push and comments would go to it. The clone URL is the forge's
// word, and git sends the job's token to it: one that is not https (http
// only on a forge configured on http), not on the forge's configured host
// and port, or carries credentials (they would end in the workspace's
// .git/config) is refused before any clone.
func (c *Checkout) lookupRepository(ctx context.Context) error {
	var repo Repository
	if err := c.call(ctx, func(tok token.Token) (err error) {
		repo, err = c.forge.API.Repository(ctx, tok, c.job.Job.Repo)
		return err
	}); err != nil {
		return fmt.Errorf("repository: %w", err)
	}
	if want := c.job.Job.RepoID; want != 0 && repo.ID != want {
		c.log.Warn("forge_repo_id_mismatch", "jobRepoId", want, "forgeRepoId", repo.ID)
		return fmt.Errorf("repository: %w: %w: the forge answers %s with id %d, the delivery named id %d (renamed or transferred, and the name taken again); nothing was cloned",
			ErrRepoIDMismatch, token.ErrNoRepository, c.job.Job.Repo, repo.ID, want)
	}
	if err := forge.CheckCloneURL(repo.CloneURL, c.forge.API.ForgeURL()); err != nil {
		c.log.Warn("forge_clone_url_refused", "forgeUrl", c.forge.API.ForgeURL(), "error", err)
		return fmt.Errorf("repository: the forge answered a clone URL the host refuses: %w (the forge URL configured is %s)",
			err, c.forge.API.ForgeURL())
	}
	if repo.DefaultBranch == "" {
		return fmt.Errorf("repository: the forge answered no default branch")
	}
	c.repo = repo
	return nil
}

// checkoutRef sets the branches and returns the ref to clone:
//   - the project's own pull request: its head branch, which the job's
//     changes are pushed to;
//   - another pull request: its head (from the same repository, the job's
//     changes are proposed onto its branch from pi/pr-<n>; from a fork,
//     nowhere);
//   - an issue: the default branch, the job's changes going to pi/issue-<n>.
//
// Where the thread's branch already exists (an earlier job of the thread
// pushed it), the workspace is that branch as it is, so the job continues
// it and its commit is a fast-forward.
func (c *Checkout) checkoutRef(ctx context.Context) (string, error) {
	j := c.job.Job
	c.branch, c.baseRef = c.repo.DefaultBranch, c.repo.DefaultBranch
	c.target = ThreadBranch(c.job)
	ref := "refs/heads/" + c.repo.DefaultBranch
	if j.PullRequest {
		var head PullHead
		if err := c.call(ctx, func(tok token.Token) (err error) {
			head, err = c.forge.API.PullRequest(ctx, tok, j.Repo, j.Number)
			return err
		}); err != nil {
			return "", fmt.Errorf("pull request: %w", err)
		}
		c.pull = head
		own, err := c.ownPull(ctx, head)
		if err != nil {
			return "", fmt.Errorf("pull request author: %w", err)
		}
		switch {
		case own:
			c.own, c.target, c.branch, c.baseRef = true, head.Branch, head.Branch, head.Base
			return "refs/heads/" + head.Branch, nil
		case head.Branch == "":
			// A fork's branch is not ours to push to nor to propose onto.
			c.target, c.branch, c.baseRef = "", fmt.Sprintf("pr-%d", j.Number), head.Base
			return head.Ref, nil
		}
		c.branch, c.baseRef, ref = head.Branch, head.Branch, head.Ref
	}
	if j.Number > 0 {
		exists, err := c.remoteBranch(ctx, c.target)
		if err != nil {
			return "", fmt.Errorf("thread branch: %w", err)
		}
		if exists {
			c.resumed, c.branch = true, c.target
			return "refs/heads/" + c.target, nil
		}
	}
	return ref, nil
}

// ownPull reports whether head is a pull request this project opened: its
// head branch lives in the repository and is named pi/..., and it was
// opened by the host's own identity. On GitLab each job's project token is
// a bot user of its own, so there it is a bot user of the project whose
// merge request carries the host's footer.
func (c *Checkout) ownPull(ctx context.Context, head PullHead) (bool, error) {
	if head.Branch == "" || !strings.HasPrefix(head.Branch, ownBranchPrefix) {
		return false, nil
	}
	if c.job.Job.Forge == jobs.ForgeGitLab {
		return head.AuthorBot && strings.Contains(head.Body, footerMarker), nil
	}
	var self Person
	if err := c.call(ctx, func(tok token.Token) (err error) {
		self, err = c.forge.API.Self(ctx, c.forge.Minter, tok)
		return err
	}); err != nil {
		return false, err
	}
	if self.ID != 0 && head.Author.ID != 0 {
		return self.ID == head.Author.ID, nil
	}
	return self.Login != "" && strings.EqualFold(self.Login, head.Author.Login), nil
}

// remoteBranch reports whether branch exists on the forge (git ls-remote
// with the job's token).
func (c *Checkout) remoteBranch(ctx context.Context, branch string) (bool, error) {
	var out string
	err := c.call(ctx, func(tok token.Token) (err error) {
		out, err = c.m.git(c.state).auth(c.repo.CloneURL, c.forge.API.GitUser(), tok).
			run(ctx, "ls-remote", "--heads", c.repo.CloneURL, "refs/heads/"+branch)
		return err
	})
	return strings.TrimSpace(out) != "", err
}

// fetchBase fetches ref into the host-only repository, the one git that holds the token, and pins its commit.
func (c *Checkout) fetchBase(ctx context.Context, ref string) error {
	if _, err := c.m.git(c.state).run(ctx, "init", "--quiet", "--bare", "."); err != nil {
		return err
	}
	tok, err := c.token(ctx)
	if err != nil {
		return err
	}
	if _, err := c.m.git(c.state).auth(c.repo.CloneURL, c.forge.API.GitUser(), tok).
		run(ctx, "fetch", "--quiet", "--no-tags", "--depth=1", c.repo.CloneURL, "+"+ref+":refs/pi/base"); err != nil {
		return err
	}
	base, err := c.m.git(c.state).run(ctx, "rev-parse", "--verify", "refs/pi/base^{commit}")
	if err != nil {
		return err
	}
	c.base = strings.TrimSpace(base)
	return nil
}

// initWorkspace clones the host-only copy into the workspace: the job gets the commit, never the token.
func (c *Checkout) initWorkspace(ctx context.Context) error {
	// The workspace: its own repository, from the host-only copy, whose
	// origin is the forge's public URL (no credential anywhere in it).
	w := c.m.git(c.dir).with("protocol.file.allow", "always")
	for _, args := range [][]string{
		{"init", "--quiet", "-b", c.branch, "."},
		{"fetch", "--quiet", "--no-tags", "--depth=1", "file://" + c.state, "refs/pi/base:refs/remotes/origin/" + c.branch},
		{"reset", "--quiet", "--hard", c.base},
		{"remote", "add", "origin", c.repo.CloneURL},
	} {
		if _, err := w.run(ctx, args...); err != nil {
			return err
		}
	}
	return nil
}

// token returns the job's token, minting a new one when there is none or it
// expires within two minutes.
func (c *Checkout) token(ctx context.Context) (token.Token, error) {
	c.tokMu.Lock()
	defer c.tokMu.Unlock()
	if c.tok.Valid(c.m.cfg.Now(), 2*time.Minute) {
		return c.tok, nil
	}
	tok, err := c.forge.Minter.Mint(ctx, c.job.Job.Repo)
	if err != nil {
		return token.Token{}, fmt.Errorf("mint: %w", err)
	}
	c.tok = tok
	c.minted = append(c.minted, tok)
	return tok, nil
}

// revoke revokes the tokens minted for the job, when the minter can: a
// failure is logged, the token then lives out its expiry.
func (c *Checkout) revoke(ctx context.Context) {
	r, ok := c.forge.Minter.(token.Revoker)
	c.tokMu.Lock()
	minted := c.minted
	c.minted, c.tok = nil, token.Token{}
	c.tokMu.Unlock()
	if !ok {
		return
	}
	for _, tok := range minted {
		if err := r.Revoke(ctx, c.job.Job.Repo, tok); err != nil {
			c.log.Warn("forge_token_revoke_failed", "err", err)
		}
	}
}

// revokeTimeout bounds the revocation of a job's tokens, which runs even
// when the job's context ended.
const revokeTimeout = 30 * time.Second

// revokeDetached revokes the job's tokens even when ctx ended.
func (c *Checkout) revokeDetached(ctx context.Context) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), revokeTimeout)
	defer cancel()
	c.revoke(ctx)
}

// dropToken forgets a token the forge refused, so the next call mints anew.
func (c *Checkout) dropToken(tok token.Token) {
	c.tokMu.Lock()
	defer c.tokMu.Unlock()
	if c.tok.Reveal() == tok.Reveal() {
		c.tok = token.Token{}
	}
}

// call runs op with the job's token: a refused token is minted again once,
// and an unavailable forge is retried with backoff.
func (c *Checkout) call(ctx context.Context, op func(token.Token) error) error {
	reminted := false
	wait := c.m.cfg.Backoff
	for attempt := 0; ; attempt++ {
		tok, err := c.token(ctx)
		if err == nil {
			err = op(tok)
		}
		switch {
		case err == nil:
			return nil
		case errors.Is(err, token.ErrRefused) && !reminted:
			reminted = true
			c.dropToken(tok)
			c.log.Warn("forge_token_refused", "attempt", attempt+1)
			continue
		case errors.Is(err, token.ErrUnavailable) && attempt < c.m.cfg.Retries:
			asked, ok := token.RetryAfter(err)
			if ok && asked > c.m.cfg.MaxRetryWait {
				// Longer than a job should hold its slot: the job is retried later.
				c.log.Warn("forge_unavailable", "attempt", attempt+1, "retryAfter", asked, "err", err)
				return err
			}
			pause := max(wait, asked)
			c.log.Warn("forge_unavailable", "attempt", attempt+1, "wait", pause)
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(pause):
			}
			wait *= 2
			continue
		}
		return err
	}
}
