package output

import (
	"errors"
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/pidispatch/pidispatch/jobs"
)

// Context is what the host knows of the job whose outputs it validates.
type Context struct {
	// Forge is the forge the outputs go to.
	Forge jobs.Forge
	// Actor is the login of who triggered the job: the only one a text may
	// mention.
	Actor string
	// AllowedLabels is the trigger's publish.labels allow-list.
	AllowedLabels []string
	// InDiff reports whether line of path is in the pull request's diff;
	// nil allows no inline comment.
	InDiff func(path string, line int) bool
	// ReviewCommentIDs are the review comments a reply may answer.
	ReviewCommentIDs []int64
	// Limits bound the outputs; a zero field takes DefaultLimits' value.
	Limits Limits
}

// Limits bound what a job may post.
type Limits struct {
	// CommentBytes bounds comment.md, and a review's own body.
	CommentBytes int
	// ReviewItems bounds a review's replies and inline comments, in all.
	ReviewItems int
	// ReviewItemBytes bounds the body of one reply or inline comment.
	ReviewItemBytes int
	// ReviewBytes bounds review.json as a whole.
	ReviewBytes int
	// Labels bounds the labels to add, and those to remove.
	Labels int
}

// DefaultLimits are small: a comment of 16 KiB; a review of 40 items in
// all (say 20 replies and 20 inline comments) of 4 KiB each, 64 KiB in
// all; 10 labels to add and 10 to remove.
func DefaultLimits() Limits {
	return Limits{
		CommentBytes:    16 << 10,
		ReviewItems:     40,
		ReviewItemBytes: 4 << 10,
		ReviewBytes:     64 << 10,
		Labels:          10,
	}
}

// withDefaults fills the zero (or negative) fields of l.
func (l Limits) withDefaults() Limits {
	d := DefaultLimits()
	pick := func(v, def int) int {
		if v <= 0 {
			return def
		}
		return v
	}
	return Limits{
		CommentBytes:    pick(l.CommentBytes, d.CommentBytes),
		ReviewItems:     pick(l.ReviewItems, d.ReviewItems),
		ReviewItemBytes: pick(l.ReviewItemBytes, d.ReviewItemBytes),
		ReviewBytes:     pick(l.ReviewBytes, d.ReviewBytes),
		Labels:          pick(l.Labels, d.Labels),
	}
}

// MaxPostBytes bounds one text as posted, once neutralised (GitHub takes
// at most 65,536 characters in a comment).
const MaxPostBytes = 64 << 10

// MaxLabelsBytes bounds labels.json.
const MaxLabelsBytes = 16 << 10

// Review is review.json, validated: replies to the job's review comments
// and inline comments on the pull request's diff, each body neutralised.
type Review struct {
	// Body is the review's own text ("" when it has none).
	Body     string
	Replies  []Reply
	Comments []InlineComment
}

// Reply answers review comment To.
type Reply struct {
	To   int64
	Body string
}

// InlineComment is a comment on new-side line Line of Path.
type InlineComment struct {
	Path string
	Line int
	Body string
}

// Labels is labels.json, validated: labels to add and to remove, each in
// the trigger's allow-list.
type Labels struct {
	Add, Remove []string
}

// Refusal is an output file refused as a whole: File names it, Reason is
// the rule it broke, on one line. It wraps jobs.ErrBadOutput.
type Refusal struct {
	File   string
	Reason string
}

func (r *Refusal) Error() string { return r.File + ": " + jobs.ErrBadOutput.Error() + ": " + r.Reason }

// Unwrap makes errors.Is(err, jobs.ErrBadOutput) hold.
func (r *Refusal) Unwrap() error { return jobs.ErrBadOutput }

func refuse(file, format string, args ...any) error {
	return &Refusal{File: file, Reason: oneLine(fmt.Sprintf(format, args...), maxReason)}
}

// maxReason bounds a refusal's reason.
const maxReason = 240

