package workspace

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/pidispatch/pidispatch/forge"
	"github.com/pidispatch/pidispatch/internal/sinktext"
	"github.com/pidispatch/pidispatch/jobs"
)

// The texts the host writes. They name the job, the flow, the outcome and
// the numbers of the run; never a token or a path on the host. A string a
// job or its producer chose reaches Markdown only through sinktext. The job's own
// words appear only in its pull request's title and body (Result.PullRequest,
// validated by the worker, the body sanitised) and in its outputs (posted
// apart, outputs.go), and the issue's title, from the forge, only in the pull
// request's title.

func subject(j Job) string {
	if j.Job.Number > 0 {
		return fmt.Sprintf("#%d", j.Job.Number)
	}
	return j.Job.Repo
}

func commitMessage(j Job) string {
	var b strings.Builder
	fmt.Fprintf(&b, "pi: %s for %s\n\nJob %s", orDash(j.Job.Flow), subject(j), j.ID)
	if j.Job.Number > 0 {
		fmt.Fprintf(&b, "\nRefs #%d", j.Job.Number)
	}
	return b.String() + "\n"
}

// maxPullTitle is the most bytes of a pull request's title the host makes
// from an issue's: a title is a line, not the issue.
const maxPullTitle = 120

// pullTitle says what was done: the job's own title when it wrote one (the
// worker validated it), else the issue's it worked on, else the repository.
// Never the trigger's name, which says nothing of the change.
func pullTitle(j Job, ev *jobs.Event, res Result) string {
	if res.PullRequest != nil && strings.TrimSpace(res.PullRequest.Title) != "" {
		return res.PullRequest.Title
	}
	if ev != nil && ev.Issue != nil {
		if t := oneLine(ev.Issue.Title, maxPullTitle); t != "" {
			return "pi: " + t
		}
	}
	return "pi: " + j.Job.Repo + " changes"
}

// oneLine is s (clipped text) on one line, its spaces folded, cut to at
// most limit bytes at a rune boundary (with an ellipsis).
func oneLine(s string, limit int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) <= limit {
		return s
	}
	cut := limit - len("…")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return strings.TrimSpace(s[:cut]) + "…"
}

// pullBody is the job's own body when it wrote one, the reference to the
// job's issue, then the host's footer: the job, its cost and its turns.
func pullBody(j Job, res Result) string {
	var b strings.Builder
	if res.PullRequest != nil && strings.TrimSpace(res.PullRequest.Body) != "" {
		b.WriteString(strings.TrimSpace(res.PullRequest.Body) + "\n\n")
	}
	if ref := issueRef(j); ref != "" {
		b.WriteString("Refs " + ref + "\n\n")
	}
	// The id and the flow are the producer's: each in a code span it cannot
	// close (sinktext.Code), so no mention, link or HTML forms from them.
	fmt.Fprintf(&b, "---\n%s%s (flow %s; %s). Review before merging: it is never merged automatically.\n",
		strings.TrimSuffix(footerMarker, "`"), sinktext.Code(j.ID), sinktext.Code(orDash(j.Job.Flow)), footerNumbers(res))
	return b.String()
}

// footerMarker starts the host's footer of every pull request it opens:
// on GitLab, where each job's project token is a bot user of its own, a
// merge request by a project bot that carries it is the project's own.
// The job's id follows it in a code span, whose fence starts with this
// backtick.
const footerMarker = forge.OwnFooterMarker

// footerNumbers are the run's cost and turns, each "unknown" when the run
// did not say.
func footerNumbers(res Result) string {
	cost, turns := "cost unknown", "turns unknown"
	if res.Dollars > 0 {
		cost = fmt.Sprintf("cost $%.2f", res.Dollars)
	}
	if res.Turns > 0 {
		turns = fmt.Sprintf("%d turns", res.Turns)
	}
	return cost + ", " + turns
}

// issueRef is how the forge links the job's issue: #N, or !N for a GitLab
// merge request (#N there names an issue); "" without one.
func issueRef(j Job) string {
	switch {
	case j.Job.Number == 0:
		return ""
	case j.Job.PullRequest && j.Job.Forge == jobs.ForgeGitLab:
		return fmt.Sprintf("!%d", j.Job.Number)
	}
	return fmt.Sprintf("#%d", j.Job.Number)
}

func numbers(res Result) string {
	var parts []string
	if res.Turns > 0 {
		parts = append(parts, fmt.Sprintf("%d turns", res.Turns))
	}
	if res.Dollars > 0 {
		parts = append(parts, fmt.Sprintf("$%.2f", res.Dollars))
	}
	if len(parts) == 0 {
		return ""
	}
	return " (" + strings.Join(parts, ", ") + ")"
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
