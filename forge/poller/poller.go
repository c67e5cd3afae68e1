// Package poller polls GitHub for the events of configured repositories, for
// hosts that cannot receive webhooks, and hands them to the same forge.Intake
// the receiver uses: the same trigger matching, permission checks and dedup.
//
// Per repository it reads the issue events (labels added, issues and pull
// requests closed and reopened), the new issue and pull request comments, the
// open pull requests (new ones and new heads), and the reviews of the pull
// requests that moved. Every list is a conditional request (If-None-Match
// with the stored ETag), so a cycle in which nothing changed costs no rate
// limit. The cursors and ETags live in Valkey, so a restart neither replays
// nor misses events; on first contact with a repository the cursors are set
// to now and nothing is enqueued.
package poller

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/go-github/v84/github"
	"github.com/redis/go-redis/v9"

	"github.com/pidispatch/pidispatch/forge"
	"github.com/pidispatch/pidispatch/jobs"
)

// Limits.
const (
	MinInterval     = 30 * time.Second
	DefaultInterval = 60 * time.Second
	// StateTTL is how long a repository's cursors live without a successful
	// cycle; longer than a forge job is kept.
	StateTTL = 35 * 24 * time.Hour
	maxPages = 5
	// maxReviewPulls is how many pull requests' reviews one cycle reads per
	// repository; the rest wait for the next cycle.
	maxReviewPulls = 10
)

// Handler is what events go to: a *forge.Intake.
type Handler interface {
	Handle(ctx context.Context, ev forge.Event) (forge.Outcome, error)
}

// Config configures a Poller.
type Config struct {
	// Repos are the owner/name repositories to poll (POLL_REPOS). Required.
	Repos []string
	// Interval between cycles (POLL_INTERVAL_SECONDS); at least 30 s.
	Interval time.Duration
	// BaseURL is the GitHub API root (GITHUB_API_URL).
	BaseURL string
	Tokens  forge.Tokens
	Client  *http.Client
	// Valkey holds the cursors and ETags under Prefix (default
	// "pidispatch:forge:poll:").
	Valkey redis.UniversalClient
	Prefix string
	// Handler receives the events. Required.
	Handler Handler
	Logger  *slog.Logger
	Host    string
	// Now is the clock of arming. Default time.Now.
	Now func() time.Time
}

// Poller polls GitHub.
type Poller struct {
	cfg Config
	log *slog.Logger
	// marks are the cursors this process itself stored, by repo and
	// source: a cursor read back from Valkey behind its mark was moved by
	// someone else, and the mark wins (no history is replayed).
	marks sync.Map
}

// markKey names a cursor's mark.
func markKey(repo, source string) string { return repo + "\x00" + source }

// behindMark answers the cursor to use: cur, or this process's own mark for
// it when cur is behind the mark (logged poll_state_invalid).
func (p *Poller) behindMark(repo, source string, cur int64) int64 {
	v, ok := p.marks.Load(markKey(repo, source))
	if !ok || cur >= v.(int64) {
		return cur
	}
	p.log.Warn("poll_state_invalid", "repo", repo, "source", source, "why", "the stored cursor moved backwards; this process's own is used",
		"stored", cur, "own", v.(int64))
	return v.(int64)
}

// mark records the cursor this process stored.
func (p *Poller) mark(repo, source string, cur int64) { p.marks.Store(markKey(repo, source), cur) }

// maxETagBytes bounds an ETag read back from Valkey.
const maxETagBytes = 256