// Result is what became of output file: posted when err is nil, else
// refused for err's reason (a Refusal's own, or err as one line).
func Result(file string, err error) jobs.OutputResult {
	if err == nil {
		return jobs.OutputResult{File: file, Status: jobs.OutputPosted}
	}
	reason := err.Error()
	if r, ok := errors.AsType[*Refusal](err); ok {
		reason = r.Reason
	}
	return jobs.OutputResult{File: file, Status: jobs.OutputRefused, Reason: oneLine(reason, maxReason)}
}

// oneLine makes s one line of at most max bytes: control and format
// characters become spaces, runs of blanks one space.
func oneLine(s string, max int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	s = strings.Map(func(r rune) rune {
		if badRune(r) {
			return ' '
		}
		return r
	}, s)
	s = strings.Join(strings.Fields(s), " ")
	if len(s) <= max {
		return s
	}
	cut := max - 3
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
}

// quote quotes what the agent wrote for a reason: escaped, and clipped.
func quote(s string) string {
	const max = 64
	if len(s) > max {
		cut := max
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		return strconv.Quote(s[:cut]) + "..."
	}
	return strconv.Quote(s)
}

// badRune reports a character no output may hold: a control character
// other than newline and tab, a format character (zero-width, bidi), a
// line or paragraph separator.
func badRune(r rune) bool {
	if r == '\n' || r == '\t' {
		return false
	}
	return unicode.IsControl(r) || unicode.Is(unicode.Cf, r) || r == '\u2028' || r == '\u2029'
}

// checkText folds CRLF line ends and answers the text, or why it is
// refused.
func checkText(data []byte) (string, string) {
	if !utf8.Valid(data) {
		return "", "not UTF-8"
	}
	return checkString(strings.ReplaceAll(string(data), "\r\n", "\n"))
}

// checkString is checkText for text already decoded (from JSON).
func checkString(s string) (string, string) {
	if !utf8.ValidString(s) {
		return "", "not UTF-8"
	}
	for i, r := range s {
		if !badRune(r) {
			continue
		}
		what := "a control character"
		if !unicode.IsControl(r) {
			what = "a format character (zero-width, bidi or line separator)"
		}
		return "", fmt.Sprintf("%s (U+%04X) at byte %d", what, r, i)
	}
	return s, ""
}

// ParseComment validates comment.md and answers its body, neutralised
// (Sanitize).
func ParseComment(data []byte, c Context) (string, error) {
	l := c.Limits.withDefaults()
	if len(data) > l.CommentBytes {
		return "", refuse(jobs.OutputComment, "larger than %d bytes", l.CommentBytes)
	}
	text, why := checkText(data)
	if why != "" {
		return "", refuse(jobs.OutputComment, "%s", why)
	}
	if strings.TrimSpace(text) == "" {
		return "", refuse(jobs.OutputComment, "empty")
	}
	body := Sanitize(text, c)
	if len(body) > MaxPostBytes {
		return "", refuse(jobs.OutputComment, "longer than %d bytes once neutralised", MaxPostBytes)
	}
	return body, nil
}

