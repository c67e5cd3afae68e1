package workspace

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/pidispatch/pidispatch/forge/token"
	"github.com/pidispatch/pidispatch/internal/sinktext"
	"github.com/pidispatch/pidispatch/jobs"
)

// Status is what a forge job's status comment says now.
type Status struct {
	// State is one of the Status* constants.
	State string
	// Reason is why it waits, was refused or failed.
	Reason jobs.Reason
	// Attempt and Attempts count its tries.
	Attempt, Attempts int
	// Until is when a waiting job is due again (zero: not known).
	Until time.Time
	// PullRequestURL, Turns and Dollars are a final outcome's.
	PullRequestURL string
	Turns          int
	Dollars        float64
	// Outputs says what became of the job's outputs (a refused one gets
	// one line).
	Outputs []jobs.OutputResult
	// SameAs is the job a duplicate delivery was folded into.
	SameAs string
}

// The states of a status comment.
const (
	// StatusQueued: the intake accepted the job; no worker took it yet
	// (Manager.Queued writes it).
	StatusQueued = "queued"
	// StatusDuplicate: the delivery was folded into a job queued already
	// for the same thread and trigger (Status.SameAs); nothing new runs.
	StatusDuplicate = "duplicate"
	StatusWaiting   = "waiting"
	StatusRunning   = "running"
	StatusRetrying  = "retrying"
	StatusCompleted = "completed"
	StatusRefused   = "refused"
	StatusFailed    = "failed"
)

// statusMemory bounds how many jobs' status comments a Manager remembers
// (their comment id and last text); past it the oldest half is forgotten and
// found again on the forge when needed.
const statusMemory = 4096

// statusSearch is how many of a thread's last comments are searched for a
// job's status comment written by another host or attempt.
const statusSearch = 100

// statusComment is what the Manager remembers of one job's status comment.
type statusComment struct {
	id  int64
	key string // statusKey of what it says
	url string // where it is on the forge's web pages
	seq uint64
}

// statuses remembers the jobs' status comments on this host.
type statuses struct {
	mu   sync.Mutex
	seq  uint64
	jobs map[string]statusComment
	self sync.Map // jobs.Forge -> Person: who the host is on each forge
	web  sync.Map // "<forge>:<repo>" -> the repository's web page
}

func (s *statuses) get(jobID string) statusComment {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.jobs[jobID]
}

func (s *statuses) put(jobID string, sc statusComment) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.jobs == nil {
		s.jobs = map[string]statusComment{}
	}
	if len(s.jobs) >= statusMemory {
		cut := s.seq - statusMemory/2
		for id, old := range s.jobs {
			if old.seq <= cut {
				delete(s.jobs, id)
			}
		}
	}
	s.seq++
	sc.seq = s.seq
	s.jobs[jobID] = sc
}

// statusMarker marks a job's status comment so another host, or a later
// attempt, finds and edits it instead of writing another.
func statusMarker(jobID string) string {
	return "<!-- pidispatch:status job=" + jobs.SanitizeJobID(jobID) + " -->"
}

// Status shows s in the job's one status comment on its issue or pull
// request: created the first time, edited in place after (a retry, another
// host), so one job leaves one comment whatever happens to it. A job no
// trigger of this host covers (Config.Admit) gets no comment:
// whoever wrote its data decides nothing the host says. A job with no issue
// or pull request has nowhere to show it. Writing the same text again is
// skipped.
//
// It answers the comment's address on the forge's web pages ("" when it
// wrote none, or the forge did not say where the repository's pages are).
func (m *Manager) Status(ctx context.Context, job Job, s Status) (string, error) {
	f, ok, err := m.statusForge(job)
	if !ok {
		return "", err
	}
	body := statusBody(job, s)
	key := statusKey(job, s)
	prev := m.status.get(job.ID)
	if prev.key == key {
		return prev.url, nil
	}
	tok, release, err := m.statusToken(ctx, job, f)
	if err != nil {
		return "", err
	}
	defer release()
	id, err := m.writeStatus(ctx, job, f, tok, prev.id, body)
	if err != nil {
		return "", err
	}
	url := prev.url
	if id != prev.id || url == "" {
		url = m.statusURL(ctx, job, f, tok, id)
	}
	m.status.put(job.ID, statusComment{id: id, key: key, url: url})
	return url, nil
}

// Queued writes the job's status comment saying it is queued, when the
// intake accepts it and before it is enqueued, so a job no worker has taken
// yet shows on its thread and the first worker to take it finds the comment
// by its marker and edits it. A job that has a status comment already (a
// delivery handled again after a crash, when a worker may have moved it on)
// keeps it as it is: a later state is never put back to queued. It answers
// the comment's address, as Status does.
func (m *Manager) Queued(ctx context.Context, job Job) (string, error) {
	j := job.Job
	f, ok, err := m.statusForge(job)
	if !ok {
		return "", err
	}
	if prev := m.status.get(job.ID); prev.id != 0 {
		return prev.url, nil
	}
	tok, release, err := m.statusToken(ctx, job, f)
	if err != nil {
		return "", err
	}
	defer release()
	s := Status{State: StatusQueued}
	key := statusKey(job, s)
	id := m.findStatus(ctx, job, f, tok)
	if id != 0 {
		key = "" // another's text: the next Status edits it
	} else if id, err = f.API.Comment(ctx, tok, j.Repo, j.Number, j.PullRequest, statusBody(job, s)); err != nil {
		return "", fmt.Errorf("write status comment: %w", err)
	}
	url := m.statusURL(ctx, job, f, tok, id)
	m.status.put(job.ID, statusComment{id: id, key: key, url: url})
	return url, nil
}

