package workspace

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/pidispatch/pidispatch/forge/output"
	"github.com/pidispatch/pidispatch/forge/token"
	"github.com/pidispatch/pidispatch/jobs"
)

// Result is how the job ended, for the host's final comment and the pull
// request, and what it wrote for the host to post.
type Result struct {
	// Outcome and Reason are the record's (jobs.Outcome*, jobs.Reason*).
	Outcome string
	Reason  jobs.Reason
	// Turns and Dollars are the run's, when known (0: unknown).
	Turns   int
	Dollars float64
	// PullRequest is the title and body the job wrote for its pull request,
	// already validated by the worker; nil: the pull request is titled from
	// the job's issue. Its body is sanitised for the forge before it is sent.
	PullRequest *PullRequestText
	// Outputs are the other files the job wrote to /job/out (comment.md,
	// review.json, labels.json) by name, read safely and bounded by the
	// worker, not yet validated: each is validated with forge/output in
	// this job's context and posted, or refused whole.
	Outputs map[string][]byte
	// Refused are the outputs the worker already refused, with the reason;
	// they are recorded as they are.
	Refused []jobs.OutputResult
	// NoChanges marks a flow that must not change code (answer, plan): no
	// commit, push or pull request is made even if the workspace changed;
	// only the outputs are posted.
	NoChanges bool
}

// PullRequestText is a pull request's title and body as the job wrote them
// (jobs.ParsePullRequestText validated them).
type PullRequestText = jobs.PullRequestText

// Published is what a publish did.
type Published struct {
	// PullRequestURL is the pull request's URL ("" when nothing changed).
	PullRequestURL string
	// PushedCommit is the commit pushed to Branch ("" when nothing changed).
	PushedCommit string
	// BaseCommit is the commit the workspace was cloned at.
	BaseCommit string
	Branch     string
	// Outputs says what became of each output the job wrote: the worker's
	// refusals (Result.Refused) first, then comment.md, review.json and
	// labels.json, each posted or refused with its reason.
	Outputs []jobs.OutputResult
}

// CIPaths are the paths, from the repository's root, of CI and automation
// configuration: a file there runs with the repository's secrets, or
// decides who reviews. A name ending in / is a folder and all it holds.
var CIPaths = []string{
	".github/", ".gitlab-ci.yml", ".gitlab/", ".forgejo/", ".gitea/",
	".circleci/", ".travis.yml", "azure-pipelines.yml", "azure-pipelines.yaml", ".azure-pipelines/",
	".buildkite/", ".woodpecker.yml", ".woodpecker.yaml", ".woodpecker/", ".drone.yml", ".drone.yaml",
	"bitbucket-pipelines.yml", ".pipelines/", "appveyor.yml", ".appveyor.yml", "cloudbuild.yaml", "cloudbuild.yml",
	"codefresh.yml", ".semaphore/", "buildspec.yml", ".teamcity/",
}

// CIFileNames are file names that are CI or automation configuration in
// any folder: a Jenkins pipeline, a GitHub Action's metadata (an action is
// run from any path), code owners.
var CIFileNames = []string{"jenkinsfile", "action.yml", "action.yaml", "codeowners"}

// IsCIPath reports whether p (slash-separated, relative) is CI or
// automation configuration (CIPaths, CIFileNames), compared without case: a
// forge on a case-insensitive file system reads .GitHub as .github.
func IsCIPath(p string) bool {
	lp := strings.ToLower(strings.TrimPrefix(p, "./"))
	for _, c := range CIPaths {
		if lp == strings.TrimSuffix(c, "/") || (strings.HasSuffix(c, "/") && strings.HasPrefix(lp, c)) {
			return true
		}
	}
	base := path.Base(lp)
	return slices.Contains(CIFileNames, base) || strings.HasPrefix(base, "jenkinsfile.")
}

