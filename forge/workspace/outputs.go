package workspace

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/pidispatch/pidispatch/forge/output"
	"github.com/pidispatch/pidispatch/forge/token"
	"github.com/pidispatch/pidispatch/jobs"
)

// The outputs the host posts for a job, in the order it posts them: each
// validated whole by forge/output in the job's context, then posted with
// the job's token, or refused and recorded with its reason. A refused output
// is posted nothing; the others still go.
var postedOutputs = []string{jobs.OutputComment, jobs.OutputReview, jobs.OutputLabels}

// unposted records every output of res as refused for reason (the job's
// changes did not go, or the job did not complete: what it wrote is not
// posted), after the worker's own refusals.
func unposted(res Result, reason string) []jobs.OutputResult {
	out := slices.Clone(res.Refused)
	for _, name := range postedOutputs {
		if _, ok := res.Outputs[name]; ok && !recorded(out, name) {
			out = append(out, jobs.OutputResult{File: name, Status: jobs.OutputRefused, Reason: reason})
		}
	}
	return out
}

func recorded(results []jobs.OutputResult, name string) bool {
	return slices.ContainsFunc(results, func(r jobs.OutputResult) bool { return r.File == name })
}

// postOutputs validates and posts each output of a completed job whose
// changes were published (pub), and records what became of each.
func (c *Checkout) postOutputs(ctx context.Context, res Result, pub Published) []jobs.OutputResult {
	out := slices.Clone(res.Refused)
	if len(res.Outputs) == 0 {
		return out
	}
	octx := c.outputContext(ctx, pub)
	for _, name := range postedOutputs {
		data, ok := res.Outputs[name]
		if !ok || recorded(out, name) {
			continue
		}
		var err error
		switch name {
		case jobs.OutputComment:
			err = c.postComment(ctx, data, octx)
		case jobs.OutputReview:
			err = c.postReview(ctx, data, octx, pub)
		case jobs.OutputLabels:
			err = c.postLabels(ctx, data, octx)
		}
		r := output.Result(name, err)
		if err != nil {
			c.log.Warn("forge_output_refused", "file", name, "reason", r.Reason)
		} else {
			c.log.Info("forge_output_posted", "file", name)
		}
		out = append(out, r)
	}
	for name := range res.Outputs {
		if !slices.Contains(postedOutputs, name) && name != jobs.OutputPullRequest && !recorded(out, name) {
			out = append(out, jobs.OutputResult{File: jobs.ClipName(name), Status: jobs.OutputRefused, Reason: "not an output the host posts"})
		}
	}
	return out
}

// errNoThread refuses an output that needs an issue or a pull request the
// job is not about.
var errNoThread = errors.New("the job is about no issue or pull request")

// outputContext is the job's context for forge/output: the forge, who
// triggered the job (the triggering comment's or review's author, or the
// label's adder), the labels the trigger allows, the pull request's diff
// (computed when asked, once) and the ids of the review comments the job
// was shown.
func (c *Checkout) outputContext(ctx context.Context, pub Published) output.Context {
	policy := c.policy()
	octx := output.Context{Forge: c.job.Job.Forge, Actor: eventActor(c.event), AllowedLabels: slices.Clone(policy.Labels)}
	if ev := c.event; ev != nil && ev.Review != nil {
		for _, n := range ev.Review.Comments {
			octx.ReviewCommentIDs = append(octx.ReviewCommentIDs, n.ID)
		}
	}
	if !c.job.Job.PullRequest {
		return octx // no diff: no inline comment
	}
	var diff diffLines
	octx.InDiff = func(path string, line int) bool {
		if diff == nil {
			diff = c.pullDiff(ctx, c.pullHeadAfter(pub))
		}
		return diff.has(path, line)
	}
	return octx
}

