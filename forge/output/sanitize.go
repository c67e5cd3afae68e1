package output

import (
	"strings"
)

// Sanitize neutralises a Markdown text for posting on any forge (the rules
// are the package's). It refuses nothing: what the Parse functions refuse
// (invalid UTF-8, control and format characters) it drops, so the host can
// apply it to any text, such as a pull request's body.
//
// It works line by line. Fenced code blocks are found first and kept as
// written; every other line is rewritten so that it holds no construct
// that spans lines (an unpaired backtick or [ is escaped), and its links,
// tags, mentions, bare URLs and entities are checked within the line.
func Sanitize(markdown string, c Context) string {
	s := &sanitizer{actor: c.Actor}
	in := strings.Split(clean(markdown), "\n")
	b := &blocks{out: make([]string, 0, len(in)+2), kinds: make([]kind, 0, len(in)+2)}
	var (
		open   *fence
		region bool // the lines may sit in an HTML block (until a blank line)
		table  bool // the lines may be rows of a table (until a blank line)
	)
	for i := 0; i < len(in); i++ {
		l := in[i]
		if open != nil {
			if open.closes(l) {
				b.add(l, kindFence)
				open = nil
			} else {
				b.add(open.content(l), kindFence)
			}
			continue
		}
		if isBlank(l) {
			region, table = false, false
			b.add(l, kindBlank)
			continue
		}
		if !region {
			if f, ok := openFence(l); ok {
				table = false
				open = &f
				b.add(l[f.indent:], kindFence)
				continue
			}
			if indentCols(l) >= 4 && (i == 0 || isBlank(in[i-1])) && b.codeContext() {
				i = b.indentedCode(in, i)
				continue
			}
		}
		if !table && (isDelimRow(l) || i+1 < len(in) && isDelimRow(in[i+1])) {
			table = true
		}
		m := modeMarkdown
		if region {
			m = modeHTML
		}
		o := s.line(l, m, table)
		if !region && startsRegion(o) {
			region = true
			o = s.line(l, modeHTML, table)
		}
		b.add(o, kindText)
	}
	if open != nil {
		// Close what the text left open, so that nothing after it (a
		// footer) falls into the code block.
		closer := strings.Repeat(string(open.ch), open.n)
		if n := len(b.out); n > 1 && b.out[n-1] == "" {
			b.out = append(b.out[:n-1], closer, "")
		} else {
			b.add(closer, kindFence)
		}
	}
	return strings.Join(b.out, "\n")
}

// clean makes s valid UTF-8 with LF line ends and without control or
// format characters.
func clean(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	s = strings.ReplaceAll(s, "\r\n", "\n")
	return strings.Map(func(r rune) rune {
		if badRune(r) {
			return -1
		}
		return r
	}, s)
}

// kind is what an output line is.
type kind uint8

const (
	kindBlank kind = iota
	kindText
	kindFence // a fence or a line of a code block
)

// blocks collects the output lines and their kinds.
type blocks struct {
	out   []string
	kinds []kind
}

func (b *blocks) add(l string, k kind) {
	b.out = append(b.out, l)
	b.kinds = append(b.kinds, k)
}

// codeContext reports whether an indented line after a blank line is an
// indented code block and not a list item's paragraph: what comes before
// it is the start, a code block, or a paragraph of lines that start at the
// margin with no list marker and no >. A wrong answer costs looks only: the
// block becomes a fenced one, whose content is inert.
func (b *blocks) codeContext() bool {
	k := len(b.out) - 1
	for k >= 0 && b.kinds[k] == kindBlank {
		k--
	}
	if k < 0 || b.kinds[k] == kindFence {
		return true
	}
	for ; k >= 0 && b.kinds[k] == kindText; k-- {
		l := b.out[k]
		if l[0] == ' ' || l[0] == '\t' || stripMarkers(l) != l {
			return false
		}
	}
	return true
}

