package sinktext_test

import (
	"strings"
	"testing"

	"github.com/pidispatch/pidispatch/internal/sinktext"
)

// hostile are strings a job or a Valkey writer chooses to ping, link, run
// HTML, pass an option or turn text around where the host shows them.
var hostile = []string{
	"@org/everyone", "<!channel>", "<@U123>", "<http://x|y>", "--output=/tmp/x",
	"job\u202egnp.exe", "a\u2066b\u2069", "a\u200eb\u200f", "a\u061cb",
	"x` @org/everyone <img src=x onerror=alert(1)> `y", "[click](javascript:alert(1))",
	"![i](http://evil/i.png)", "line\n/close\n@all", "```", "#1 !2 &lt;b&gt;",
}

// bidi are the characters that reorder text.
const bidi = "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f\u061c"

func TestVisibleWritesEveryInvisibleCharacterOut(t *testing.T) {
	for _, r := range bidi + "\x00\x1b\x7f\u0085\u2028\u2029\u200b\ufeff" {
		got := sinktext.Visible("a" + string(r) + "b")
		if strings.ContainsRune(got, r) || !strings.Contains(got, `\u`) {
			t.Errorf("%U kept: %q", r, got)
		}
	}
	if got := sinktext.Visible("a\tb\nc\rd\xffe"); got != "a b c d\uFFFDe" {
		t.Errorf("blanks and bad bytes: %q", got)
	}
}

// A code span holds any string: it opens and closes once, with s inside.
func TestCodeHoldsAnyString(t *testing.T) {
	for _, s := range append(hostile, "`", "a``b", " x ", "") {
		got := sinktext.Code(s)
		fence := got[:strings.IndexFunc(got, func(r rune) bool { return r != '`' })]
		inner := strings.TrimSuffix(strings.TrimPrefix(got, fence), fence)
		if strings.Contains(inner, fence) {
			t.Errorf("%q: its fence %q appears inside %q", s, fence, got)
		}
		if strings.ContainsAny(inner, "\n"+bidi) {
			t.Errorf("%q: a line break or bidi control inside: %q", s, got)
		}
	}
	if got := sinktext.Code("x` @org/everyone `y"); got != "``x` @org/everyone `y``" {
		t.Errorf("got %q", got)
	}
}

// Markdown text forms nothing: no tag, link, image, code, mention,
// reference or line of its own.
func TestMarkdownFormsNothing(t *testing.T) {
	for _, s := range hostile {
		got := sinktext.Markdown(s)
		for _, bad := range []string{"<", ">", "`", "[", "](", "@org", "@all", "#1 ", "!2", "\n", "javascript:alert(1)", "--", "&lt;b"} {
			if strings.Contains(got, bad) {
				t.Errorf("%q: %q holds %q", s, got, bad)
			}
		}
		if strings.ContainsAny(got, bidi) {
			t.Errorf("%q: a bidi control: %q", s, got)
		}
	}
	if got := sinktext.Markdown("@org/everyone"); got != "@&#8203;org/everyone" {
		t.Errorf("mention: %q", got)
	}
	if got := sinktext.Markdown("see http://x"); got != "see http:&#8203;//x" {
		t.Errorf("bare URL: %q", got)
	}
}

// Slack text forms no <...> command, mention or link: & < > are escaped
// as Slack's mrkdwn asks, and nothing else changes but invisible
// characters.
func TestSlackFormsNoCommand(t *testing.T) {
	for _, s := range hostile {
		got := sinktext.Slack(s)
		if strings.ContainsAny(got, "<>"+bidi) || strings.Contains(got, "&lt;b&gt;") && !strings.Contains(got, "&amp;lt;b&amp;gt;") {
			t.Errorf("%q: %q", s, got)
		}
	}
	if got := sinktext.Slack("<!channel> & <@U123>"); got != "&lt;!channel&gt; &amp; &lt;@U123&gt;" {
		t.Errorf("got %q", got)
	}
}

// No argument starts with -, whatever the value.
func TestArgIsNeverAnOption(t *testing.T) {
	for _, s := range append(hostile, "-", "-x", "--", "\u202e--x") {
		got := sinktext.Arg(s)
		if strings.HasPrefix(got, "-") || strings.ContainsAny(got, bidi) {
			t.Errorf("%q: %q", s, got)
		}
	}
	if got := sinktext.Arg("--output=/tmp/x"); got != "_--output=/tmp/x" {
		t.Errorf("got %q", got)
	}
	if got := sinktext.Arg("job-a"); got != "job-a" {
		t.Errorf("a plain id changed: %q", got)
	}
}
