// Package poller polls GitHub for the events of configured repositories, for
// hosts that cannot receive webhooks, and hands them to the same forge.Intake
// the receiver uses: the same trigger matching, permission checks and dedup.
//
// Per repository it reads the issue events (labels added, issues and pull
// requests closed), the new issue and pull request comments, and the open
// pull requests (new ones and new heads). Every list is
// a conditional request (If-None-Match with the stored ETag), so a cycle in
// which nothing changed costs no rate limit. The cursors and ETags live in
// Valkey, so a restart neither replays nor misses events; on first contact
// with a repository the cursors are set to now and nothing is enqueued.
package poller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
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

// get makes a conditional GET; notModified reports a 304.
func (p *Poller) get(ctx context.Context, c *github.Client, repo, name, path string, v any) (notModified bool, err error) {
	req, err := c.NewRequest(http.MethodGet, path, nil)
	if err != nil {
		return false, err
	}
	etag, err := p.cfg.Valkey.Get(ctx, p.key(repo, "etag:"+name)).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return false, err
	}
	if etag != "" {
		req.Header.Set("If-None-Match", etag)
	}
	resp, err := c.Do(ctx, req, v)
	if resp != nil && resp.StatusCode == http.StatusNotModified {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	if e := resp.Header.Get("ETag"); e != "" {
		if err := p.cfg.Valkey.Set(ctx, p.key(repo, "etag:"+name), e, StateTTL).Err(); err != nil {
			return false, err
		}
	}
	return false, nil
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
	// Keep every key of a repository polled successfully alive together.
	for _, k := range []string{"events", "comments", "prs", "etag:events", "etag:comments", "etag:pulls"} {
		p.cfg.Valkey.Expire(ctx, p.key(repo, k), StateTTL)
	}
	return nil
}

// pollEvents reads /issues/events, newest first, back to the cursor (the
// last event id handled), and hands labeled and closed events over oldest
// first. The cursor advances after each event, so a failure resumes there.
func (p *Poller) pollEvents(ctx context.Context, c *github.Client, repo string) error {
	cursorKey := p.key(repo, "events")
	cur, err := p.cfg.Valkey.Get(ctx, cursorKey).Int64()
	armed := err == nil
	if err != nil && !errors.Is(err, redis.Nil) {
		return err
	}
	var fresh []*github.IssueEvent
	for page := 1; page <= maxPages; page++ {
		var list []*github.IssueEvent
		path := fmt.Sprintf("repos/%s/issues/events?per_page=100&page=%d", repo, page)
		name := "events"
		if page > 1 {
			name = "" // only the first page is conditional
		}
		var nm bool
		if name != "" {
			nm, err = p.get(ctx, c, repo, name, path, &list)
		} else {
			req, rerr := c.NewRequest(http.MethodGet, path, nil)
			if rerr != nil {
				return rerr
			}
			_, err = c.Do(ctx, req, &list)
		}
		if err != nil {
			return err
		}
		if nm {
			return nil
		}
		done := len(list) < 100
		for _, e := range list {
			if e.GetID() <= cur {
				done = true
				break
			}
			fresh = append(fresh, e)
		}
		if !armed || done {
			break
		}
		if page == maxPages {
			p.log.Warn("poll_events_gap", "repo", repo, "pages", maxPages)
		}
	}
	if !armed {
		var top int64
		for _, e := range fresh {
			top = max(top, e.GetID())
		}
		p.log.Info("poll_armed", "repo", repo, "source", "events")
		return p.cfg.Valkey.Set(ctx, cursorKey, top, StateTTL).Err()
	}
	for i := len(fresh) - 1; i >= 0; i-- {
		e := fresh[i]
		if ev, ok := eventOf(repo, e); ok {
			if _, err := p.cfg.Handler.Handle(ctx, ev); err != nil {
				return err // the cursor stays before this event
			}
		}
		if err := p.cfg.Valkey.Set(ctx, cursorKey, e.GetID(), StateTTL).Err(); err != nil {
			return err
		}
	}
	return nil
}