// indentedCode writes the indented code block that starts at in[i] as a
// fenced one, with its lines unindented by four columns (and a line that
// starts with / indented by one space), and answers the index of its last
// line.
func (b *blocks) indentedCode(in []string, i int) int {
	last := i
	for j := i; j < len(in) && (isBlank(in[j]) || indentCols(in[j]) >= 4); j++ {
		if !isBlank(in[j]) {
			last = j
		}
	}
	lines := make([]string, 0, last-i+1)
	longest := 0
	for _, l := range in[i : last+1] {
		l = dedent4(l)
		if strings.HasPrefix(l, "/") {
			l = " " + l
		}
		longest = max(longest, longestRun(l, '`'))
		lines = append(lines, l)
	}
	f := strings.Repeat("`", max(3, longest+1))
	b.add(f, kindFence)
	for _, l := range lines {
		b.add(l, kindFence)
	}
	b.add(f, kindFence)
	return last
}

// fence is an open fenced code block: its character, its length and the
// indentation of its opening line.
type fence struct {
	ch        byte
	n, indent int
}

// openFence reads a fence that opens a code block: up to three spaces,
// three or more backticks or tildes, and an info string (with no backtick
// after backticks).
func openFence(l string) (fence, bool) {
	ind := 0
	for ind < len(l) && l[ind] == ' ' {
		ind++
	}
	if ind > 3 || ind >= len(l) || l[ind] != '`' && l[ind] != '~' {
		return fence{}, false
	}
	ch := l[ind]
	k := ind
	for k < len(l) && l[k] == ch {
		k++
	}
	if k-ind < 3 || ch == '`' && strings.IndexByte(l[k:], '`') >= 0 {
		return fence{}, false
	}
	return fence{ch: ch, n: k - ind, indent: ind}, true
}

// closes reports whether l closes f.
func (f *fence) closes(l string) bool {
	ind := 0
	for ind < len(l) && l[ind] == ' ' {
		ind++
	}
	if ind > 3 {
		return false
	}
	k := ind
	for k < len(l) && l[k] == f.ch {
		k++
	}
	return k-ind >= f.n && strings.Trim(l[k:], " \t") == ""
}

// content is a line of f's block as written: the opening fence moved to
// the start of its line, the line loses as many spaces as the fence did (it
// renders the same), and a line that starts with / is indented by one
// space (no GitLab quick action).
func (f *fence) content(l string) string {
	k := 0
	for k < len(l) && k < f.indent && l[k] == ' ' {
		k++
	}
	l = l[k:]
	if strings.HasPrefix(l, "/") {
		return " " + l
	}
	return l
}

func isBlank(l string) bool { return strings.Trim(l, " \t") == "" }

// indentCols is the width of l's indentation, a tab reaching the next
// multiple of four.
func indentCols(l string) int {
	col := 0
	for i := 0; i < len(l); i++ {
		switch l[i] {
		case ' ':
			col++
		case '\t':
			col += 4 - col%4
		default:
			return col
		}
	}
	return col
}

// dedent4 removes four columns of indentation from l.
func dedent4(l string) string {
	col, k := 0, 0
	for k < len(l) && col < 4 {
		switch l[k] {
		case ' ':
			col++
		case '\t':
			col += 4 - col%4
		default:
			return l[k:]
		}
		k++
	}
	return l[k:]
}

func longestRun(s string, c byte) int {
	longest, run := 0, 0
	for i := 0; i < len(s); i++ {
		if s[i] == c {
			run++
			longest = max(longest, run)
		} else {
			run = 0
		}
	}
	return longest
}

// isDelimRow reports whether l may be a table's delimiter row (| --- |):
// then it, the line before it and the lines after it may be a table's
// rows, whose cells a forge splits at each | before it reads code spans.
func isDelimRow(l string) bool {
	t := l
	for {
		t = strings.TrimLeft(t, " \t")
		if !strings.HasPrefix(t, ">") {
			break
		}
		t = t[1:]
	}
	t = strings.TrimRight(t, " \t")
	if !strings.Contains(t, "-") {
		return false
	}
	return strings.Trim(t, "|-: \t") == ""
}

