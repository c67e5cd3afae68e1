package workspace

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/pidispatch/pidispatch/forge/token"
	"github.com/pidispatch/pidispatch/jobs"
)

// TriggerInfo is what the host's own trigger configuration says of a job's
// trigger: the trigger section of its event, and a comment trigger's phrase.
type TriggerInfo struct {
	Event  jobs.EventTrigger
	Phrase string
}

// maxPermissionLookups bounds the permission lookups of one job's event: a
// thread of many authors costs the forge no more than this; the rest are
// "unknown".
const maxPermissionLookups = 25

// Event is what the job was asked, read from the forge with the job's token
// when its workspace was prepared. Every text in it is clipped, and the
// whole fits in jobs.MaxEventBytes. A job with no issue (Number 0) has an
// event with no Issue.
func (c *Checkout) Event() *jobs.Event { return c.event }

// eventBuilder reads one job's event, part by part.
type eventBuilder struct {
	c      *Checkout
	ev     *jobs.Event
	phrase string
	// people are the forge's answers for each clipped login, for the
	// permission lookups (GitLab's needs the numeric id).
	people map[string]Person
}

// buildEvent reads the job's event. Every part the job names must be read:
// a job is never run on half of what it was asked.
func (c *Checkout) buildEvent(ctx context.Context) error {
	j := c.job.Job
	info := c.triggerInfo()
	b := &eventBuilder{c: c, phrase: info.Phrase, people: map[string]Person{}, ev: &jobs.Event{
		Version: jobs.EventVersion,
		Forge:   j.Forge,
		Repository: jobs.EventRepository{FullName: j.Repo, URL: jobs.ClipName(c.repo.WebURL),
			DefaultBranch: jobs.ClipName(c.repo.DefaultBranch)},
		Trigger: info.Event,
	}}
	if j.Number > 0 {
		for _, step := range []func(context.Context) error{b.issue, b.pullRequest, b.comment, b.comments, b.review, b.label} {
			if err := step(ctx); err != nil {
				return fmt.Errorf("event: %w", err)
			}
		}
	}
	b.permissions(ctx)
	fitEvent(b.ev)
	c.event = b.ev
	return nil
}

func (c *Checkout) triggerInfo() TriggerInfo {
	if c.m.cfg.Trigger == nil {
		return TriggerInfo{}
	}
	return c.m.cfg.Trigger(c.job.Job)
}

