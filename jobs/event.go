package jobs

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// EventVersion is the version of the /job/event.json schema this build
// writes (docs/forges.md). A field is only ever added within a version.
const EventVersion = 1

// Limits of an event: every text the forge returns is cut to its limit
// (Clip), and every list to its count, before the event is written or shown
// to the agent, so a hostile issue cannot make a job's prompt (and its bill)
// grow without bound.
const (
	MaxEventTitleBytes   = 1 << 10  // an issue's or pull request's title
	MaxEventBodyBytes    = 32 << 10 // an issue's or pull request's body, a review's body
	MaxEventCommentBytes = 8 << 10  // one comment, one inline review comment
	MaxEventComments     = 100      // the most PI_EVENT_MAX_COMMENTS may ask for
	DefaultEventComments = 20       // the last comments of the thread, by default
	MaxEventFiles        = 300      // a pull request's changed files listed
	MaxEventReviewNotes  = 50       // a review's inline comments
	MaxEventLabels       = 50       // an issue's labels
	MaxEventNameBytes    = 256      // a label, a login, a branch, a path
	// MaxEventBytes bounds the whole event as written: past it the oldest
	// comments are dropped first, then the files.
	MaxEventBytes = 256 << 10
)

// Truncated is the marker Clip leaves where it cut a text.
const Truncated = "[truncated]"

// Event is what a forge job was asked, read from the forge on the host with
// the job's own scoped token when its workspace is cloned: /job/event.json
// holds it, and the prompt shows it to the agent as data, each part with
// who wrote it and with what permission. Every text in it was written by
// someone on the forge and is untrusted.
type Event struct {
	Version    int             `json:"version"`
	Forge      Forge           `json:"forge"`
	Repository EventRepository `json:"repository"`
	Trigger    EventTrigger    `json:"trigger"`
	// Issue is the issue, or the pull request's conversation, the job is about.
	Issue *EventIssue `json:"issue,omitempty"`
	// PullRequest is set when the job is about a pull (merge) request.
	PullRequest *EventPullRequest `json:"pullRequest,omitempty"`
	// Comment is the comment that triggered the job, its trigger phrase
	// removed.
	Comment *EventComment `json:"comment,omitempty"`
	// Comments are the last comments of the thread, oldest first (at most
	// PI_EVENT_MAX_COMMENTS); CommentsOmitted counts the older ones left out.
	Comments        []EventComment `json:"comments,omitempty"`
	CommentsOmitted int            `json:"commentsOmitted,omitempty"`
	// Review is the review that triggered the job, with its inline comments.
	Review *EventReview `json:"review,omitempty"`
	// Label is the label whose adding triggered the job.
	Label *EventLabel `json:"label,omitempty"`
}

// EventRepository names the repository.
type EventRepository struct {
	FullName      string `json:"fullName"`
	URL           string `json:"url,omitempty"`
	DefaultBranch string `json:"defaultBranch,omitempty"`
}

// EventTrigger is the host's own trigger that matched: its name, its type
// and the operator's instructions from the host's triggers file.
type EventTrigger struct {
	Name         string `json:"name,omitempty"`
	Type         string `json:"type,omitempty"`
	Action       string `json:"action,omitempty"`
	Instructions string `json:"instructions,omitempty"`
}

// EventPerson is someone on the forge: their login and their permission on
// the repository as the forge answered it (admin, maintain, write, triage,
// read, none), or "unknown" when it could not be read.
type EventPerson struct {
	Login      string `json:"login"`
	Permission string `json:"permission"`
}

// Permission words of an EventPerson beyond the forges' own.
const (
	PermissionNone    = "none"
	PermissionUnknown = "unknown"
)

// EventIssue is an issue, or the conversation of a pull request.
type EventIssue struct {
	Number int         `json:"number"`
	Title  string      `json:"title"`
	Body   string      `json:"body"`
	State  string      `json:"state,omitempty"`
	URL    string      `json:"url,omitempty"`
	Author EventPerson `json:"author"`
	Labels []string    `json:"labels,omitempty"`
}

// EventPullRequest is what an issue does not say of a pull request.
type EventPullRequest struct {
	Base    string `json:"base"`
	Head    string `json:"head"`
	HeadSHA string `json:"headSha,omitempty"`
	// Files are the changed files (at most MaxEventFiles); FilesOmitted
	// counts the rest.
	Files        []EventFile `json:"files,omitempty"`
	FilesOmitted int         `json:"filesOmitted,omitempty"`
}

// EventFile is one changed file of a pull request.
type EventFile struct {
	Path      string `json:"path"`
	Status    string `json:"status"`
	Additions int    `json:"additions"`
	Deletions int    `json:"deletions"`
}

// EventComment is one comment of the thread.
type EventComment struct {
	ID        int64       `json:"id,omitempty"`
	Author    EventPerson `json:"author"`
	Body      string      `json:"body"`
	CreatedAt string      `json:"createdAt,omitempty"`
}

// EventReview is a submitted review and its inline comments.
type EventReview struct {
	ID       int64             `json:"id,omitempty"`
	State    string            `json:"state,omitempty"`
	Author   EventPerson       `json:"author"`
	Body     string            `json:"body"`
	Comments []EventReviewNote `json:"comments,omitempty"`
}

// EventReviewNote is an inline comment on a line of the pull request's diff.
type EventReviewNote struct {
	ID     int64       `json:"id,omitempty"`
	Path   string      `json:"path"`
	Line   int         `json:"line"`
	Author EventPerson `json:"author"`
	Body   string      `json:"body"`
}

// EventLabel is the label that was added and who added it.
type EventLabel struct {
	Name    string      `json:"name"`
	AddedBy EventPerson `json:"addedBy"`
}

// Clip makes s safe to show as untrusted text within max bytes: invalid
// UTF-8 is replaced, control characters other than newline and tab and
// every format character (zero-width joiners, bidi overrides) are removed,
// and a text longer than max is cut at a rune boundary and ends with
// Truncated on a line of its own.
func Clip(s string, max int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	s = strings.Map(func(r rune) rune {
		if r == '\n' || r == '\t' {
			return r
		}
		if unicode.IsControl(r) || unicode.Is(unicode.Cf, r) || r == '\u2028' || r == '\u2029' {
			return -1
		}
		return r
	}, s)
	if len(s) <= max {
		return s
	}
	cut := max - len(Truncated) - 1
	if cut < 0 {
		cut = 0
	}
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "\n" + Truncated
}

// ClipName is Clip for a one-line name (a login, a label, a branch, a
// path): newlines and tabs go too, and it is cut at MaxEventNameBytes.
func ClipName(s string) string {
	s = strings.Map(func(r rune) rune {
		if r == '\n' || r == '\t' {
			return ' '
		}
		return r
	}, s)
	return Clip(s, MaxEventNameBytes)
}
