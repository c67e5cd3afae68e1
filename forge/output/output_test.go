package output

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/pidispatch/pidispatch/jobs"
)

// gitlab is the context of a GitLab job triggered by alice on a pull
// request whose diff holds lines 10 to 20 of a/b.go, shown review comments
// 101 and 102.
func gitlab() Context {
	return Context{
		Forge:            jobs.ForgeGitLab,
		Actor:            "alice",
		AllowedLabels:    []string{"bug", "needs-review", "Bug"},
		ReviewCommentIDs: []int64{101, 102},
		InDiff: func(path string, line int) bool {
			return path == "a/b.go" && line >= 10 && line <= 20
		},
	}
}

// refused checks that err refuses file for a reason holding want, as one
// line that wraps jobs.ErrBadOutput.
func refused(t *testing.T, err error, file, want string) {
	t.Helper()
	if err == nil {
		t.Fatalf("accepted; want refused: %s", want)
	}
	if !errors.Is(err, jobs.ErrBadOutput) {
		t.Errorf("%v does not wrap jobs.ErrBadOutput", err)
	}
	msg := err.Error()
	if strings.ContainsAny(msg, "\n\r") {
		t.Errorf("reason is not one line: %q", msg)
	}
	if !strings.HasPrefix(msg, file+": refused: ") {
		t.Errorf("reason %q does not name %s", msg, file)
	}
	if !strings.Contains(msg, want) {
		t.Errorf("reason %q; want it to say %q", msg, want)
	}
}

func TestDefaultLimits(t *testing.T) {
	d := DefaultLimits()
	if d.CommentBytes != 16<<10 || d.ReviewItems != 40 || d.ReviewItemBytes != 4<<10 || d.ReviewBytes != 64<<10 || d.Labels != 10 {
		t.Errorf("DefaultLimits() = %+v", d)
	}
	if got := (Limits{}).withDefaults(); got != d {
		t.Errorf("zero Limits take %+v; want the defaults", got)
	}
	if got := (Limits{CommentBytes: 5, Labels: -1}).withDefaults(); got.CommentBytes != 5 || got.Labels != 10 || got.ReviewItems != 40 {
		t.Errorf("partial Limits take %+v", got)
	}
}

func TestParseCommentRefuses(t *testing.T) {
	for _, tc := range []struct {
		name, in, want string
	}{
		{"invalid UTF-8", "hi \xff there", "not UTF-8"},
		{"NUL", "a\x00b", "a control character (U+0000)"},
		{"escape", "\x1b[31mred", "a control character (U+001B)"},
		{"lone CR", "a\rb", "a control character (U+000D)"},
		{"bidi override", "x \u202Ecod.exe", "a format character"},
		{"bidi isolate", "x \u2066y\u2069", "a format character"},
		{"zero-width space", "@\u200Bbob", "a format character"},
		{"line separator", "a\u2028b", "a format character"},
		{"BOM", "\uFEFFhello", "a format character"},
		{"empty", " \n\t\n", "empty"},
		{"over the limit", strings.Repeat("a", 16<<10+1), "larger than 16384 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseComment([]byte(tc.in), gitlab())
			refused(t, err, jobs.OutputComment, tc.want)
		})
	}
	t.Run("grows past MaxPostBytes", func(t *testing.T) {
		c := gitlab()
		c.Limits.CommentBytes = 32 << 10
		_, err := ParseComment(bytes.Repeat([]byte("<"), 32<<10), c)
		refused(t, err, jobs.OutputComment, "once neutralised")
	})
}

// A huge comment is refused for its size before a byte of it is read: its
// invalid UTF-8 and control characters are never reported, and it takes
// no time.
func TestParseCommentHugeIsRefusedUnread(t *testing.T) {
	data := bytes.Repeat([]byte("\xff\x00@everyone "), 50<<20/12)
	start := time.Now()
	_, err := ParseComment(data, gitlab())
	refused(t, err, jobs.OutputComment, "larger than 16384 bytes")
	if d := time.Since(start); d > 50*time.Millisecond {
		t.Errorf("refusing 50 MiB took %v: it was read", d)
	}
}

