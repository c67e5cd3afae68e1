package workspace

import (
	"fmt"
	"strings"

	"github.com/pidispatch/pidispatch/jobs"
)

// The texts the host writes. They name the job, the flow, the outcome and
// the numbers of the run; never a token, a path on the host or the job's
// own words.

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

func pullTitle(j Job) string { return fmt.Sprintf("pi: %s for %s", orDash(j.Job.Flow), subject(j)) }

func pullBody(j Job) string {
	var b strings.Builder
	if j.Job.Number > 0 {
		fmt.Fprintf(&b, "Refs #%d\n\n", j.Job.Number)
	}
	fmt.Fprintf(&b, "Proposed by pidispatch job `%s` (flow `%s`). Review before merging: it is never merged automatically.\n", j.ID, orDash(j.Job.Flow))
	return b.String()
}

func startComment(j Job) string {
	return fmt.Sprintf("pidispatch started job `%s` (flow `%s`).", j.ID, orDash(j.Job.Flow))
}

func finalComment(j Job, res Result, pub Published) string {
	var b strings.Builder
	fmt.Fprintf(&b, "pidispatch job `%s` %s.", j.ID, res.Outcome)
	if pub.PullRequestURL != "" {
		fmt.Fprintf(&b, " Pull request: %s", pub.PullRequestURL)
	} else {
		b.WriteString(" It changed nothing.")
	}
	b.WriteString(numbers(res))
	return b.String()
}

func failureComment(j Job, res Result) string {
	word := "failed"
	if res.Outcome == jobs.OutcomePolicy {
		word = "was stopped"
	}
	return fmt.Sprintf("pidispatch job `%s` %s: `%s`.%s", j.ID, word, res.Reason, numbers(res))
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