// Publish finishes the job on the forge. A completed job's changes are
// checked, committed, pushed (fast-forward only) and proposed, unless its
// flow may change nothing (Result.NoChanges); then its outputs are
// validated and posted, each on its own. Any other outcome posts nothing.
// A *RefusalError means the host refused the changes (a policy outcome);
// the outputs are then not posted either. What became of the job is said
// in its status comment (Manager.Status), not here.
//
// The job's tokens are revoked once it is done, where the forge allows it,
// even when ctx ended.
func (c *Checkout) Publish(ctx context.Context, res Result) (Published, error) {
	defer c.revokeDetached(ctx)
	pub := Published{BaseCommit: c.base, Branch: c.Branch()}
	if res.Outcome != jobs.OutcomeCompleted {
		pub.Outputs = unposted(res, "the job did not complete ("+string(res.Reason)+")")
		return pub, nil
	}
	pub, err := c.publish(ctx, pub, res)
	var refusal *RefusalError
	switch {
	case errors.As(err, &refusal):
		c.log.Warn("forge_publish_refused", "reason", refusal.Reason, "path", refusal.Path)
		pub.Outputs = unposted(res, "the job's changes were refused ("+string(refusal.Reason)+")")
	case err != nil:
		c.log.Error("forge_publish_failed", "err", err)
		pub.Outputs = unposted(res, "the job's changes could not be published")
	default:
		pub.Outputs = c.postOutputs(ctx, res, pub)
		c.log.Info("forge_published", "branch", pub.Branch, "commit", pub.PushedCommit, "pullRequest", pub.PullRequestURL)
	}
	return pub, err
}

func (c *Checkout) publish(ctx context.Context, pub Published, res Result) (Published, error) {
	j := c.job.Job
	if err := c.recheckRepository(ctx); err != nil {
		return pub, err
	}
	if res.NoChanges {
		return pub, nil // a flow that changes nothing: whatever the workspace holds stays there
	}
	if err := c.checkGrowth(); err != nil {
		return pub, err
	}
	if err := c.checkHistory(ctx); err != nil {
		return pub, err
	}
	tree, err := c.snapshot(ctx)
	if err != nil {
		return pub, err
	}
	changed, err := c.check(ctx, tree)
	if err != nil {
		return pub, err
	}
	if !changed {
		return c.resumeUnproposed(ctx, pub, res)
	}
	branch := pub.Branch
	if branch == "" {
		// A pull request from a fork: its branch is not ours to push to, nor
		// to propose a change onto.
		return pub, &RefusalError{Reason: jobs.ReasonProtectedBranch, Path: c.pull.Head}
	}
	if branch == c.repo.DefaultBranch || branch == c.baseRef || !strings.HasPrefix(branch, ownBranchPrefix) {
		return pub, &RefusalError{Reason: jobs.ReasonProtectedBranch}
	}
	var protected bool
	if err := c.call(ctx, func(tok token.Token) (err error) {
		protected, err = c.forge.API.BranchProtected(ctx, tok, j.Repo, branch)
		return err
	}); err != nil {
		return pub, fmt.Errorf("branch protection: %w", err)
	}
	if protected {
		return pub, &RefusalError{Reason: jobs.ReasonProtectedBranch}
	}
	commit, err := c.commit(ctx, tree)
	if err != nil {
		return pub, err
	}
	if err := c.push(ctx, commit, branch); err != nil {
		return pub, err
	}
	pub.PushedCommit = commit
	url, err := c.openPullRequest(ctx, branch, res)
	if err != nil {
		return pub, err
	}
	pub.PullRequestURL = url
	return pub, nil
}

// recheckRepository asks the forge again, before anything is written, that
// the job's repository name still answers with the repository the job was
// cloned from: a run takes minutes to hours, and a name renamed away and
// taken again in that time would receive the job's push, pull request and
// outputs. A different id is final (repo-gone), as at the start.
func (c *Checkout) recheckRepository(ctx context.Context) error {
	if c.repo.ID == 0 {
		return nil // a forge that answered no id when the job started
	}
	var now Repository
	if err := c.call(ctx, func(tok token.Token) (err error) {
		now, err = c.forge.API.Repository(ctx, tok, c.job.Job.Repo)
		return err
	}); err != nil {
		return fmt.Errorf("repository: %w", err)
	}
	if now.ID != c.repo.ID {
		c.log.Warn("forge_repo_id_mismatch", "jobRepoId", c.repo.ID, "forgeRepoId", now.ID, "phase", "publish")
		return fmt.Errorf("repository: %w: %w: the forge now answers %s with id %d, the job was cloned from id %d (renamed or transferred during the run, and the name taken again); nothing was pushed or posted",
			ErrRepoIDMismatch, token.ErrNoRepository, c.job.Job.Repo, now.ID, c.repo.ID)
	}
	return nil
}