func TestParseCommentCRLF(t *testing.T) {
	body, err := ParseComment([]byte("one\r\n/merge\r\ntwo\r\n"), gitlab())
	if err != nil {
		t.Fatal(err)
	}
	if body != "one\n\\/merge\ntwo\n" {
		t.Errorf("body = %q", body)
	}
}

// A GitLab comment that tries every way to act as the bot posts as text.
func TestParseCommentGitLabQuickActions(t *testing.T) {
	in := "Done.\n/merge\n/approve\n  /close\n\t/label ~bug\n```\n/unlabel ~x\n```\n~~~\n/assign @bob\n~~~\n"
	body, err := ParseComment([]byte(in), gitlab())
	if err != nil {
		t.Fatal(err)
	}
	want := "Done.\n\\/merge\n\\/approve\n  \\/close\n\t\\/label ~bug\n```\n /unlabel ~x\n```\n~~~\n /assign @bob\n~~~\n"
	if body != want {
		t.Errorf("body =\n%s\nwant\n%s", body, want)
	}
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, "/") {
			t.Errorf("line %q would run as a quick action", l)
		}
	}
}

func TestParseCommentKeepsUsableContent(t *testing.T) {
	in := "Thanks @alice, see [the docs](https://example.com/docs?a=1&b=2) and [here](../README.md#setup).\n" +
		"<details>\n<summary>Log</summary>\n\n```go\nx := a<b // @x\n/merge\n```\n\n</details>\n\nRun `@x /merge`.\n"
	body, err := ParseComment([]byte(in), gitlab())
	if err != nil {
		t.Fatal(err)
	}
	want := "Thanks @alice, see [the docs](https://example.com/docs?a=1&b=2) and [here](../README.md#setup).\n" +
		"<details>\n<summary>Log</summary>\n\n```go\nx := a<b // @x\n /merge\n```\n\n</details>\n\nRun `@x /merge`.\n"
	if body != want {
		t.Errorf("body =\n%s\nwant\n%s", body, want)
	}
}

// review builds a review.json.
func review(body string, replies, comments []string) string {
	return fmt.Sprintf(`{"body": %q, "replies": [%s], "comments": [%s]}`, body, strings.Join(replies, ","), strings.Join(comments, ","))
}