// statusForge is the forge a job's status comment is written on, and
// whether one is: not for a job with no issue or pull request (nowhere to
// show it), nor for one no trigger of this host covers (Config.Admit:
// whoever wrote its data decides nothing the host says). An error is a
// job on a forge this host does not serve.
func (m *Manager) statusForge(job Job) (Forge, bool, error) {
	j := job.Job
	f, ok := m.cfg.Forges[j.Forge]
	switch {
	case !ok || j.Repo == "":
		return Forge{}, false, fmt.Errorf("%w: forge %q", ErrNotForge, j.Forge)
	case j.Number == 0:
		return Forge{}, false, nil
	}
	if err := m.Admit(j); err != nil {
		m.log.Warn("forge_status_skipped", "jobId", job.ID, "why", err.Error())
		return Forge{}, false, nil
	}
	return f, true, nil
}

// statusURL is where comment id of the job's thread is on the forge's web
// pages: the repository's page (asked once per repository) and the
// forge's own path and anchor; "" when the forge does not say where the
// repository's pages are.
func (m *Manager) statusURL(ctx context.Context, job Job, f Forge, tok token.Token, id int64) string {
	j := job.Job
	if id == 0 {
		return ""
	}
	web, ok := m.status.web.Load(string(j.Forge) + ":" + j.Repo)
	if !ok {
		repo, err := f.API.Repository(ctx, tok, j.Repo)
		if err != nil || !strings.HasPrefix(repo.WebURL, "http") {
			return ""
		}
		web = strings.TrimSuffix(repo.WebURL, "/")
		m.status.web.Store(string(j.Forge)+":"+j.Repo, web)
	}
	switch {
	case j.Forge == jobs.ForgeGitLab && j.PullRequest:
		return fmt.Sprintf("%s/-/merge_requests/%d#note_%d", web, j.Number, id)
	case j.Forge == jobs.ForgeGitLab:
		return fmt.Sprintf("%s/-/issues/%d#note_%d", web, j.Number, id)
	}
	// GitHub and Gitea show a pull request's conversation under /issues/N too.
	return fmt.Sprintf("%s/issues/%d#issuecomment-%d", web, j.Number, id)
}

// writeStatus edits the job's status comment (id, else the one found on the
// thread), or writes it when there is none it may edit, and answers its id.
func (m *Manager) writeStatus(ctx context.Context, job Job, f Forge, tok token.Token, id int64, body string) (int64, error) {
	j := job.Job
	if id == 0 {
		id = m.findStatus(ctx, job, f, tok)
	}
	if id != 0 {
		err := f.API.EditComment(ctx, tok, j.Repo, j.Number, j.PullRequest, id, body)
		if err == nil {
			return id, nil
		}
		if !errors.Is(err, token.ErrRefused) && !errors.Is(err, token.ErrNoRepository) {
			return 0, fmt.Errorf("edit status comment: %w", err)
		}
		// Deleted, or not ours to edit: a new one takes its place.
		m.log.Warn("forge_status_comment_replaced", "jobId", job.ID, "comment", id, "err", err)
	}
	id, err := f.API.Comment(ctx, tok, j.Repo, j.Number, j.PullRequest, body)
	if err != nil {
		return 0, fmt.Errorf("write status comment: %w", err)
	}
	return id, nil
}

// findStatus answers the id of the job's status comment among the thread's
// last comments (0: none): the newest carrying the job's marker, written by
// the host's own identity where the forge gives one that lasts (on GitLab
// without a status token each job's token is a user of its own, so an edit
// that is refused writes a new comment instead).
func (m *Manager) findStatus(ctx context.Context, job Job, f Forge, tok token.Token) int64 {
	j := job.Job
	comments, _, err := f.API.LastComments(ctx, tok, j.Repo, j.Number, j.PullRequest, statusSearch)
	if err != nil {
		m.log.Warn("forge_status_search_failed", "jobId", job.ID, "err", err)
		return 0
	}
	marker := statusMarker(job.ID)
	self, check := m.self(ctx, job, f, tok)
	for i := len(comments) - 1; i >= 0; i-- {
		cm := comments[i]
		if !strings.Contains(cm.Body, marker) {
			continue
		}
		if check && !samePerson(self, cm.Author) {
			continue
		}
		return cm.ID
	}
	return 0
}