// push pushes commit to branch, fast-forward only: never with --force. A
// push the forge refuses as not a fast-forward (someone pushed to the
// branch since the job was prepared) rewrites nothing and is refused
// history-rewritten.
func (c *Checkout) push(ctx context.Context, commit, branch string) error {
	err := c.call(ctx, func(tok token.Token) error {
		_, err := c.m.git(c.state).auth(c.repo.CloneURL, c.forge.API.GitUser(), tok).
			run(ctx, "push", "--quiet", c.repo.CloneURL, commit+":refs/heads/"+branch)
		return err
	})
	var ge *GitError
	if errors.As(err, &ge) && notFastForward(ge.Stderr) {
		c.log.Warn("forge_push_not_fast_forward", "branch", branch)
		return &RefusalError{Reason: jobs.ReasonHistoryRewritten, Path: branch}
	}
	if err != nil {
		return fmt.Errorf("push: %w", err)
	}
	return nil
}

// notFastForward reads git push's account of a ref refused for not being a
// fast-forward (git's own check, or the forge's).
func notFastForward(stderr string) bool {
	s := strings.ToLower(stderr)
	return strings.Contains(s, "[rejected]") || strings.Contains(s, "non-fast-forward") || strings.Contains(s, "fetch first")
}

// resumeUnproposed finishes an earlier attempt of this very job: the job
// changed nothing, but the thread's branch it was prepared on ends with
// this job's own commit, pushed before that attempt failed to propose it.
// Its pull request is found, or opened. Otherwise a job that changed
// nothing proposes nothing.
func (c *Checkout) resumeUnproposed(ctx context.Context, pub Published, res Result) (Published, error) {
	if !c.resumed || c.own || pub.Branch == "" {
		return pub, nil
	}
	msg, err := c.m.git(c.state).run(ctx, "log", "-1", "--format=%B", c.base)
	if err != nil || !strings.Contains(msg, "\nJob "+c.job.ID+"\n") {
		return pub, nil
	}
	url, err := c.openPullRequest(ctx, pub.Branch, res)
	if err != nil {
		return pub, err
	}
	pub.PullRequestURL = url
	return pub, nil
}

// openPullRequest opens the pull request from branch, unless one is open
// already: a retry (of this call or of the job) never opens a second.
func (c *Checkout) openPullRequest(ctx context.Context, branch string, res Result) (string, error) {
	j := c.job.Job
	policy := c.policy()
	if res.PullRequest != nil {
		// The job's body is its text: neutralised for the forge (GitLab
		// runs quick actions in a description) before the host's footer.
		text := *res.PullRequest
		text.Body = output.Sanitize(text.Body, output.Context{Forge: j.Forge, Actor: eventActor(c.event)})
		res.PullRequest = &text
	}
	title, body := pullTitle(c.job, c.event, res), pullBody(c.job, res)
	var url string
	err := c.call(ctx, func(tok token.Token) error {
		found, err := c.forge.API.FindPullRequest(ctx, tok, j.Repo, branch)
		if err != nil {
			return err
		}
		if found != "" {
			url = found
			return nil
		}
		url, err = c.forge.API.OpenPullRequest(ctx, tok, j.Repo, NewPullRequest{
			Title: title, Body: body, Head: branch, Base: c.baseRef, Draft: !policy.Ready,
		})
		return err
	})
	if err != nil {
		return "", fmt.Errorf("pull request: %w", err)
	}
	return url, nil
}