// pullHeadAfter is the head of the job's pull request once the job's
// changes went: the commit the job pushed to it, the commit it was
// prepared on when it pushed nothing to it, or "" when the job was not on
// the pull request's own head (the forge's head ref is then read).
func (c *Checkout) pullHeadAfter(pub Published) string {
	switch {
	case c.own && pub.PushedCommit != "":
		return pub.PushedCommit
	case c.own || (!c.resumed && c.pull.Ref != ""):
		return c.base
	}
	return ""
}

// eventActor is who triggered the job, from its event: the triggering
// comment's or review's author, or the label's adder; "" when none did.
func eventActor(ev *jobs.Event) string {
	switch {
	case ev == nil:
		return ""
	case ev.Comment != nil:
		return ev.Comment.Author.Login
	case ev.Review != nil:
		return ev.Review.Author.Login
	case ev.Label != nil:
		return ev.Label.AddedBy.Login
	}
	return ""
}

// postComment posts comment.md as one comment on the job's issue or pull
// request.
func (c *Checkout) postComment(ctx context.Context, data []byte, octx output.Context) error {
	j := c.job.Job
	body, err := output.ParseComment(data, octx)
	if err != nil {
		return err
	}
	if j.Number == 0 {
		return errNoThread
	}
	return c.post(ctx, "comment", func(tok token.Token) error {
		_, err := c.forge.API.Comment(ctx, tok, j.Repo, j.Number, j.PullRequest, body)
		return err
	})
}

// postReview posts review.json on the job's pull request: each reply in
// the thread of the review comment it answers, then its body and inline
// comments as one review (GitLab: a note and a discussion each on the
// diff).
func (c *Checkout) postReview(ctx context.Context, data []byte, octx output.Context, pub Published) error {
	j := c.job.Job
	rv, err := output.ParseReview(data, octx)
	if err != nil {
		return err
	}
	if j.Number == 0 || !j.PullRequest {
		return errors.New("the job is not about a pull request")
	}
	notes := map[int64]jobs.EventReviewNote{}
	if c.event != nil && c.event.Review != nil {
		for _, n := range c.event.Review.Comments {
			notes[n.ID] = n
		}
	}
	for i, r := range rv.Replies {
		note := notes[r.To]
		reply := ReviewReply{To: r.To, Path: note.Path, Line: note.Line, Body: r.Body}
		if err := c.post(ctx, "reply", func(tok token.Token) error {
			return c.forge.API.ReplyToReviewComment(ctx, tok, j.Repo, j.Number, reply)
		}); err != nil {
			return fmt.Errorf("%w (after %d of %d replies)", err, i, len(rv.Replies))
		}
	}
	if rv.Body == "" && len(rv.Comments) == 0 {
		return nil
	}
	review := NewReview{Commit: c.pullHeadAfter(pub), Body: rv.Body}
	if review.Commit == "" {
		review.Commit = c.pull.SHA
	}
	for _, cm := range rv.Comments {
		review.Comments = append(review.Comments, InlineComment{Path: cm.Path, Line: cm.Line, Body: cm.Body})
	}
	return c.post(ctx, "review", func(tok token.Token) error {
		return c.forge.API.CreateReview(ctx, tok, j.Repo, j.Number, review)
	})
}

// postLabels adds and removes labels.json's labels on the job's issue or
// pull request.
func (c *Checkout) postLabels(ctx context.Context, data []byte, octx output.Context) error {
	j := c.job.Job
	ls, err := output.ParseLabels(data, octx)
	if err != nil {
		return err
	}
	if j.Number == 0 {
		return errNoThread
	}
	return c.post(ctx, "labels", func(tok token.Token) error {
		return c.forge.API.EditLabels(ctx, tok, j.Repo, j.Number, j.PullRequest, ls.Add, ls.Remove)
	})
}

// post runs one forge write with the job's token (c.call), naming it in
// the error the record keeps.
func (c *Checkout) post(ctx context.Context, what string, op func(token.Token) error) error {
	if err := c.call(ctx, op); err != nil {
		return fmt.Errorf("the forge did not take the %s: %w", what, err)
	}
	return nil
}
