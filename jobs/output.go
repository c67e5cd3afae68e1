package jobs

import (
	"errors"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Limits of what a job may write to /job/out for the host to use.
const (
	// MaxPullRequestBytes bounds /job/out/pr.md.
	MaxPullRequestBytes = 64 << 10
	// MaxPullRequestTitle bounds its first line, the pull request's title.
	MaxPullRequestTitle = 256
)

// The files a job may write to /job/out for the host to carry out, each
// validated as a whole before anything is posted (docs/forges.md).
const (
	OutputPullRequest = "pr.md"       // the pull request's title and body
	OutputComment     = "comment.md"  // one comment on the issue or pull request
	OutputReview      = "review.json" // replies to review comments, inline comments
	OutputLabels      = "labels.json" // labels to add or remove
)

// Outputs are the files a job may write, in the order the host reads them.
var Outputs = []string{OutputPullRequest, OutputComment, OutputReview, OutputLabels}

// MaxOutputBytes bounds what the host reads of any one output file.
const MaxOutputBytes = 64 << 10

// OutputResult is what the host did with one output file, for the record:
// Status is OutputPosted or OutputRefused (with the Reason, one line).
type OutputResult struct {
	File   string `json:"file"`
	Status string `json:"status"`
	Reason string `json:"reason,omitempty"`
}

// Output statuses.
const (
	OutputPosted  = "posted"
	OutputRefused = "refused"
)

// PullRequestText is the title and body a job wrote for its pull request.
type PullRequestText struct {
	Title, Body string
}

// ErrBadOutput marks an output file the host refuses as a whole.
var ErrBadOutput = errors.New("refused")

// ParsePullRequestText reads /job/out/pr.md: the first line is the title,
// the rest the body. It is refused as a whole when it is not UTF-8, holds a
// control character other than newline and tab (a carriage return of a CRLF
// line end is dropped), a format character (zero-width, bidi), an empty or
// overlong title, or is longer than MaxPullRequestBytes: nothing the job
// writes is ever used unvalidated.
func ParsePullRequestText(data []byte) (PullRequestText, error) {
	if len(data) > MaxPullRequestBytes {
		return PullRequestText{}, fmt.Errorf("pr.md: %w: larger than %d bytes", ErrBadOutput, MaxPullRequestBytes)
	}
	if !utf8.Valid(data) {
		return PullRequestText{}, fmt.Errorf("pr.md: %w: not UTF-8", ErrBadOutput)
	}
	text := strings.ReplaceAll(string(data), "\r\n", "\n")
	if i := strings.IndexFunc(text, func(r rune) bool {
		return r != '\n' && r != '\t' && (unicode.IsControl(r) || unicode.Is(unicode.Cf, r) || r == '\u2028' || r == '\u2029')
	}); i >= 0 {
		return PullRequestText{}, fmt.Errorf("pr.md: %w: a control or format character at byte %d", ErrBadOutput, i)
	}
	title, body, _ := strings.Cut(strings.TrimLeft(text, "\n"), "\n")
	title = strings.TrimSpace(strings.TrimLeft(title, "# "))
	switch {
	case title == "":
		return PullRequestText{}, fmt.Errorf("pr.md: %w: the first line (the title) is empty", ErrBadOutput)
	case len(title) > MaxPullRequestTitle:
		return PullRequestText{}, fmt.Errorf("pr.md: %w: the title is longer than %d bytes", ErrBadOutput, MaxPullRequestTitle)
	}
	return PullRequestText{Title: title, Body: strings.TrimSpace(body)}, nil
}