func TestParseReviewRefuses(t *testing.T) {
	manyComments := make([]string, 10000)
	for i := range manyComments {
		manyComments[i] = `{"path":"a/b.go","line":12,"body":"x"}`
	}
	noDiff := gitlab()
	noDiff.InDiff = nil
	for _, tc := range []struct {
		name, in string
		c        *Context
		want     string
	}{
		{"not JSON", `{"body": "x"`, nil, "not valid JSON"},
		{"not an object", `["x"]`, nil, "the review is not a JSON object"},
		{"two JSON values", `{"body": "x"} {"body": "y"}`, nil, "more than one JSON value"},
		{"text after", `{"body": "x"} trailing`, nil, "more than one JSON value"},
		{"unknown key", `{"body": "x", "approve": true}`, nil, `unknown key "approve" in the review`},
		{"key in another case", `{"Body": "x"}`, nil, `unknown key "Body"`},
		{"unknown key in a reply", `{"replies": [{"to": 101, "body": "x", "state": "APPROVED"}]}`, nil, `unknown key "state" in reply 1`},
		{"unknown key in a comment", `{"comments": [{"path": "a/b.go", "line": 12, "body": "x", "side": "LEFT"}]}`, nil, `unknown key "side" in comment 1`},
		{"key twice", `{"body": "x", "body": "y"}`, nil, `key "body" is given twice`},
		{"null body", `{"replies": [{"to": 101, "body": null}]}`, nil, "reply 1: body is not a string"},
		{"id as string", `{"replies": [{"to": "101", "body": "x"}]}`, nil, "reply 1: to is not a number"},
		{"fractional id", `{"replies": [{"to": 101.5, "body": "x"}]}`, nil, "reply 1: to is not a whole number"},
		{"invalid UTF-8", "{\"body\": \"\xff\"}", nil, "not UTF-8"},
		{"nothing", `{}`, nil, "nothing to post"},
		{"reply to an unknown comment", review("", []string{`{"to": 999, "body": "x"}`}, nil), nil, "reply 1: answers 999, not one of the review comments"},
		{"reply to nothing", review("", []string{`{"body": "x"}`}, nil), nil, `reply 1: no "to"`},
		{"empty reply", review("", []string{`{"to": 101, "body": "  \n"}`}, nil), nil, "reply 1: empty body"},
		{"reply too long", review("", []string{fmt.Sprintf(`{"to": 101, "body": %q}`, strings.Repeat("x", 4<<10+1))}, nil), nil, "reply 1: body larger than 4096 bytes"},
		{"bidi in a reply", review("", []string{`{"to": 101, "body": "ok \u202e"}`}, nil), nil, "reply 1: body: a format character (zero-width, bidi or line separator) (U+202E)"},
		{"control in a comment", review("", nil, []string{`{"path": "a/b.go", "line": 12, "body": "a\u0007b"}`}), nil, "comment 1: body: a control character (U+0007)"},
		{"comment outside the diff", review("", nil, []string{`{"path": "a/b.go", "line": 99, "body": "x"}`}), nil, `comment 1: line 99 of "a/b.go" is not in the pull request's diff`},
		{"comment on a file outside the diff", review("", nil, []string{`{"path": "c.go", "line": 12, "body": "x"}`}), nil, `comment 1: line 12 of "c.go" is not in the pull request's diff`},
		{"comment without a diff", review("", nil, []string{`{"path": "a/b.go", "line": 12, "body": "x"}`}), &noDiff, "comment 1: no inline comment is allowed for this job"},
		{"path out of the repository", review("", nil, []string{`{"path": "../etc/passwd", "line": 12, "body": "x"}`}), nil, "comment 1: path"},
		{"absolute path", review("", nil, []string{`{"path": "/a/b.go", "line": 12, "body": "x"}`}), nil, "is not a clean relative path"},
		{"line 0", review("", nil, []string{`{"path": "a/b.go", "line": 0, "body": "x"}`}), nil, "comment 1: line must be between 1 and"},
		{"no line", review("", nil, []string{`{"path": "a/b.go", "body": "x"}`}), nil, `comment 1: no "line"`},
		{"empty comment", review("", nil, []string{`{"path": "a/b.go", "line": 12, "body": ""}`}), nil, "comment 1: empty body"},
		{"41 items", review("", nil, manyComments[:41]), nil, "more than 40 replies and inline comments in all"},
		{"10000 inline comments", review("", nil, manyComments), nil, "larger than 65536 bytes"},
		{"review body over its limit", review(strings.Repeat("x", 16<<10+1), nil, nil), nil, "body: body larger than 16384 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := gitlab()
			if tc.c != nil {
				c = *tc.c
			}
			_, err := ParseReview([]byte(tc.in), c)
			refused(t, err, jobs.OutputReview, tc.want)
		})
	}
	t.Run("10000 inline comments within the byte limit", func(t *testing.T) {
		c := gitlab()
		c.Limits.ReviewBytes = 1 << 20
		_, err := ParseReview([]byte(review("", nil, manyComments)), c)
		refused(t, err, jobs.OutputReview, "more than 40 replies and inline comments in all")
	})
}

func TestParseReview(t *testing.T) {
	in := `{"body": "Two findings. cc @bob",
	 "replies": [{"to": 101, "body": "Fixed, thanks @alice.\n/approve\n /merge"},
	             {"to": 102, "body": "` + "```" + `\n/merge\n` + "```" + `"}],
	 "comments": [{"path": "a/b.go", "line": 12, "body": "[why](javascript:alert(1)) <img src=x onerror=alert(1)>"},
	              {"path": "a/b.go", "line": 20, "body": "` + "```" + `\n/close\n@x\n` + "```" + `"}]}`
	rv, err := ParseReview([]byte(in), gitlab())
	if err != nil {
		t.Fatal(err)
	}
	want := Review{
		Body:    "Two findings. cc @&#8203;bob",
		Replies: []Reply{{To: 101, Body: "Fixed, thanks @alice.\n\\/approve\n \\/merge"}, {To: 102, Body: "```\n /merge\n```"}},
		Comments: []InlineComment{
			{Path: "a/b.go", Line: 12, Body: "why `javascript:alert(1)` &lt;img src=x onerror=alert(1)>"},
			{Path: "a/b.go", Line: 20, Body: "```\n /close\n@x\n```"},
		},
	}
	if fmt.Sprintf("%#v", rv) != fmt.Sprintf("%#v", want) {
		t.Errorf("review =\n%#v\nwant\n%#v", rv, want)
	}
}