func (c *Checkout) policy() PublishPolicy {
	if c.m.cfg.Policy == nil {
		return PublishPolicy{}
	}
	return c.m.cfg.Policy(c.job.Job)
}

// snapshot writes the workspace's files (committed or not, the job's .git
// aside) as a tree in the host-only repository.
func (c *Checkout) snapshot(ctx context.Context) (string, error) {
	g := c.m.git(c.state)
	g.env = append(g.env, "GIT_INDEX_FILE="+c.state+"/pi-index", "GIT_WORK_TREE="+c.dir)
	// The job's ignore and attribute files are its data: read neither.
	g.with("core.excludesFile", "/dev/null").with("core.attributesFile", "/dev/null")
	if _, err := g.run(ctx, "read-tree", c.base); err != nil {
		return "", err
	}
	if _, err := g.run(ctx, "add", "--all", "--", "."); err != nil {
		return "", err
	}
	tree, err := g.run(ctx, "write-tree")
	return strings.TrimSpace(tree), err
}

// check compares tree with the base and refuses what the policy forbids. It
// reports whether anything changed.
func (c *Checkout) check(ctx context.Context, tree string) (bool, error) {
	out, err := c.m.git(c.state).run(ctx, "diff-tree", "-r", "-z", "--no-renames", "--raw", c.base, tree)
	if err != nil {
		return false, err
	}
	if out == "" {
		return false, nil
	}
	policy, limits := c.policy(), c.m.cfg.Limits
	changes, err := parseChanges(out)
	if err != nil {
		return false, err
	}
	if len(changes) > limits.MaxFiles {
		return false, &RefusalError{Reason: jobs.ReasonTooManyFiles}
	}
	blobs, err := c.checkChanges(ctx, tree, changes, policy)
	if err != nil {
		return false, err
	}
	if err := c.checkSize(ctx, blobs, limits.MaxBytes); err != nil {
		return false, err
	}
	return true, nil
}

// treeChange is one changed path of a diff-tree: its new mode and blob.
type treeChange struct{ mode, sha, path string }

// parseChanges reads diff-tree's -z --raw output, which quotes no path.
func parseChanges(out string) ([]treeChange, error) {
	// -z --raw: ":oldmode newmode oldsha newsha status\0path\0" per change.
	fields := strings.Split(strings.TrimSuffix(out, "\x00"), "\x00")
	var changes []treeChange
	for i := 0; i+1 < len(fields); i += 2 {
		meta := strings.Fields(strings.TrimPrefix(fields[i], ":"))
		if len(meta) < 5 {
			return nil, fmt.Errorf("diff-tree: unexpected line %q", fields[i])
		}
		changes = append(changes, treeChange{mode: meta[1], sha: meta[3], path: fields[i+1]})
	}
	return changes, nil
}

// checkChanges refuses CI configuration, submodules and escaping links, and returns the blobs whose sizes count.
func (c *Checkout) checkChanges(ctx context.Context, tree string, changes []treeChange, policy PublishPolicy) ([]string, error) {
	var blobs []string
	for _, ch := range changes {
		switch {
		case !policy.AllowCI && IsCIPath(ch.path):
			return nil, &RefusalError{Reason: jobs.ReasonCIChange, Path: ch.path}
		case ch.mode == "160000" || ch.path == ".gitmodules" || strings.HasSuffix(ch.path, "/.gitmodules"):
			return nil, &RefusalError{Reason: jobs.ReasonUnsafePath, Path: ch.path}
		case ch.mode == "120000":
			escapes, err := c.linkChainEscapes(ctx, tree, ch.path)
			if err != nil {
				return nil, err
			}
			if escapes {
				return nil, &RefusalError{Reason: jobs.ReasonUnsafePath, Path: ch.path}
			}
		}
		if ch.mode != "000000" {
			blobs = append(blobs, ch.sha)
		}
	}
	return blobs, nil
}

