package output

import (
	"errors"
	"fmt"
	"html"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/pidispatch/pidispatch/jobs"
)

// FuzzSanitize checks, on every input, what Sanitize promises of its
// output, read by invariants (a reader of its own): no raw tag but the
// allowed ones (so no <script), no mention of anyone but the actor, no
// line a GitLab quick action, no link or bare URL to a scheme other than
// http(s); and Sanitize(Sanitize(x)) == Sanitize(x).
func FuzzSanitize(f *testing.F) {
	for _, seed := range fuzzSeeds(f) {
		f.Add(seed, "alice")
	}
	f.Fuzz(func(t *testing.T, in, actor string) {
		c := Context{Actor: actor}
		out := Sanitize(in, c)
		if again := Sanitize(out, c); again != out {
			t.Fatalf("not idempotent:\n in  %q\n out %q\n again %q", in, out, again)
		}
		if problems := invariants(out, actor); len(problems) > 0 {
			t.Fatalf("Sanitize(%q) = %q:\n%s", in, out, strings.Join(problems, "\n"))
		}
	})
}

// FuzzParse runs the three parsers on every input: each refuses it with one
// line that names its file and wraps jobs.ErrBadOutput, or answers texts
// that Sanitize left as they are, and labels from the allow-list.
func FuzzParse(f *testing.F) {
	for _, seed := range []string{
		`{"body": "x", "replies": [{"to": 101, "body": "/merge @bob"}], "comments": [{"path": "a/b.go", "line": 12, "body": "[x](javascript:y)"}]}`,
		`{"add": ["bug"], "remove": ["needs-review"]}`,
		"Thanks @alice\n/approve\n<script>",
		`{"body": "x"} {}`,
	} {
		f.Add([]byte(seed))
	}
	c := gitlab()
	f.Fuzz(func(t *testing.T, data []byte) {
		checkErr := func(file string, err error) {
			if !errors.Is(err, jobs.ErrBadOutput) || !strings.HasPrefix(err.Error(), file+": refused: ") || strings.ContainsAny(err.Error(), "\r\n") {
				t.Fatalf("%s: error %q", file, err)
			}
		}
		checkText := func(file, s string) {
			if Sanitize(s, c) != s {
				t.Fatalf("%s: a text that Sanitize would change: %q", file, s)
			}
		}
		if body, err := ParseComment(data, c); err != nil {
			checkErr(jobs.OutputComment, err)
		} else {
			checkText(jobs.OutputComment, body)
		}
		if rv, err := ParseReview(data, c); err != nil {
			checkErr(jobs.OutputReview, err)
		} else {
			checkText(jobs.OutputReview, rv.Body)
			for _, r := range rv.Replies {
				checkText(jobs.OutputReview, r.Body)
			}
			for _, cm := range rv.Comments {
				checkText(jobs.OutputReview, cm.Body)
				if !c.InDiff(cm.Path, cm.Line) {
					t.Fatalf("an inline comment outside the diff: %+v", cm)
				}
			}
		}
		if ls, err := ParseLabels(data, c); err != nil {
			checkErr(jobs.OutputLabels, err)
		} else {
			for _, l := range append(ls.Add, ls.Remove...) {
				if !strings.Contains(" bug needs-review Bug ", " "+l+" ") {
					t.Fatalf("a label not allowed: %q", l)
				}
			}
		}
	})
}

// fuzzSeeds are the test cases' inputs and the testdata texts.
func fuzzSeeds(f *testing.F) []string {
	seeds := []string{
		"@bob @org/team @all <script>alert(1)</script> <img src=x onerror=alert(1)>",
		"[x](javascript:alert(1)) [y](JaVaScRiPt%3Aalert(1)) [z](%6Aavascript:x) [w](&#106;avascript:x)",
		"ws://h smb://h/s data:text/html,x <mailto:a@b.c> https://ok.example/@bob www.x.com",
		"/merge\n  /close\n```\n/approve\n```\n\n    /label ~x\n",
		"<details>\n<summary>@bob</summary>\n`@carol`\n\n</details>",
		"| a | b |\n|---|---|\n| `x | @bob` |",
		"[a](\njavascript:x)\n[b\nc](javascript:x)\n[r]:\njavascript:x",
		"`a\n@bob` ``` ~~~\n> ```\n> @bob\n- ~~~\n  @bob",
	}
	files, _ := filepath.Glob(filepath.Join("testdata", "*.md"))
	for _, name := range files {
		if data, err := os.ReadFile(name); err == nil {
			seeds = append(seeds, string(data))
		}
	}
	return seeds
}

var (
	allowedTagRE   = regexp.MustCompile(`(?i)^(?:</?(?:b|i|em|strong|code|kbd|sub|sup|del|s|br|details|summary|p|ul|ol|li)>|<br ?/>)`)
	allowedLinkRE  = regexp.MustCompile(`(?i)^<https?://[^\s<>]*>`)
	entityRE       = regexp.MustCompile(`^&(?:#[0-9]{1,7}|#[xX][0-9a-fA-F]{1,6}|[A-Za-z][A-Za-z0-9]{0,31});`)
	reservedGroups = map[string]bool{"all": true, "everyone": true, "here": true, "channel": true}
)