// validETag reports whether an ETag read back from Valkey may be sent: at
// most maxETagBytes of printable ASCII (no control character can reach a
// request header).
func validETag(s string) bool {
	if len(s) > maxETagBytes {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// New checks cfg and returns a Poller.
func New(cfg Config) (*Poller, error) {
	switch {
	case len(cfg.Repos) == 0:
		return nil, errors.New("poller: no repositories to poll")
	case cfg.Handler == nil || cfg.Tokens == nil || cfg.Valkey == nil:
		return nil, errors.New("poller: Handler, Tokens and Valkey are required")
	case cfg.Interval == 0:
		cfg.Interval = DefaultInterval
	case cfg.Interval < MinInterval:
		return nil, fmt.Errorf("poller: interval %s is under %s", cfg.Interval, MinInterval)
	}
	for _, r := range cfg.Repos {
		if o, n, ok := strings.Cut(r, "/"); !ok || o == "" || n == "" || strings.Contains(n, "/") {
			return nil, fmt.Errorf("poller: %q is not owner/name", r)
		}
	}
	if cfg.Prefix == "" {
		cfg.Prefix = "pidispatch:forge:poll:"
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Poller{cfg: cfg, log: log.With("host", cfg.Host)}, nil
}

// Run polls every Interval until ctx ends, then returns nil. It runs in the
// caller's goroutine and starts none.
func (p *Poller) Run(ctx context.Context) error {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		wait := p.Cycle(ctx)
		t.Reset(max(wait, p.cfg.Interval))
	}
}

// Cycle polls every repository once and returns how long GitHub asks to wait
// before the next cycle (0: the interval).
func (p *Poller) Cycle(ctx context.Context) time.Duration {
	for _, repo := range p.cfg.Repos {
		if ctx.Err() != nil {
			return 0
		}
		if err := p.pollRepo(ctx, repo); err != nil {
			var rl *github.RateLimitError
			if errors.As(err, &rl) {
				d := time.Until(rl.Rate.Reset.Time) + time.Second
				p.log.Warn("poll_rate_limited", "repo", repo, "resetIn", d.Round(time.Second).String())
				return d
			}
			p.log.Warn("poll_repo_failed", "repo", repo, "err", err.Error())
		}
	}
	return 0
}

func (p *Poller) key(repo, name string) string { return p.cfg.Prefix + repo + ":" + name }

func (p *Poller) client(ctx context.Context, repo string) (*github.Client, error) {
	tok, err := p.cfg.Tokens.Token(ctx, repo)
	if err != nil {
		return nil, err
	}
	return forge.GitHubClient(p.cfg.BaseURL, tok, p.cfg.Client)
}

// fetch makes a GET, conditional on etag when it is set; notModified
// reports a 304, and newETag is the answer's ETag.
func fetch(ctx context.Context, c *github.Client, path, etag string, v any) (newETag string, notModified bool, err error) {
	req, err := c.NewRequest(http.MethodGet, path, nil)
	if err != nil {
		return "", false, err
	}
	if etag != "" {
		req.Header.Set("If-None-Match", etag)
	}
	resp, err := c.Do(ctx, req, v)
	if resp != nil && resp.StatusCode == http.StatusNotModified {
		return etag, true, nil
	}
	if err != nil {
		return "", false, err
	}
	return resp.Header.Get("ETag"), false, nil
}

// get makes a GET conditional on the stored ETag name; notModified reports a
// 304. The caller stores the new ETag with saveETag once it has handled the
// answer, so a failure half way reads the list again next cycle.
func (p *Poller) get(ctx context.Context, c *github.Client, repo, name, path string, v any) (etag string, notModified bool, err error) {
	old, err := p.storedETag(ctx, repo, name)
	if err != nil {
		return "", false, err
	}
	return fetch(ctx, c, path, old, v)
}

// storedETag is the ETag stored under name ("" when none is), for a list read conditionally.
func (p *Poller) storedETag(ctx context.Context, repo, name string) (string, error) {
	old, err := p.cfg.Valkey.Get(ctx, p.key(repo, "etag:"+name)).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return "", err
	}
	if !validETag(old) {
		p.log.Warn("poll_state_invalid", "repo", repo, "source", name, "why", "a stored ETag with control characters or over 256 bytes; dropped")
		return "", nil
	}
	return old, nil
}

// pagedList is one paged list for readPages, so the lists share one way of paging.
type pagedList[T any] struct {
	// path is the request of a page.
	path func(page int) string
	// etags are the ETags the first pages are conditional on; the later
	// pages are read unconditionally.
	etags []string
	// take handles a page's answer (notModified: a 304 of a conditional
	// read) and reports whether to read on.
	take func(page int, got []T, etag string, notModified bool) bool
	// gap logs that maxPages full pages did not reach the end of the list.
	gap func()
}

// readPages pages through l until take stops, a short page, or maxPages: one loop for every list.
func readPages[T any](ctx context.Context, c *github.Client, l pagedList[T]) error {
	for page := 1; page <= maxPages; page++ {
		var old string
		conditional := page <= len(l.etags)
		if conditional {
			old = l.etags[page-1]
		}
		var got []T
		etag, nm, err := fetch(ctx, c, l.path(page), old, &got)
		if err != nil {
			return err
		}
		nm = nm && conditional // a 304 to an unconditional GET is an empty page
		if !l.take(page, got, etag, nm) {
			return nil
		}
		if nm {
			continue
		}
		if len(got) < 100 {
			return nil
		}
		if page == maxPages {
			l.gap()
		}
	}
	return nil
}

func (p *Poller) saveETag(ctx context.Context, repo, name, etag string) error {
	if etag == "" {
		return nil
	}
	return p.cfg.Valkey.Set(ctx, p.key(repo, "etag:"+name), etag, StateTTL).Err()
}

func (p *Poller) pollRepo(ctx context.Context, repo string) error {
	c, err := p.client(ctx, repo)
	if err != nil {
		return fmt.Errorf("token: %w", err)
	}
	if err := p.pollEvents(ctx, c, repo); err != nil {
		return fmt.Errorf("issue events: %w", err)
	}
	if err := p.pollComments(ctx, c, repo); err != nil {
		return fmt.Errorf("comments: %w", err)
	}
	if err := p.pollPulls(ctx, c, repo); err != nil {
		return fmt.Errorf("pull requests: %w", err)
	}
	if err := p.pollReviews(ctx, c, repo); err != nil {
		return fmt.Errorf("reviews: %w", err)
	}
	// Keep every key of a repository polled successfully alive together.
	for _, k := range []string{"events", "comments", "prs", "prupd", "reviews", "reviewq",
		"etag:events", "etag:comments", "etag:pulls"} {
		p.cfg.Valkey.Expire(ctx, p.key(repo, k), StateTTL)
	}
	return nil
}

// pollEvents reads /issues/events, newest first, back to the cursor (the
// last event id handled), and hands labeled, closed and reopened events over
// oldest first. The cursor advances after each event, so a failure resumes
// there.
func (p *Poller) pollEvents(ctx context.Context, c *github.Client, repo string) error {
	cur, err := p.cfg.Valkey.Get(ctx, p.key(repo, "events")).Int64()
	armed := err == nil
	if err != nil && !errors.Is(err, redis.Nil) {
		return err
	}
	if armed {
		cur = p.behindMark(repo, "events", cur)
	}
	fresh, etag, unchanged, err := p.readEvents(ctx, c, repo, cur, armed)
	if err != nil || unchanged {
		return err
	}
	if !armed {
		err = p.armEvents(ctx, repo, fresh)
	} else {
		err = p.handEvents(ctx, repo, fresh)
	}
	if err != nil {
		return err
	}
	return p.saveETag(ctx, repo, "events", etag)
}

// readEvents reads the events past cur, newest first (one page to arm); unchanged is a 304.
func (p *Poller) readEvents(ctx context.Context, c *github.Client, repo string, cur int64, armed bool) (fresh []*github.IssueEvent, etag string, unchanged bool, err error) {
	stored, err := p.storedETag(ctx, repo, "events")
	if err != nil {
		return nil, "", false, err
	}
	err = readPages(ctx, c, pagedList[*github.IssueEvent]{
		path:  func(page int) string { return fmt.Sprintf("repos/%s/issues/events?per_page=100&page=%d", repo, page) },
		etags: []string{stored}, // only the first page is conditional
		take: func(page int, list []*github.IssueEvent, pageETag string, nm bool) bool {
			if page == 1 {
				etag, unchanged = pageETag, nm
			}
			for _, e := range list {
				if e.GetID() <= cur {
					return false
				}
				fresh = append(fresh, e)
			}
			return armed && !nm
		},
		gap: func() { p.log.Warn("poll_events_gap", "repo", repo, "pages", maxPages) },
	})
	return fresh, etag, unchanged, err
}

// armEvents sets the cursor to the newest event, handing none over: history is not replayed.
func (p *Poller) armEvents(ctx context.Context, repo string, fresh []*github.IssueEvent) error {
	var top int64
	for _, e := range fresh {
		top = max(top, e.GetID())
	}
	p.log.Info("poll_armed", "repo", repo, "source", "events")
	p.mark(repo, "events", top)
	return p.cfg.Valkey.Set(ctx, p.key(repo, "events"), top, StateTTL).Err()
}

// handEvents hands fresh over oldest first, the cursor after each, so a failure resumes there.
func (p *Poller) handEvents(ctx context.Context, repo string, fresh []*github.IssueEvent) error {
	for i := len(fresh) - 1; i >= 0; i-- {
		e := fresh[i]
		if ev, ok := eventOf(repo, e); ok {
			if _, err := p.cfg.Handler.Handle(ctx, ev); err != nil {
				return err // the cursor stays before this event
			}
		}
		p.mark(repo, "events", e.GetID())
		if err := p.cfg.Valkey.Set(ctx, p.key(repo, "events"), e.GetID(), StateTTL).Err(); err != nil {
			return err
		}
	}
	return nil
}

// eventOf turns an issue event into an intake event, the one the webhook of
// the same change carries: labeled is issues/labeled (pull_request/labeled on
// a pull request), reopened is issues/reopened (pull_request/reopened), closed
// is a close.
func eventOf(repo string, e *github.IssueEvent) (forge.Event, bool) {
	iss := e.GetIssue()
	if iss == nil {
		return forge.Event{}, false // no issue to start a job on
	}
	ev := forge.Event{
		Forge: jobs.ForgeGitHub, DeliveryID: "poll-e" + strconv.FormatInt(e.GetID(), 10),
		Repo: repo, Number: iss.GetNumber(), PullRequest: iss.IsPullRequest(),
		SenderID: e.GetActor().GetID(), SenderLogin: e.GetActor().GetLogin(),
		// The repository's id where the answer names it (0: the job runs by name).
		RepoID: cmp.Or(e.GetRepository().GetID(), iss.GetRepository().GetID()),
	}
	for _, l := range iss.Labels {
		ev.Labels = append(ev.Labels, l.GetName())
	}
	switch e.GetEvent() {
	case "labeled":
		ev.Added = []string{e.GetLabel().GetName()}
		ev.Action = "labeled"
		ev.Kind = forge.KindLabel
		if ev.PullRequest {
			ev.Kind = forge.KindPullRequest
		}
	case "reopened":
		ev.Action = "reopened"
		if ev.PullRequest {
			ev.Kind = forge.KindPullRequest
		} else {
			ev.Kind, ev.Added = forge.KindLabel, ev.Labels
		}
	case "closed":
		ev.Action, ev.Kind = "closed", forge.KindClose
	default:
		return ev, false
	}
	return ev, ev.Validate() == nil
}

// commentEvent turns a listed comment into the intake event the webhook's
// issue_comment/created carries; false for one no job could be made of.
func commentEvent(repo string, cm *github.IssueComment) (forge.Event, bool) {
	ev := forge.Event{
		Forge: jobs.ForgeGitHub, DeliveryID: "poll-c" + strconv.FormatInt(cm.GetID(), 10),
		Kind: forge.KindComment, Action: "created", Repo: repo,
		Number: issueNumber(cm.GetIssueURL()), PullRequest: strings.Contains(cm.GetHTMLURL(), "/pull/"),
		SenderID: cm.GetUser().GetID(), SenderLogin: cm.GetUser().GetLogin(), Comment: cm.GetBody(),
		CommentID: cm.GetID(),
	}
	return ev, ev.Validate() == nil
}

// pullEvent turns a listed pull request with a new head into the event the
// webhook's pull_request/<action> carries; false for one no job could be made of.
func pullEvent(repo string, pr *github.PullRequest, action string) (forge.Event, bool) {
	if pr == nil {
		return forge.Event{}, false
	}
	sha := headSHA(pr)
	ev := forge.Event{
		Forge: jobs.ForgeGitHub, DeliveryID: "poll-pr" + strconv.Itoa(pr.GetNumber()) + "-" + sha[:min(7, len(sha))],
		Kind: forge.KindPullRequest, Action: action, Repo: repo, Number: pr.GetNumber(), PullRequest: true,
		SenderID: pr.GetUser().GetID(), SenderLogin: pr.GetUser().GetLogin(), Labels: labelNames(pr.Labels),
		RepoID: pr.GetBase().GetRepo().GetID(), // the repository the pull request is in
	}
	return ev, ev.Validate() == nil
}

// reviewEvent turns a listed review of pull request n into the event the
// webhook's pull_request_review/submitted carries; false for one no job
// could be made of.
func reviewEvent(repo string, n int, labels []string, r *github.PullRequestReview) (forge.Event, bool) {
	ev := forge.Event{
		Forge: jobs.ForgeGitHub, DeliveryID: "poll-r" + strconv.FormatInt(r.GetID(), 10),
		Kind: forge.KindPullRequest, Action: "review_submitted", Repo: repo, Number: n, PullRequest: true,
		SenderID: r.GetUser().GetID(), SenderLogin: r.GetUser().GetLogin(), Labels: labels,
		ReviewState: strings.ToLower(r.GetState()), ReviewID: r.GetID(),
	}
	return ev, ev.Validate() == nil
}

// pollComments reads the comments created since the cursor (a second-precise
// time), oldest first, and hands over those created after it; the cursor is
// the newest creation time seen.
func (p *Poller) pollComments(ctx context.Context, c *github.Client, repo string) error {
	cursorKey := p.key(repo, "comments")
	raw, err := p.cfg.Valkey.Get(ctx, cursorKey).Result()
	if errors.Is(err, redis.Nil) {
		p.log.Info("poll_armed", "repo", repo, "source", "comments")
		return p.cfg.Valkey.Set(ctx, cursorKey, p.cfg.Now().UTC().Format(time.RFC3339), StateTTL).Err()
	}
	if err != nil {
		return err
	}
	since, err := time.Parse(time.RFC3339, raw)
	if err != nil {
		return fmt.Errorf("cursor %q: %w", raw, err)
	}
	if now := p.cfg.Now().UTC().Truncate(time.Second); since.After(now.Add(time.Minute)) {
		// Past now, it would skip every comment until then.
		p.log.Warn("poll_state_invalid", "repo", repo, "source", "comments", "why", "the stored cursor is ahead of now; now is used")
		since = now
	}
	since = time.Unix(p.behindMark(repo, "comments", since.Unix()), 0).UTC()
	raw = since.Format(time.RFC3339)
	var list []*github.IssueComment
	path := fmt.Sprintf("repos/%s/issues/comments?sort=created&direction=asc&per_page=100&since=%s", repo, url.QueryEscape(raw))
	etag, nm, err := p.get(ctx, c, repo, "comments", path, &list)
	if err != nil || nm {
		return err
	}
	newest := since
	for _, cm := range list {
		created := cm.GetCreatedAt().Time
		if created.Before(since) {
			continue // an edit of an older comment
		}
		// A comment of the cursor's own second may come again: its
		// delivery id (the comment id) makes it one job.
		if ev, ok := commentEvent(repo, cm); ok {
			if _, err := p.cfg.Handler.Handle(ctx, ev); err != nil {
				return err
			}
		}
		if created.After(newest) {
			newest = created
			p.mark(repo, "comments", newest.Unix())
			if err := p.cfg.Valkey.Set(ctx, cursorKey, newest.UTC().Format(time.RFC3339), StateTTL).Err(); err != nil {
				return err
			}
		}
	}
	return p.saveETag(ctx, repo, "comments", etag)
}

// issueNumber is the trailing number of an issue API URL.
func issueNumber(u string) int {
	i := strings.LastIndexByte(u, '/')
	n, err := strconv.Atoi(u[i+1:])
	if err != nil || n <= 0 || n > jobs.MaxForgeNumber {
		return 0
	}
	return n
}

// pollPulls pages through the open pull requests, most recently updated
// first (the first page conditional, at most maxPages pages), and compares
// each head with the one last seen (hash prs, number to head SHA): a pull
// request not seen before is "opened", a new head is "synchronize". Its
// sender is the pull request's author, the only person the list names. A
// pull request created before the repository was armed and never listed
// (beyond the pages read then) is only recorded. Closes and reopens come from
// the issue events.
//
// A pull request whose updated_at moved (hash prupd, number to updated_at) is
// queued (hash reviewq) for pollReviews: a review moves it. On first contact
// the heads and update times are stored and nothing is handed over or queued.
func (p *Poller) pollPulls(ctx context.Context, c *github.Client, repo string) error {
	headsKey, updKey := p.key(repo, "prs"), p.key(repo, "prupd")
	heads, err := p.cfg.Valkey.HGetAll(ctx, headsKey).Result()
	if err != nil {
		return err
	}
	upd, err := p.cfg.Valkey.HGetAll(ctx, updKey).Result()
	if err != nil {
		return err
	}
	armedRaw, armed := heads["armed"]
	_, updArmed := upd["armed"]
	list, etag, unchanged, err := p.readPulls(ctx, c, repo, armed && updArmed)
	if err != nil || unchanged {
		return err
	}
	now := p.cfg.Now().UTC().Format(time.RFC3339)
	if !armed {
		err = p.armPulls(ctx, repo, headsKey, "pulls", now, list, headSHA)
	} else {
		err = p.handleHeads(ctx, repo, list, heads, armedRaw)
	}
	if err != nil {
		return err
	}
	if !updArmed {
		err = p.armPulls(ctx, repo, updKey, "reviews", now, list, updatedAt)
	} else {
		err = p.queueReviews(ctx, repo, list, upd)
	}
	if err != nil {
		return err
	}
	return p.saveETag(ctx, repo, "pulls", etag)
}

// readPulls reads the open pull requests, conditional only once armed; unchanged is a 304.
func (p *Poller) readPulls(ctx context.Context, c *github.Client, repo string, conditional bool) (list []*github.PullRequest, etag string, unchanged bool, err error) {
	var etags []string
	if conditional {
		stored, serr := p.storedETag(ctx, repo, "pulls")
		if serr != nil {
			return nil, "", false, serr
		}
		etags = []string{stored}
	}
	err = readPages(ctx, c, pagedList[*github.PullRequest]{
		path: func(page int) string {
			return fmt.Sprintf("repos/%s/pulls?state=open&sort=updated&direction=desc&per_page=100&page=%d", repo, page)
		},
		etags: etags,
		take: func(page int, got []*github.PullRequest, pageETag string, nm bool) bool {
			if page == 1 {
				etag, unchanged = pageETag, nm
			}
			list = append(list, got...)
			return !nm
		},
		gap: func() { p.log.Warn("poll_prs_gap", "repo", repo, "pages", maxPages) },
	})
	return list, etag, unchanged, err
}

// armPulls stores each pull request's value and the arm time, so history is not replayed.
func (p *Poller) armPulls(ctx context.Context, repo, key, source, now string, list []*github.PullRequest, value func(*github.PullRequest) string) error {
	fields := []any{"armed", now}
	for _, pr := range list {
		fields = append(fields, strconv.Itoa(pr.GetNumber()), value(pr))
	}
	p.log.Info("poll_armed", "repo", repo, "source", source)
	return p.cfg.Valkey.HSet(ctx, key, fields...).Err()
}

// queueReviews queues the pull requests whose updated_at moved: a review moves it.
func (p *Poller) queueReviews(ctx context.Context, repo string, list []*github.PullRequest, upd map[string]string) error {
	for i := len(list) - 1; i >= 0; i-- {
		pr := list[i]
		n, at := strconv.Itoa(pr.GetNumber()), updatedAt(pr)
		if upd[n] == at {
			continue
		}
		q, err := json.Marshal(queued{Updated: at, Labels: labelNames(pr.Labels)})
		if err != nil {
			return err
		}
		if err := p.cfg.Valkey.HSet(ctx, p.key(repo, "reviewq"), n, q).Err(); err != nil {
			return err
		}
		if err := p.cfg.Valkey.HSet(ctx, p.key(repo, "prupd"), n, at).Err(); err != nil {
			return err
		}
	}
	return nil
}

// headSHA is a pull request's head commit, what a new push changes.
func headSHA(pr *github.PullRequest) string { return pr.GetHead().GetSHA() }

// updatedAt is a pull request's updated_at to the second, what a review changes.
func updatedAt(pr *github.PullRequest) string { return pr.GetUpdatedAt().UTC().Format(time.RFC3339) }

// handleHeads hands over the opened and synchronized pull requests of list,
// least recently updated first.
func (p *Poller) handleHeads(ctx context.Context, repo string, list []*github.PullRequest, heads map[string]string, armedRaw string) error {
	armedAt, _ := time.Parse(time.RFC3339, armedRaw) // "1" before arm times were kept: zero
	for i := len(list) - 1; i >= 0; i-- {
		pr := list[i]
		n, sha := strconv.Itoa(pr.GetNumber()), headSHA(pr)
		prev, seen := heads[n]
		if prev == sha || sha == "" {
			continue
		}
		action := "opened"
		if seen {
			action = "synchronize"
		}
		if !seen && pr.CreatedAt != nil && pr.GetCreatedAt().Before(armedAt) {
			action = "" // history beyond what arming read
		}
		if ev, ok := pullEvent(repo, pr, action); ok && action != "" {
			if _, err := p.cfg.Handler.Handle(ctx, ev); err != nil {
				return err
			}
		}
		if err := p.cfg.Valkey.HSet(ctx, p.key(repo, "prs"), n, sha).Err(); err != nil {
			return err
		}
	}
	return nil
}

func labelNames(ls []*github.Label) []string {
	var out []string
	for _, l := range ls {
		out = append(out, l.GetName())
	}
	return out
}

// queued is a pull request waiting for its reviews to be read: its
// updated_at when queued (the order) and its labels then.
type queued struct {
	Updated string   `json:"u"`
	Labels  []string `json:"l,omitempty"`
}

// reviewCursor is what was handed over of one pull request's reviews: every
// review submitted before At, those of At's own second in IDs, and the
// ETags of the review list's pages.
type reviewCursor struct {
	At    time.Time `json:"at"`
	IDs   []int64   `json:"ids,omitempty"`
	ETags []string  `json:"etags,omitempty"`
}

// pollReviews reads the reviews of at most maxReviewPulls queued pull
// requests, least recently queued first, and leaves the rest queued for the
// next cycle (poll_reviews_behind). A queue survives a 304 of the list.
func (p *Poller) pollReviews(ctx context.Context, c *github.Client, repo string) error {
	qKey := p.key(repo, "reviewq")
	q, err := p.cfg.Valkey.HGetAll(ctx, qKey).Result()
	if err != nil || len(q) == 0 {
		return err
	}
	armedRaw, err := p.cfg.Valkey.HGet(ctx, p.key(repo, "prupd"), "armed").Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return err
	}
	armedAt, perr := time.Parse(time.RFC3339, armedRaw)
	if perr != nil {
		armedAt = p.cfg.Now() // never replay what cannot be placed
	}
	type item struct {
		n int
		q queued
	}
	var items []item
	for f, raw := range q {
		n, nerr := strconv.Atoi(f)
		var it queued
		if nerr != nil || n <= 0 || json.Unmarshal([]byte(raw), &it) != nil {
			p.cfg.Valkey.HDel(ctx, qKey, f)
			continue
		}
		items = append(items, item{n, it})
	}
	slices.SortFunc(items, func(a, b item) int {
		return cmp.Or(cmp.Compare(a.q.Updated, b.q.Updated), cmp.Compare(a.n, b.n))
	})
	if len(items) > maxReviewPulls {
		p.log.Warn("poll_reviews_behind", "repo", repo, "pending", len(items), "limit", maxReviewPulls)
		items = items[:maxReviewPulls]
	}
	for _, it := range items {
		err := p.pullReviews(ctx, c, repo, it.n, it.q.Labels, armedAt)
		var er *github.ErrorResponse
		if errors.As(err, &er) && er.Response != nil && er.Response.StatusCode == http.StatusNotFound {
			// Gone (or out of the token's reach): it must not hold up the queue.
			p.log.Warn("poll_reviews_not_found", "repo", repo, "number", it.n)
		} else if err != nil {
			return fmt.Errorf("#%d: %w", it.n, err)
		}
		if err := p.cfg.Valkey.HDel(ctx, qKey, strconv.Itoa(it.n)).Err(); err != nil {
			return err
		}
	}
	return nil
}