// checkSize refuses blobs adding up to more than maxBytes, so no job publishes without bound.
func (c *Checkout) checkSize(ctx context.Context, blobs []string, maxBytes int64) error {
	if len(blobs) == 0 {
		return nil
	}
	g := c.m.git(c.state)
	g.stdin = []byte(strings.Join(blobs, "\n") + "\n")
	sizes, err := g.run(ctx, "cat-file", "--batch-check=%(objectsize)")
	if err != nil {
		return err
	}
	var total int64
	sc := bufio.NewScanner(strings.NewReader(sizes))
	for sc.Scan() {
		n, err := strconv.ParseInt(strings.TrimSpace(sc.Text()), 10, 64)
		if err != nil {
			return fmt.Errorf("cat-file size %q: %w", sc.Text(), err)
		}
		total += n
		if total > maxBytes {
			return &RefusalError{Reason: jobs.ReasonTooLarge}
		}
	}
	return nil
}

// maxLinkHops bounds the links one resolution follows (Linux's own bound).
const maxLinkHops = 40

// linkChainEscapes reports whether the symbolic link at p leads out of the
// repository or into its .git, following its whole chain as a checkout
// would: each component of each target is looked up in the published tree
// tree, and a component that is itself a link is replaced by its
// target. Too long a chain counts as escaping.
func (c *Checkout) linkChainEscapes(ctx context.Context, tree, p string) (bool, error) {
	var resolved []string
	todo := []string{p}
	for hops := 0; len(todo) > 0; {
		comp := todo[0]
		todo = todo[1:]
		if strings.Contains(comp, "/") {
			todo = append(strings.Split(comp, "/"), todo...)
			continue
		}
		switch comp {
		case "", ".":
			continue
		case "..":
			if len(resolved) == 0 {
				return true, nil
			}
			resolved = resolved[:len(resolved)-1]
			continue
		}
		resolved = append(resolved, comp)
		if strings.EqualFold(resolved[0], ".git") {
			return true, nil
		}
		mode, target, err := c.treeLink(ctx, tree, strings.Join(resolved, "/"))
		if err != nil {
			return false, err
		}
		if mode != "120000" {
			continue
		}
		if hops++; hops > maxLinkHops || target == "" || strings.HasPrefix(target, "/") || strings.ContainsRune(target, 0) {
			return true, nil
		}
		resolved = resolved[:len(resolved)-1]
		todo = append([]string{target}, todo...)
	}
	return false, nil
}

// treeLink answers the mode of path p in tree and, for
// a symbolic link, its target ("" mode: no such path).
func (c *Checkout) treeLink(ctx context.Context, tree, p string) (mode, target string, err error) {
	g := c.m.git(c.state)
	g.env = append(g.env, "GIT_LITERAL_PATHSPECS=1") // a path, never a pattern
	out, err := g.run(ctx, "ls-tree", "-z", tree, "--", p)
	if err != nil || out == "" {
		return "", "", err
	}
	meta, _, _ := strings.Cut(out, "\t")
	f := strings.Fields(meta)
	if len(f) < 3 {
		return "", "", fmt.Errorf("ls-tree: unexpected line %q", out)
	}
	if f[0] != "120000" {
		return f[0], "", nil
	}
	t, err := c.m.git(c.state).run(ctx, "cat-file", "blob", f[2])
	return f[0], t, err
}

// commit makes the one host commit of tree on the base.
func (c *Checkout) commit(ctx context.Context, tree string) (string, error) {
	g := c.m.git(c.state)
	when := c.m.cfg.Now().UTC().Format("2006-01-02T15:04:05Z")
	email := "pidispatch@" + c.m.cfg.Host
	g.env = append(g.env,
		"GIT_AUTHOR_NAME=pidispatch", "GIT_AUTHOR_EMAIL="+email, "GIT_AUTHOR_DATE="+when,
		"GIT_COMMITTER_NAME=pidispatch", "GIT_COMMITTER_EMAIL="+email, "GIT_COMMITTER_DATE="+when)
	out, err := g.run(ctx, "commit-tree", tree, "-p", c.base, "-m", commitMessage(c.job))
	return strings.TrimSpace(out), err
}