// invariants reads a Sanitize output line by line, on its own (it shares
// no code with Sanitize but what a test must), and answers what breaks
// Sanitize's promises.
func invariants(out, actor string) []string {
	var problems []string
	bad := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	if !utf8.ValidString(out) {
		bad("not UTF-8")
	}
	for _, r := range out {
		if r != '\n' && r != '\t' && (unicode.IsControl(r) || unicode.Is(unicode.Cf, r) || r == '\u2028' || r == '\u2029') {
			bad("holds %U", r)
		}
	}
	var fence string // the open fence's run, "" when none
	for n, l := range strings.Split(out, "\n") {
		indent := len(l) - len(strings.TrimLeft(l, " "))
		run := ""
		if indent <= 3 && indent < len(l) && (l[indent] == '`' || l[indent] == '~') {
			k := indent
			for k < len(l) && l[k] == l[indent] {
				k++
			}
			run = l[indent:k]
			if l[indent] == '`' && strings.Contains(l[k:], "`") {
				run = ""
			}
		}
		if fence != "" {
			if run != "" && run[0] == fence[0] && len(run) >= len(fence) && strings.TrimSpace(l[indent+len(run):]) == "" {
				fence = ""
			} else if strings.HasPrefix(l, "/") {
				bad("line %d: a line of code starts with /", n+1)
			}
			continue
		}
		if len(run) >= 3 {
			if indent != 0 {
				bad("line %d: a fence not at the margin", n+1)
			}
			fence = run
			continue
		}
		if t := strings.TrimLeft(l, " \t"); strings.HasPrefix(t, "/") {
			bad("line %d: a quick action %q", n+1, l)
		}
		for _, p := range lineInvariants(l, actor) {
			bad("line %d: %s", n+1, p)
		}
	}
	return problems
}

// lineInvariants reads one line outside code blocks.
func lineInvariants(l, actor string) []string {
	var problems []string
	bad := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	var openers []int
	for i := 0; i < len(l); i++ {
		switch c := l[i]; c {
		case '\\':
			if i+1 < len(l) && strings.IndexByte("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~", l[i+1]) >= 0 {
				if l[i+1] == '@' {
					checkMention(l, i+1, actor, bad)
				}
				i++
			}
		case '`':
			n := 1
			for i+n < len(l) && l[i+n] == '`' {
				n++
			}
			end := closingRun(l, i+n, n)
			if end < 0 {
				bad("a backtick run at byte %d pairs with none on its line", i)
				i += n - 1
				continue
			}
			i = end + n - 1 // a code span: as written
		case '<':
			switch {
			case allowedTagRE.MatchString(l[i:]):
			case allowedLinkRE.MatchString(l[i:]):
				i += len(allowedLinkRE.FindString(l[i:])) - 1
			default:
				bad("a raw < at byte %d: %q", i, l[i:min(len(l), i+12)])
			}
		case '&':
			ent := entityRE.FindString(l[i:])
			if ent == "" {
				continue
			}
			dec := decodeEntity(ent)
			if ent == zwsp && i > 0 && (l[i-1] == '@' || l[i-1] == ':') {
				dec = ""
			}
			if strings.ContainsAny(dec, "@:") || strings.ContainsFunc(dec, func(r rune) bool {
				return unicode.IsControl(r) || unicode.Is(unicode.Cf, r) || r == '\u2028' || r == '\u2029'
			}) {
				bad("an entity %s that stands for %q", ent, dec)
			}
			i += len(ent) - 1
		case '@':
			checkMention(l, i, actor, bad)
		case '[':
			openers = append(openers, i)
		case ']':
			if len(openers) == 0 {
				continue
			}
			openers = openers[:len(openers)-1]
			switch {
			case strings.HasPrefix(l[i+1:], "("):
				target, end := readTarget(l, i+2)
				if !webOrRelative(target) {
					bad("a link to %q", target)
				}
				i = end - 1
			case strings.HasPrefix(l[i+1:], ":"):
				target, end := readTarget(l, i+2)
				if target != "" && !webOrRelative(target) {
					bad("a definition of %q", target)
				}
				i = end - 1
			}
		case ':':
			k := i
			for k > 0 && (unicode.IsLetter(rune(l[k-1])) && l[k-1] < utf8.RuneSelf || strings.IndexByte("0123456789+.-", l[k-1]) >= 0) {
				k--
			}
			for k < i && !('a' <= l[k]|0x20 && l[k]|0x20 <= 'z') {
				k++
			}
			scheme := strings.ToLower(l[k:i])
			rest := l[i+1:]
			switch {
			case strings.HasPrefix(rest, "//") && scheme != "" && scheme != "http" && scheme != "https":
				bad("a bare %s://", scheme)
			case (scheme == "mailto" || scheme == "xmpp") && rest != "" && (rest[0]|0x20 >= 'a' && rest[0]|0x20 <= 'z' || rest[0] >= '0' && rest[0] <= '9'):
				bad("a bare %s:", scheme)
			}
		}
	}
	return problems
}