// ParseReview validates review.json:
//
//	{"body": "...",
//	 "replies": [{"to": <review comment id>, "body": "..."}],
//	 "comments": [{"path": "a/b.go", "line": 12, "body": "..."}]}
//
// Every key is optional, but a review must hold something. Each reply
// answers one of c.ReviewCommentIDs, each inline comment is on a line of
// the diff (c.InDiff), each body is non-empty and is neutralised.
func ParseReview(data []byte, c Context) (Review, error) {
	const file = jobs.OutputReview
	l := c.Limits.withDefaults()
	if len(data) > l.ReviewBytes {
		return Review{}, refuse(file, "larger than %d bytes", l.ReviewBytes)
	}
	if !utf8.Valid(data) {
		return Review{}, refuse(file, "not UTF-8")
	}
	var (
		rv    Review
		items int
	)
	countItem := func() error {
		items++
		if items > l.ReviewItems {
			return fmt.Errorf("more than %d replies and inline comments in all", l.ReviewItems)
		}
		return nil
	}
	r := newJSONReader(data)
	err := r.object("the review", func(key string) error {
		switch key {
		case "body":
			s, err := r.str("body")
			rv.Body = s
			return err
		case "replies":
			return r.array("replies", func(i int) error {
				if err := countItem(); err != nil {
					return err
				}
				var rp Reply
				where := fmt.Sprintf("reply %d", i+1)
				err := r.object(where, func(key string) error {
					var err error
					switch key {
					case "to":
						rp.To, err = r.int64(where + ": to")
					case "body":
						rp.Body, err = r.str(where + ": body")
					default:
						err = fmt.Errorf("unknown key %s in %s", quote(key), where)
					}
					return err
				})
				rv.Replies = append(rv.Replies, rp)
				return err
			})
		case "comments":
			return r.array("comments", func(i int) error {
				if err := countItem(); err != nil {
					return err
				}
				var cm InlineComment
				where := fmt.Sprintf("comment %d", i+1)
				err := r.object(where, func(key string) error {
					var err error
					switch key {
					case "path":
						cm.Path, err = r.str(where + ": path")
					case "line":
						var n int64
						n, err = r.int64(where + ": line")
						if err == nil && (n < 1 || n > 1<<30) {
							err = fmt.Errorf("%s: line must be between 1 and %d", where, 1<<30)
						}
						cm.Line = int(n)
					case "body":
						cm.Body, err = r.str(where + ": body")
					default:
						err = fmt.Errorf("unknown key %s in %s", quote(key), where)
					}
					return err
				})
				rv.Comments = append(rv.Comments, cm)
				return err
			})
		}
		return fmt.Errorf("unknown key %s in the review", quote(key))
	})
	if err == nil {
		err = r.end()
	}
	if err != nil {
		return Review{}, refuse(file, "%s", err)
	}
	if rv.Body == "" && len(rv.Replies) == 0 && len(rv.Comments) == 0 {
		return Review{}, refuse(file, "nothing to post: no body, reply or inline comment")
	}
	if rv.Body != "" {
		body, err := checkBody("body", rv.Body, l.CommentBytes, c)
		if err != nil {
			return Review{}, refuse(file, "%s", err)
		}
		rv.Body = body
	}
	ids := make(map[int64]bool, len(c.ReviewCommentIDs))
	for _, id := range c.ReviewCommentIDs {
		ids[id] = true
	}
	for i := range rv.Replies {
		rp := &rv.Replies[i]
		where := fmt.Sprintf("reply %d", i+1)
		if !ids[rp.To] {
			if rp.To == 0 {
				return Review{}, refuse(file, "%s: no \"to\" (the review comment it answers)", where)
			}
			return Review{}, refuse(file, "%s: answers %d, not one of the review comments this job was shown", where, rp.To)
		}
		body, err := checkBody(where, rp.Body, l.ReviewItemBytes, c)
		if err != nil {
			return Review{}, refuse(file, "%s", err)
		}
		rp.Body = body
	}
	for i := range rv.Comments {
		cm := &rv.Comments[i]
		where := fmt.Sprintf("comment %d", i+1)
		if why := checkPath(cm.Path); why != "" {
			return Review{}, refuse(file, "%s: path %s", where, why)
		}
		if cm.Line == 0 {
			return Review{}, refuse(file, "%s: no \"line\"", where)
		}
		if c.InDiff == nil {
			return Review{}, refuse(file, "%s: no inline comment is allowed for this job (no diff)", where)
		}
		if !c.InDiff(cm.Path, cm.Line) {
			return Review{}, refuse(file, "%s: line %d of %s is not in the pull request's diff", where, cm.Line, quote(cm.Path))
		}
		body, err := checkBody(where, cm.Body, l.ReviewItemBytes, c)
		if err != nil {
			return Review{}, refuse(file, "%s", err)
		}
		cm.Body = body
	}
	return rv, nil
}