// read runs one forge read with the job's token (c.call: retried while the
// forge is unavailable), naming what it read in its error.
func (b *eventBuilder) read(ctx context.Context, what string, op func(token.Token) error) error {
	if err := b.c.call(ctx, op); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// person is who as the event shows them; their permission is filled later.
func (b *eventBuilder) person(who Person) jobs.EventPerson {
	login := jobs.ClipName(who.Login)
	if login != "" {
		b.people[login] = who
	}
	return jobs.EventPerson{Login: login}
}

func (b *eventBuilder) issue(ctx context.Context) error {
	j := b.c.job.Job
	var is Issue
	if err := b.read(ctx, "issue", func(tok token.Token) (err error) {
		is, err = b.c.forge.API.Issue(ctx, tok, j.Repo, j.Number, j.PullRequest)
		return err
	}); err != nil {
		return err
	}
	out := &jobs.EventIssue{
		Number: j.Number,
		Title:  jobs.Clip(is.Title, jobs.MaxEventTitleBytes),
		Body:   jobs.Clip(is.Body, jobs.MaxEventBodyBytes),
		State:  jobs.ClipName(is.State),
		URL:    jobs.ClipName(is.URL),
		Author: b.person(is.Author),
	}
	for _, l := range is.Labels[:min(len(is.Labels), jobs.MaxEventLabels)] {
		out.Labels = append(out.Labels, jobs.ClipName(l))
	}
	b.ev.Issue = out
	return nil
}

// pullRequest adds what the clone learnt of the pull request (its branches
// and head, the very commit the workspace holds) and its changed files.
func (b *eventBuilder) pullRequest(ctx context.Context) error {
	j := b.c.job.Job
	if !j.PullRequest {
		return nil
	}
	var files []jobs.EventFile
	var total int
	if err := b.read(ctx, "changed files", func(tok token.Token) (err error) {
		files, total, err = b.c.forge.API.ChangedFiles(ctx, tok, j.Repo, j.Number, jobs.MaxEventFiles)
		return err
	}); err != nil {
		return err
	}
	pr := &jobs.EventPullRequest{Base: jobs.ClipName(b.c.pull.Base), Head: jobs.ClipName(b.c.pull.Head),
		HeadSHA: jobs.ClipName(b.c.pull.SHA)}
	for _, f := range files[:min(len(files), jobs.MaxEventFiles)] {
		pr.Files = append(pr.Files, jobs.EventFile{Path: jobs.ClipName(f.Path), Status: jobs.ClipName(f.Status),
			Additions: f.Additions, Deletions: f.Deletions})
	}
	pr.FilesOmitted = max(total-len(pr.Files), 0)
	b.ev.PullRequest = pr
	return nil
}

// comment adds the comment that triggered the job, its trigger phrase taken
// out: what is left is what the person asked.
func (b *eventBuilder) comment(ctx context.Context) error {
	j := b.c.job.Job
	if j.CommentID == 0 {
		return nil
	}
	var cm IssueComment
	if err := b.read(ctx, "triggering comment", func(tok token.Token) (err error) {
		cm, err = b.c.forge.API.GetComment(ctx, tok, j.Repo, j.Number, j.PullRequest, j.CommentID)
		return err
	}); err != nil {
		return err
	}
	out := b.eventComment(cm)
	out.Body = jobs.Clip(strings.TrimSpace(removePhrase(cm.Body, b.phrase)), jobs.MaxEventCommentBytes)
	b.ev.Comment = &out
	return nil
}

// removePhrase takes the first occurrence of phrase out of body, as the
// trigger matched it (a plain substring).
func removePhrase(body, phrase string) string {
	if phrase == "" {
		return body
	}
	return strings.Replace(body, phrase, "", 1)
}

func (b *eventBuilder) eventComment(cm IssueComment) jobs.EventComment {
	out := jobs.EventComment{ID: cm.ID, Author: b.person(cm.Author), Body: jobs.Clip(cm.Body, jobs.MaxEventCommentBytes)}
	if !cm.Created.IsZero() {
		out.CreatedAt = cm.Created.UTC().Format(time.RFC3339)
	}
	return out
}

// comments adds the thread's last comments, oldest first. The triggering
// comment is shown once, as Comment, so it is left out here (one more is
// read in its place) and not counted as omitted.
func (b *eventBuilder) comments(ctx context.Context) error {
	j := b.c.job.Job
	n := b.c.m.cfg.MaxComments
	want := n
	if j.CommentID != 0 {
		want++
	}
	var list []IssueComment
	var total int
	if err := b.read(ctx, "comments", func(tok token.Token) (err error) {
		list, total, err = b.c.forge.API.LastComments(ctx, tok, j.Repo, j.Number, j.PullRequest, want)
		return err
	}); err != nil {
		return err
	}
	list = list[max(len(list)-want, 0):]
	kept := make([]IssueComment, 0, len(list))
	for _, cm := range list {
		if j.CommentID == 0 || cm.ID != j.CommentID {
			kept = append(kept, cm)
		}
	}
	kept = kept[max(len(kept)-n, 0):]
	for _, cm := range kept {
		b.ev.Comments = append(b.ev.Comments, b.eventComment(cm))
	}
	shown := len(kept)
	if j.CommentID != 0 {
		shown++ // the triggering comment, shown as Comment
	}
	b.ev.CommentsOmitted = max(total-shown, 0)
	return nil
}

// review adds the review that triggered the job and its inline comments.
func (b *eventBuilder) review(ctx context.Context) error {
	j := b.c.job.Job
	if j.ReviewID == 0 || !j.PullRequest {
		return nil
	}
	var rv *Review
	if err := b.read(ctx, "review", func(tok token.Token) (err error) {
		rv, err = b.c.forge.API.Review(ctx, tok, j.Repo, j.Number, j.ReviewID, jobs.MaxEventReviewNotes)
		return err
	}); err != nil || rv == nil {
		return err
	}
	out := &jobs.EventReview{ID: rv.ID, State: jobs.ClipName(rv.State), Author: b.person(rv.Author),
		Body: jobs.Clip(rv.Body, jobs.MaxEventBodyBytes)}
	for _, nt := range rv.Notes[:min(len(rv.Notes), jobs.MaxEventReviewNotes)] {
		out.Comments = append(out.Comments, jobs.EventReviewNote{ID: nt.ID, Path: jobs.ClipName(nt.Path), Line: nt.Line,
			Author: b.person(nt.Author), Body: jobs.Clip(nt.Body, jobs.MaxEventCommentBytes)})
	}
	b.ev.Review = out
	return nil
}

// label adds the label whose adding triggered the job, and who added it
// when the forge says.
func (b *eventBuilder) label(ctx context.Context) error {
	j := b.c.job.Job
	if j.Label == "" {
		return nil
	}
	var who Person
	if err := b.read(ctx, "label events", func(tok token.Token) (err error) {
		who, err = b.c.forge.API.LabelAddedBy(ctx, tok, j.Repo, j.Number, j.PullRequest, j.Label)
		return err
	}); err != nil {
		return err
	}
	b.ev.Label = &jobs.EventLabel{Name: jobs.ClipName(j.Label), AddedBy: b.person(who)}
	return nil
}

// eventPeople are the event's people, most telling first: the lookups the
// bound leaves go to who asked, then to who wrote the issue, then to the
// thread from its newest comment back.
func eventPeople(ev *jobs.Event) []*jobs.EventPerson {
	var out []*jobs.EventPerson
	if ev.Comment != nil {
		out = append(out, &ev.Comment.Author)
	}
	if ev.Label != nil {
		out = append(out, &ev.Label.AddedBy)
	}
	if ev.Review != nil {
		out = append(out, &ev.Review.Author)
	}
	if ev.Issue != nil {
		out = append(out, &ev.Issue.Author)
	}
	for i := len(ev.Comments) - 1; i >= 0; i-- {
		out = append(out, &ev.Comments[i].Author)
	}
	if ev.Review != nil {
		for i := range ev.Review.Comments {
			out = append(out, &ev.Review.Comments[i].Author)
		}
	}
	return out
}

// permissions fills each person's permission, asking the forge once per
// login and at most maxPermissionLookups times; a lookup that fails, or one
// past the bound, is "unknown", never the job's failure.
func (b *eventBuilder) permissions(ctx context.Context) {
	known := map[string]string{}
	lookups := 0
	for _, p := range eventPeople(b.ev) {
		if p.Login == "" {
			p.Permission = jobs.PermissionUnknown
			continue
		}
		perm, ok := known[p.Login]
		if !ok {
			perm = jobs.PermissionUnknown
			if lookups < maxPermissionLookups {
				lookups++
				perm = b.lookup(ctx, b.people[p.Login])
			}
			known[p.Login] = perm
		}
		p.Permission = perm
	}
}

// permissionWords are the answers a forge's permission may be shown as.
var permissionWords = map[string]bool{"admin": true, "maintain": true, "write": true, "triage": true, "read": true, jobs.PermissionNone: true}

// lookup asks once, without retrying: a forge slow to answer costs the job
// one try per person, not a backoff each.
func (b *eventBuilder) lookup(ctx context.Context, who Person) string {
	tok, err := b.c.token(ctx)
	if err != nil {
		return jobs.PermissionUnknown
	}
	perm, err := b.c.forge.API.Permission(ctx, tok, b.c.job.Job.Repo, who)
	if err != nil || !permissionWords[perm] {
		b.c.log.Warn("forge_event_permission_unknown", "err", err)
		return jobs.PermissionUnknown
	}
	return perm
}

// fitEvent makes ev's JSON fit in jobs.MaxEventBytes: the oldest comments go
// first, then the last files, then the last inline review comments, each
// counted where the schema counts them; past that, the longest text is cut.
// The size is measured as json.Marshal writes it, HTML escapes included, so
// no encoding of the event is larger.
func fitEvent(ev *jobs.Event) {
	for size := encodedSize(ev); size > jobs.MaxEventBytes; size = encodedSize(ev) {
		if !shrinkEvent(ev, size-jobs.MaxEventBytes) {
			return
		}
	}
}

// shrinkEvent drops about excess bytes of the least telling part left, and
// reports false when nothing is left to drop.
func shrinkEvent(ev *jobs.Event, excess int) bool {
	switch {
	case len(ev.Comments) > 0:
		n := dropCount(ev.Comments, excess, false)
		ev.Comments, ev.CommentsOmitted = ev.Comments[n:], ev.CommentsOmitted+n
	case ev.PullRequest != nil && len(ev.PullRequest.Files) > 0:
		pr := ev.PullRequest
		n := dropCount(pr.Files, excess, true)
		pr.Files, pr.FilesOmitted = pr.Files[:len(pr.Files)-n], pr.FilesOmitted+n
	case ev.Review != nil && len(ev.Review.Comments) > 0:
		rv := ev.Review
		rv.Comments = rv.Comments[:len(rv.Comments)-dropCount(rv.Comments, excess, true)]
	default:
		return halveLongestText(ev)
	}
	return true
}

// dropCount is how many items, from the front (or the back), add up to
// more than excess bytes: at least one.
func dropCount[T any](items []T, excess int, fromBack bool) int {
	freed, n := 0, 0
	for n < len(items) && freed <= excess {
		i := n
		if fromBack {
			i = len(items) - 1 - n
		}
		freed += encodedSize(items[i]) + 1
		n++
	}
	return n
}

// minCutText is the shortest a text is cut to when the event's lists are
// gone and it still does not fit.
const minCutText = 1 << 10

// halveLongestText cuts the longest of the event's long texts to half.
func halveLongestText(ev *jobs.Event) bool {
	var texts []*string
	if ev.Issue != nil {
		texts = append(texts, &ev.Issue.Body)
	}
	if ev.Review != nil {
		texts = append(texts, &ev.Review.Body)
	}
	if ev.Comment != nil {
		texts = append(texts, &ev.Comment.Body)
	}
	var longest *string
	for _, t := range texts {
		if len(*t) > minCutText && (longest == nil || len(*t) > len(*longest)) {
			longest = t
		}
	}
	if longest == nil {
		return false
	}
	*longest = jobs.Clip(*longest, max(len(*longest)/2, minCutText))
	return true
}

func encodedSize(v any) int {
	data, err := json.Marshal(v)
	if err != nil {
		return 0
	}
	return len(data)
}