// closingRun finds the next run of exactly n backticks at or after from.
func closingRun(l string, from, n int) int {
	for i := from; i < len(l); {
		if l[i] != '`' {
			i++
			continue
		}
		j := i
		for j < len(l) && l[j] == '`' {
			j++
		}
		if j-i == n {
			return i
		}
		i = j
	}
	return -1
}

// checkMention reports an @ at l[i] that names anyone but the actor.
func checkMention(l string, i int, actor string, bad func(string, ...any)) {
	var name strings.Builder
	for k := i + 1; k < len(l); {
		c := l[k]
		if ent := entityRE.FindString(l[k:]); ent != "" {
			if d := decodeEntity(ent); len(d) == 1 {
				c, k = d[0], k+len(ent)-1
			}
		}
		if !(c == '_' || c == '.' || c == '-' || c == '/' || '0' <= c && c <= '9' || 'a' <= c|0x20 && c|0x20 <= 'z') || name.Len() == 0 && (c == '.' || c == '-' || c == '/') {
			break
		}
		name.WriteByte(c)
		k++
	}
	n := strings.TrimRight(name.String(), "./-")
	if n == "" {
		return
	}
	if actor == "" || !strings.EqualFold(n, actor) || reservedGroups[strings.ToLower(n)] {
		bad("a mention of @%s", name.String())
	}
}

// readTarget reads a link's target after its "(" or "]:".
func readTarget(l string, i int) (string, int) {
	for i < len(l) && (l[i] == ' ' || l[i] == '\t') {
		i++
	}
	if i < len(l) && l[i] == '<' {
		end := strings.IndexByte(l[i:], '>')
		if end < 0 {
			return l[i+1:], len(l)
		}
		return l[i+1 : i+end], i + end + 1
	}
	j, depth := i, 0
	for ; j < len(l) && l[j] != ' ' && l[j] != '\t'; j++ {
		if l[j] == '(' {
			depth++
		}
		if l[j] == ')' {
			if depth == 0 {
				break
			}
			depth--
		}
	}
	return l[i:j], j
}

// webOrRelative reports whether a target, decoded as a browser would, is
// http(s) or relative (and not //host).
func webOrRelative(target string) bool {
	s := strings.ReplaceAll(target, `\`, "")
	for range 10 {
		d := html.UnescapeString(s)
		var b strings.Builder
		for i := 0; i < len(d); i++ {
			if v, err := strconv.ParseUint(d[i+1:min(len(d), i+3)], 16, 8); d[i] == '%' && i+2 < len(d) && err == nil {
				b.WriteByte(byte(v))
				i += 2
				continue
			}
			b.WriteByte(d[i])
		}
		if b.String() == s {
			break
		}
		s = b.String()
	}
	s = strings.ToLower(strings.Map(func(r rune) rune {
		if unicode.IsSpace(r) || unicode.IsControl(r) || unicode.Is(unicode.Cf, r) {
			return -1
		}
		return r
	}, s))
	if strings.HasPrefix(s, "//") {
		return false
	}
	if i := strings.IndexAny(s, ":/?#"); i >= 0 && s[i] == ':' {
		return s[:i] == "http" || s[:i] == "https"
	}
	return true
}

func decodeEntity(ent string) string {
	if strings.HasPrefix(ent, "&#") {
		num := ent[2 : len(ent)-1]
		base := 10
		if num[0] == 'x' || num[0] == 'X' {
			num, base = num[1:], 16
		}
		v, err := strconv.ParseUint(num, base, 32)
		if err != nil || v == 0 || v > unicode.MaxRune || v >= 0xD800 && v <= 0xDFFF {
			return "\uFFFD"
		}
		return string(rune(v))
	}
	return html.UnescapeString(ent)
}

// The fuzz targets' reader finds what Sanitize removes: it is no check
// that passes everything.
func TestInvariantsCatch(t *testing.T) {
	for _, in := range []string{
		"<script>alert(1)</script>",
		"<img src=x onerror=alert(1)>",
		"hi @bob",
		"cc @org/team",
		"&#64;bob",
		"/merge",
		"  /approve",
		"```\n/close\n```",
		"   ```\ncode\n```",
		"[x](javascript:alert(1))",
		"[x](JaVaScRiPt%3Aalert(1))",
		"[x](&#106;avascript:alert(1))",
		"[r]: data:text/html,x",
		"smb://evil/share",
		"mailto:a@b.c",
		"a ` b",
		"&#x202E;",
	} {
		if len(invariants(in, "alice")) == 0 {
			t.Errorf("invariants(%q) found nothing", in)
		}
		if out := Sanitize(in, Context{Actor: "alice"}); len(invariants(out, "alice")) > 0 {
			t.Errorf("invariants(Sanitize(%q)) = %v", in, invariants(out, "alice"))
		}
	}
}