// stripMarkers removes from l what may open a container block: blanks,
// block quote markers (>) and list markers (-, +, *, 1. or 1) followed by
// a blank or the end of the line). It strips more than a parser would: the
// rest is where a block (an HTML block, a fence) may start.
func stripMarkers(l string) string {
	for {
		t := strings.TrimLeft(l, " \t")
		switch {
		case t == "":
			return t
		case t[0] == '>':
			l = t[1:]
			continue
		case (t[0] == '-' || t[0] == '+' || t[0] == '*') && (len(t) == 1 || t[1] == ' ' || t[1] == '\t'):
			l = t[1:]
			continue
		}
		d := 0
		for d < len(t) && d < 9 && isDigit(t[d]) {
			d++
		}
		if d > 0 && d < len(t) && (t[d] == '.' || t[d] == ')') && (d+1 == len(t) || t[d+1] == ' ' || t[d+1] == '\t') {
			l = t[d+1:]
			continue
		}
		return t
	}
}

// startsRegion reports whether output line o may start an HTML block: after
// its markers it starts with an allowed block tag (<details>, </p>, ...),
// or is an allowed tag alone. Then, up to the next blank line, a forge may
// read the lines as HTML, in which backticks are text.
func startsRegion(o string) bool {
	rest := stripMarkers(o)
	n, block := tagAt(rest, 0)
	if n == 0 {
		return false
	}
	return block || strings.Trim(rest[n:], " \t") == ""
}

// The tags that pass, written without attributes; the block ones may
// start an HTML block anywhere, the others when alone on their line.
var allowedTags = map[string]bool{
	"details": true, "summary": true, "p": true, "ul": true, "ol": true, "li": true,
	"b": false, "i": false, "em": false, "strong": false, "code": false, "kbd": false,
	"sub": false, "sup": false, "del": false, "s": false, "br": false,
}

// tagAt reads an allowed tag at s[i]: <name>, </name>, <br/> or <br />. It
// answers its length (0: none) and whether it is a block tag.
func tagAt(s string, i int) (int, bool) {
	if i >= len(s) || s[i] != '<' {
		return 0, false
	}
	j := i + 1
	closing := j < len(s) && s[j] == '/'
	if closing {
		j++
	}
	k := j
	for k < len(s) && isAlnum(s[k]) {
		k++
	}
	name := strings.ToLower(s[j:k])
	block, ok := allowedTags[name]
	switch {
	case !ok:
		return 0, false
	case k < len(s) && s[k] == '>':
		return k + 1 - i, block
	case !closing && name == "br" && strings.HasPrefix(s[k:], "/>"):
		return k + 2 - i, false
	case !closing && name == "br" && strings.HasPrefix(s[k:], " />"):
		return k + 3 - i, false
	}
	return 0, false
}

// autolinkAt reads a CommonMark autolink at s[i] ('<'): <scheme:...> or
// <address@example.com>. It answers what it links to and where it ends.
func autolinkAt(s string, i int) (url string, end int, email, ok bool) {
	j := i + 1
	if j < len(s) && isLetter(s[j]) {
		k := j + 1
		for k < len(s) && k-j < 32 && isSchemeChar(s[k]) {
			k++
		}
		if k-j >= 2 && k < len(s) && s[k] == ':' {
			m := k + 1
			for m < len(s) && s[m] != '>' && s[m] != '<' && s[m] > ' ' && s[m] != 0x7f {
				m++
			}
			if m < len(s) && s[m] == '>' {
				return s[j:m], m + 1, false, true
			}
		}
	}
	k := j
	for k < len(s) && (isAlnum(s[k]) || strings.IndexByte(".!#$%&'*+/=?^_`{|}~-", s[k]) >= 0) {
		k++
	}
	if k == j || k >= len(s) || s[k] != '@' {
		return "", 0, false, false
	}
	k++
	for {
		st := k
		for k < len(s) && k-st < 63 && (isAlnum(s[k]) || s[k] == '-') {
			k++
		}
		if k == st || s[st] == '-' || s[k-1] == '-' {
			return "", 0, false, false
		}
		if k < len(s) && s[k] == '.' {
			k++
			continue
		}
		break
	}
	if k < len(s) && s[k] == '>' {
		return s[j:k], k + 1, true, true
	}
	return "", 0, false, false
}

// allowedAutolink reports whether a URI autolink may stay one.
func allowedAutolink(url string) bool {
	scheme := strings.ToLower(url[:strings.IndexByte(url, ':')])
	return (scheme == "http" || scheme == "https") && plainURL(url) && allowedTarget(url)
}