func TestParseLabels(t *testing.T) {
	ls, err := ParseLabels([]byte(`{"add": ["bug", "Bug"], "remove": ["needs-review"]}`), gitlab())
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(ls) != "{[bug Bug] [needs-review]}" {
		t.Errorf("labels = %v", ls)
	}
	if _, err := ParseLabels([]byte(`{"remove": ["bug"]}`), gitlab()); err != nil {
		t.Errorf("only removing: %v", err)
	}
}

func TestParseLabelsRefuses(t *testing.T) {
	eleven := `{"add": ["bug","bug","bug","bug","bug","bug","bug","bug","bug","bug","bug"]}`
	none := gitlab()
	none.AllowedLabels = nil
	for _, tc := range []struct {
		name, in string
		c        *Context
		want     string
	}{
		{"not allowed", `{"add": ["approved"]}`, nil, `label "approved" (to add) is not in the trigger's publish.labels`},
		{"case differs", `{"add": ["BUG"]}`, nil, `label "BUG" (to add) is not in the trigger's publish.labels`},
		{"not allowed to remove", `{"remove": ["security"]}`, nil, `label "security" (to remove) is not in`},
		{"no allow-list", `{"add": ["bug"]}`, &none, `label "bug" (to add) is not in`},
		{"twice", `{"add": ["bug", "bug"]}`, nil, `label "bug" is listed twice to add`},
		{"added and removed", `{"add": ["bug"], "remove": ["bug"]}`, nil, `label "bug" is both added and removed`},
		{"too many", eleven, nil, "more than 10 labels to add"},
		{"unknown key", `{"add": ["bug"], "set": ["x"]}`, nil, `unknown key "set"`},
		{"key twice", `{"add": ["bug"], "add": ["x"]}`, nil, `key "add" is given twice`},
		{"two values", `{"add": ["bug"]}{"add": ["x"]}`, nil, "more than one JSON value"},
		{"not a list", `{"add": "bug"}`, nil, "add is not a JSON array"},
		{"not a string", `{"add": [1]}`, nil, "add[0] is not a string"},
		{"nothing", `{"add": []}`, nil, "nothing to do"},
		{"newline in a name", `{"add": ["bug\nfix"]}`, nil, `label "bug\nfix" (to add)`},
		{"too large", `{"add": ["` + strings.Repeat("x", MaxLabelsBytes) + `"]}`, nil, "larger than 16384 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := gitlab()
			if tc.c != nil {
				c = *tc.c
			}
			_, err := ParseLabels([]byte(tc.in), c)
			refused(t, err, jobs.OutputLabels, tc.want)
		})
	}
}

func TestResult(t *testing.T) {
	if r := Result(jobs.OutputComment, nil); r != (jobs.OutputResult{File: "comment.md", Status: jobs.OutputPosted}) {
		t.Errorf("Result(nil) = %+v", r)
	}
	_, err := ParseLabels([]byte(`{"add": ["x"]}`), gitlab())
	r := Result(jobs.OutputLabels, err)
	if r.Status != jobs.OutputRefused || r.File != "labels.json" || r.Reason != `label "x" (to add) is not in the trigger's publish.labels` {
		t.Errorf("Result = %+v", r)
	}
	r = Result(jobs.OutputComment, errors.New("the forge said\nno"))
	if r.Reason != "the forge said no" {
		t.Errorf("Result of another error = %+v", r)
	}
}