// checkBody validates one body of a review and neutralises it.
func checkBody(where, s string, max int, c Context) (string, error) {
	if strings.TrimSpace(s) == "" {
		return "", fmt.Errorf("%s: empty body", where)
	}
	if len(s) > max {
		return "", fmt.Errorf("%s: body larger than %d bytes", where, max)
	}
	text, why := checkString(strings.ReplaceAll(s, "\r\n", "\n"))
	if why != "" {
		return "", fmt.Errorf("%s: body: %s", where, why)
	}
	body := Sanitize(text, c)
	if len(body) > MaxPostBytes {
		return "", fmt.Errorf("%s: body longer than %d bytes once neutralised", where, MaxPostBytes)
	}
	return body, nil
}

// checkPath answers why p is no path of a file in the repository ("" when
// it is one): it must be relative, clean and plain text.
func checkPath(p string) string {
	switch {
	case p == "":
		return "missing"
	case len(p) > 4096:
		return "longer than 4096 bytes"
	}
	if _, why := checkString(p); why != "" || strings.ContainsAny(p, "\n\t\\") {
		return quote(p) + " holds a control or format character, a tab or a backslash"
	}
	if path.IsAbs(p) || path.Clean(p) != p || p == "." || p == ".." || strings.HasPrefix(p, "../") {
		return quote(p) + " is not a clean relative path"
	}
	return ""
}

// ParseLabels validates labels.json: {"add": [...], "remove": [...]}.
// Every label is in c.AllowedLabels (exact, case-sensitive), none is named
// twice, and there are at most Limits.Labels of each.
func ParseLabels(data []byte, c Context) (Labels, error) {
	const file = jobs.OutputLabels
	l := c.Limits.withDefaults()
	if len(data) > MaxLabelsBytes {
		return Labels{}, refuse(file, "larger than %d bytes", MaxLabelsBytes)
	}
	if !utf8.Valid(data) {
		return Labels{}, refuse(file, "not UTF-8")
	}
	var ls Labels
	r := newJSONReader(data)
	list := func(key string, into *[]string) error {
		return r.array(key, func(i int) error {
			if i >= l.Labels {
				return fmt.Errorf("more than %d labels to %s", l.Labels, key)
			}
			s, err := r.str(fmt.Sprintf("%s[%d]", key, i))
			*into = append(*into, s)
			return err
		})
	}
	err := r.object("labels.json", func(key string) error {
		switch key {
		case "add":
			return list("add", &ls.Add)
		case "remove":
			return list("remove", &ls.Remove)
		}
		return fmt.Errorf("unknown key %s", quote(key))
	})
	if err == nil {
		err = r.end()
	}
	if err != nil {
		return Labels{}, refuse(file, "%s", err)
	}
	if len(ls.Add) == 0 && len(ls.Remove) == 0 {
		return Labels{}, refuse(file, "nothing to do: no label to add or remove")
	}
	seen := map[string]string{}
	for _, group := range []struct {
		verb   string
		labels []string
	}{{"add", ls.Add}, {"remove", ls.Remove}} {
		for _, label := range group.labels {
			if !slices.Contains(c.AllowedLabels, label) {
				return Labels{}, refuse(file, "label %s (to %s) is not in the trigger's publish.labels", quote(label), group.verb)
			}
			if prev, ok := seen[label]; ok {
				if prev == group.verb {
					return Labels{}, refuse(file, "label %s is listed twice to %s", quote(label), group.verb)
				}
				return Labels{}, refuse(file, "label %s is both added and removed", quote(label))
			}
			seen[label] = group.verb
		}
	}
	return ls, nil
}