// self answers who the host is on the job's forge (the status token's
// user), asked once, and whether a comment's author is checked against it:
// not where the forge gives no identity that outlives a job (GitLab without
// Forge.Status). When the forge does not say, the zero Person is answered,
// which no author matches: a comment by someone else that carries the
// marker is never edited (the host's token, a Maintainer's on GitLab, may
// edit anyone's), and the host writes a new one instead.
func (m *Manager) self(ctx context.Context, job Job, f Forge, tok token.Token) (Person, bool) {
	kind := job.Job.Forge
	if kind == jobs.ForgeGitLab && f.Status == nil {
		return Person{}, false
	}
	if p, ok := m.status.self.Load(kind); ok {
		return p.(Person), true
	}
	p, err := f.API.Self(ctx, f.Minter, tok)
	if err != nil || (p.Login == "" && p.ID == 0) {
		m.log.Warn("forge_status_self_unknown", "jobId", job.ID, "forge", kind, "err", err)
		return Person{}, true
	}
	m.status.self.Store(kind, p)
	return p, true
}

func samePerson(a, b Person) bool {
	if a.ID != 0 && b.ID != 0 {
		return a.ID == b.ID
	}
	return a.Login != "" && strings.EqualFold(a.Login, b.Login)
}

// statusToken answers a token for the job's status comment: the forge's
// status token (Forge.Status) when it has one; else the token of the job's
// live workspace when it has one, else one minted for this and revoked
// after it (release), on a context of its own.
func (m *Manager) statusToken(ctx context.Context, job Job, f Forge) (token.Token, func(), error) {
	minter := f.Minter
	if f.Status != nil {
		minter = f.Status
	} else if c := m.liveCheckout(job.ID); c != nil {
		tok, err := c.token(ctx)
		return tok, func() {}, err
	}
	tok, err := minter.Mint(ctx, job.Job.Repo)
	if err != nil {
		return token.Token{}, nil, fmt.Errorf("mint: %w", err)
	}
	release := func() {
		r, ok := minter.(token.Revoker)
		if !ok {
			return
		}
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), revokeTimeout)
		defer cancel()
		if err := r.Revoke(rctx, job.Job.Repo, tok); err != nil {
			m.log.Warn("forge_token_revoke_failed", "jobId", job.ID, "err", err)
		}
	}
	return tok, release, nil
}

// statusKey is what decides whether a status comment needs writing again: a
// job deferred again and again for the same reason (a busy thread, a
// closed window) changes only its due time, which is not worth an edit and
// a token each time.
func statusKey(job Job, s Status) string {
	if s.State == StatusWaiting {
		s.Until = time.Time{}
	}
	return statusBody(job, s)
}

// statusBody renders a status comment: one line of where the job stands,
// the outputs refused, and the job's marker. Every string in it that a job
// or its producer chose (the id, the flow, a file's name, a refusal's
// reason, which may quote what the job wrote) is written by sinktext: a
// code span it cannot close, or Markdown text that pings, links and renders
// nothing.
func statusBody(job Job, s Status) string {
	var b strings.Builder
	b.WriteString("**pidispatch** job " + sinktext.Code(jobs.SanitizeJobID(job.ID)))
	if job.Job.Flow != "" {
		b.WriteString(" (flow " + sinktext.Code(jobs.ClipName(job.Job.Flow)) + ")")
	}
	b.WriteString(": " + statusLine(s) + "\n\n")
	for _, o := range s.Outputs {
		if o.Status == jobs.OutputPosted {
			continue
		}
		fmt.Fprintf(&b, "- %s was not posted: %s\n", sinktext.Code(jobs.ClipName(o.File)), sinktext.Markdown(oneLine(o.Reason, 200)))
	}
	b.WriteString(statusMarker(job.ID) + "\n")
	return b.String()
}

// statusLine says where the job stands in words.
func statusLine(s Status) string {
	attempt := ""
	if s.Attempts > 1 {
		attempt = fmt.Sprintf(" (attempt %d of %d)", max(s.Attempt, 1), s.Attempts)
	}
	reason := sinktext.Code(string(s.Reason))
	switch s.State {
	case StatusQueued:
		return "queued, waiting for a worker."
	case StatusDuplicate:
		return "already queued as job " + sinktext.Code(jobs.SanitizeJobID(s.SameAs)) + "; nothing new runs for this request."
	case StatusWaiting:
		line := "waiting: " + reason
		if !s.Until.IsZero() {
			line += ", due again at " + s.Until.UTC().Format("2006-01-02 15:04 UTC")
		}
		return line + "."
	case StatusRunning:
		return "running" + attempt + "."
	case StatusRetrying:
		return fmt.Sprintf("attempt %d of %d ended (%s); it will be tried again.", max(s.Attempt, 1), max(s.Attempts, 1), reason)
	case StatusCompleted:
		if s.PullRequestURL != "" {
			return "done. Pull request: " + s.PullRequestURL + statusNumbers(s)
		}
		return "done." + statusNumbers(s)
	case StatusRefused:
		return "refused (" + reason + ")." + statusNumbers(s)
	case StatusFailed:
		return fmt.Sprintf("failed (%s) after %d attempt(s).%s", reason, max(s.Attempt, 1), statusNumbers(s))
	}
	return sinktext.Code(oneLine(s.State, 40)) + "."
}

func statusNumbers(s Status) string {
	return numbers(Result{Turns: s.Turns, Dollars: s.Dollars})
}