// pullReviews reads every page of pull request n's reviews, each conditional
// on its stored ETag (a 304 costs no rate limit, and a submitted review may
// land on an earlier page: a pending review keeps its place), and hands
// over, oldest first, each submitted review past the cursor as the webhook's
// pull_request_review/submitted. Before a pull request's first reading the
// cursor is the time reviews were armed.
func (p *Poller) pullReviews(ctx context.Context, c *github.Client, repo string, n int, labels []string, armedAt time.Time) error {
	cur, err := p.loadReviewCursor(ctx, repo, n, armedAt)
	if err != nil {
		return err
	}
	fresh, etags, err := p.readReviews(ctx, c, repo, n, cur)
	if err != nil {
		return err
	}
	if err := p.handReviews(ctx, repo, n, labels, fresh, &cur); err != nil {
		return err
	}
	cur.ETags = etags
	return p.saveReviewCursor(ctx, repo, n, cur)
}

// loadReviewCursor is pull request n's review cursor, else armedAt, so nothing older is replayed.
func (p *Poller) loadReviewCursor(ctx context.Context, repo string, n int, armedAt time.Time) (reviewCursor, error) {
	cur := reviewCursor{At: armedAt}
	raw, err := p.cfg.Valkey.HGet(ctx, p.key(repo, "reviews"), strconv.Itoa(n)).Result()
	switch {
	case errors.Is(err, redis.Nil):
	case err != nil:
		return cur, err
	default:
		if json.Unmarshal([]byte(raw), &cur) != nil {
			cur = reviewCursor{At: armedAt}
		}
	}
	return cur, nil
}

