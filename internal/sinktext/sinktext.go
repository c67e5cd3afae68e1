// Package sinktext writes a string a job or a Valkey writer controls (a job
// id, a flow, a file name, a refusal's reason, a host name) for the one
// place it reaches, so that it is shown there as text and never read as
// syntax: Markdown on a forge (a comment, a pull request's body), Slack's
// mrkdwn (a webhook's message), and a program's argv (the failure hook).
//
// Every writer first makes the string visible: a control character, a
// format character (bidi controls such as U+202E, zero-width characters)
// or a line or paragraph separator is written \uXXXX, so nothing reorders,
// hides or breaks the text around it; bytes that are not UTF-8 become
// U+FFFD.
package sinktext

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// zwsp is a zero-width space written as an entity: after an @ (or # !) no
// forge reads a mention (or a reference), and the reader still sees @name.
// forge/output neutralises a job's Markdown the same way.
const zwsp = "&#8203;"

// Visible is s with its invisible characters written out: a tab, a line
// feed or a carriage return as a space, any other control or format
// character (category Cc, Cf) and U+2028, U+2029 as \uXXXX.
func Visible(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if !strings.ContainsFunc(s, hidden) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		switch {
		case r == '\t' || r == '\n' || r == '\r':
			b.WriteByte(' ')
		case hidden(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

func hidden(r rune) bool {
	return unicode.IsControl(r) || unicode.Is(unicode.Cf, r) || r == '\u2028' || r == '\u2029'
}

// Code writes s as a Markdown code span that shows s as it is: its fence is
// longer than any run of backticks in s, so s cannot close it, and nothing
// inside a code span is a mention, a link or HTML on any forge.
func Code(s string) string {
	s = Visible(s)
	if s == "" {
		return "` `"
	}
	fence := strings.Repeat("`", longestRun(s, '`')+1)
	pad := ""
	if s[0] == '`' || s[len(s)-1] == '`' || s[0] == ' ' && s[len(s)-1] == ' ' {
		pad = " " // Markdown strips one space each side when both have one
	}
	return fence + pad + s + pad + fence
}

// markdownEntity is what each ASCII character that Markdown or a forge may
// read as syntax is written as: an entity, which every forge shows as the
// character and none reads as emphasis, code, a link, an image, a table
// cell, a heading or HTML.
var markdownEntity = map[byte]string{
	'\\': "&#92;", '`': "&#96;", '*': "&#42;", '_': "&#95;", '[': "&#91;", ']': "&#93;",
	'(': "&#40;", ')': "&#41;", '|': "&#124;", '~': "&#126;", '<': "&lt;", '>': "&gt;",
	'&': "&amp;", '$': "&#36;", '%': "&#37;",
}

// Markdown writes s as inline Markdown text, on one line, shown as it is:
// no emphasis, code, link, image or HTML forms from it; an @ (a mention of
// a user, a team such as @org/everyone, @all), a # or ! before a name or a
// number (a reference) gets a zero-width space after it so no forge pings
// or links anyone; a scheme's :// gets one after its colon so no bare URL
// is linked; a / or a list or heading marker that starts it is escaped.
func Markdown(s string) string {
	s = Visible(s)
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		next := byte(0)
		if i+1 < len(s) {
			next = s[i+1]
		}
		switch {
		case markdownEntity[c] != "":
			b.WriteString(markdownEntity[c])
		case c == '@' && isWord(next):
			b.WriteString("@" + zwsp)
		case (c == '#' || c == '!') && isWord(next):
			fmt.Fprintf(&b, "&#%d;%s", c, zwsp)
		case c == '!' || c == '#':
			fmt.Fprintf(&b, "&#%d;", c)
		case c == ':' && strings.HasPrefix(s[i+1:], "//"):
			b.WriteString(":" + zwsp)
		case i == 0 && strings.IndexByte("/-+=>0123456789", c) >= 0:
			fmt.Fprintf(&b, "&#%d;", c)
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// Slack writes s for Slack's mrkdwn (a webhook's "text"): its & < > escaped
// as Slack asks, so no <!channel>, <!here>, <@U123> or <http://x|y> forms
// from it, its invisible characters made visible.
func Slack(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(Visible(s))
}

// Arg writes s as one argument of a program's command line: a value that
// starts with - gets _ before it, so no option parser (getopt, Go's flag,
// argparse) takes --output=/tmp/x for an option; its invisible characters
// are made visible.
func Arg(s string) string {
	s = Visible(s)
	if strings.HasPrefix(s, "-") {
		return "_" + s
	}
	return s
}

func isWord(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c >= utf8.RuneSelf
}

func longestRun(s string, c byte) int {
	best, n := 0, 0
	for i := 0; i < len(s); i++ {
		if s[i] == c {
			n++
			best = max(best, n)
		} else {
			n = 0
		}
	}
	return best
}