// eventOf turns an issue event into an intake event.
func eventOf(repo string, e *github.IssueEvent) (forge.Event, bool) {
	iss := e.GetIssue()
	ev := forge.Event{
		Forge: jobs.ForgeGitHub, DeliveryID: "poll-e" + strconv.FormatInt(e.GetID(), 10),
		Repo: repo, Number: iss.GetNumber(), PullRequest: iss.IsPullRequest(),
		SenderID: e.GetActor().GetID(), SenderLogin: e.GetActor().GetLogin(),
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
	case "closed":
		ev.Action, ev.Kind = "closed", forge.KindClose
	default:
		return ev, false
	}
	return ev, ev.Number > 0 && ev.SenderID > 0
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
	var list []*github.IssueComment
	path := fmt.Sprintf("repos/%s/issues/comments?sort=created&direction=asc&per_page=100&since=%s", repo, url.QueryEscape(raw))
	nm, err := p.get(ctx, c, repo, "comments", path, &list)
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
		ev := forge.Event{
			Forge: jobs.ForgeGitHub, DeliveryID: "poll-c" + strconv.FormatInt(cm.GetID(), 10),
			Kind: forge.KindComment, Action: "created", Repo: repo,
			Number: issueNumber(cm.GetIssueURL()), PullRequest: strings.Contains(cm.GetHTMLURL(), "/pull/"),
			SenderID: cm.GetUser().GetID(), SenderLogin: cm.GetUser().GetLogin(), Comment: cm.GetBody(),
		}
		if ev.Number > 0 && ev.SenderID > 0 {
			if _, err := p.cfg.Handler.Handle(ctx, ev); err != nil {
				return err
			}
		}
		if created.After(newest) {
			newest = created
			if err := p.cfg.Valkey.Set(ctx, cursorKey, newest.UTC().Format(time.RFC3339), StateTTL).Err(); err != nil {
				return err
			}
		}
	}
	return nil
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

// pollPulls lists the open pull requests (one conditional request) and
// compares each head with the one last seen (a Valkey hash, number to head
// SHA): a pull request not seen before is "opened", a new head is
// "synchronize". Its sender is the pull request's author, the only person
// the list names. On first contact the heads are stored and nothing is
// handed over. Closes come from the issue events.
func (p *Poller) pollPulls(ctx context.Context, c *github.Client, repo string) error {
	key := p.key(repo, "prs")
	known, err := p.cfg.Valkey.HGetAll(ctx, key).Result()
	if err != nil {
		return err
	}
	armed, err := p.cfg.Valkey.Exists(ctx, key).Result()
	if err != nil {
		return err
	}
	var list []*github.PullRequest
	nm, err := p.get(ctx, c, repo, "pulls", fmt.Sprintf("repos/%s/pulls?state=open&sort=updated&direction=asc&per_page=100", repo), &list)
	if err != nil || nm {
		return err
	}
	if armed == 0 {
		fields := []any{"armed", "1"}
		for _, pr := range list {
			fields = append(fields, strconv.Itoa(pr.GetNumber()), pr.GetHead().GetSHA())
		}
		p.log.Info("poll_armed", "repo", repo, "source", "pulls")
		if err := p.cfg.Valkey.HSet(ctx, key, fields...).Err(); err != nil {
			return err
		}
		return p.cfg.Valkey.Expire(ctx, key, StateTTL).Err()
	}
	for _, pr := range list {
		n, sha := strconv.Itoa(pr.GetNumber()), pr.GetHead().GetSHA()
		prev, seen := known[n]
		if prev == sha || sha == "" {
			continue
		}
		action := "opened"
		if seen {
			action = "synchronize"
		}
		ev := forge.Event{
			Forge: jobs.ForgeGitHub, DeliveryID: "poll-pr" + n + "-" + sha[:min(7, len(sha))],
			Kind: forge.KindPullRequest, Action: action, Repo: repo, Number: pr.GetNumber(), PullRequest: true,
			SenderID: pr.GetUser().GetID(), SenderLogin: pr.GetUser().GetLogin(),
		}
		for _, l := range pr.Labels {
			ev.Labels = append(ev.Labels, l.GetName())
		}
		if _, err := p.cfg.Handler.Handle(ctx, ev); err != nil {
			return err
		}
		if err := p.cfg.Valkey.HSet(ctx, key, n, sha).Err(); err != nil {
			return err
		}
	}
	return nil
}