// saveReviewCursor stores cur as pull request n's, so the next reading resumes after it.
func (p *Poller) saveReviewCursor(ctx context.Context, repo string, n int, cur reviewCursor) error {
	b, err := json.Marshal(cur)
	if err != nil {
		return err
	}
	return p.cfg.Valkey.HSet(ctx, p.key(repo, "reviews"), strconv.Itoa(n), b).Err()
}

// readReviews returns n's submitted reviews past cur, oldest first, and the pages' new ETags.
func (p *Poller) readReviews(ctx context.Context, c *github.Client, repo string, n int, cur reviewCursor) (fresh []*github.PullRequestReview, etags []string, err error) {
	err = readPages(ctx, c, pagedList[*github.PullRequestReview]{
		path: func(page int) string {
			return fmt.Sprintf("repos/%s/pulls/%d/reviews?per_page=100&page=%d", repo, n, page)
		},
		etags: cur.ETags,
		take: func(page int, got []*github.PullRequestReview, etag string, nm bool) bool {
			etags = append(etags, etag)
			if nm {
				return page < len(cur.ETags) // a full page, unchanged: read on
			}
			for _, r := range got {
				at := r.GetSubmittedAt().Time
				if r.SubmittedAt == nil || strings.EqualFold(r.GetState(), "PENDING") ||
					at.Before(cur.At) || at.Equal(cur.At) && slices.Contains(cur.IDs, r.GetID()) {
					continue
				}
				fresh = append(fresh, r)
			}
			return true
		},
		gap: func() { p.log.Warn("poll_reviews_gap", "repo", repo, "number", n, "pages", maxPages) },
	})
	if err != nil {
		return nil, nil, err
	}
	slices.SortFunc(fresh, func(a, b *github.PullRequestReview) int {
		return cmp.Or(a.GetSubmittedAt().Compare(b.GetSubmittedAt().Time), cmp.Compare(a.GetID(), b.GetID()))
	})
	return fresh, etags, nil
}

// handReviews hands fresh over, storing cur after each review, so a failure resumes there.
func (p *Poller) handReviews(ctx context.Context, repo string, n int, labels []string, fresh []*github.PullRequestReview, cur *reviewCursor) error {
	for _, r := range fresh {
		if ev, ok := reviewEvent(repo, n, labels, r); ok {
			if _, err := p.cfg.Handler.Handle(ctx, ev); err != nil {
				return err // the cursor stays before this review
			}
		}
		if at := r.GetSubmittedAt().Time; at.After(cur.At) {
			cur.At, cur.IDs = at, []int64{r.GetID()}
		} else {
			cur.IDs = append(cur.IDs, r.GetID())
		}
		if err := p.saveReviewCursor(ctx, repo, n, *cur); err != nil {
			return err
		}
	}
	return nil
}
