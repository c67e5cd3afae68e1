package output

import (
	"slices"
	"sort"
	"strings"
)

// mode is how a forge may read a line.
type mode uint8

const (
	// modeMarkdown: the line is Markdown; code spans are code.
	modeMarkdown mode = iota
	// modeHTML: the line may sit in an HTML block, where a forge reads no
	// Markdown (a backtick is text, an @ in it mentions): what code spans
	// hold is neutralised too, and escapes are written as entities, which
	// read the same either way.
	modeHTML
)

// sanitizer holds what Sanitize's rules need of the job.
type sanitizer struct {
	actor string
}

// line neutralises one line outside code blocks.
func (s *sanitizer) line(l string, m mode, table bool) string {
	var o string
	if table {
		cells := splitCells(l)
		for k := range cells {
			var before byte
			if k > 0 {
				before = '|'
			}
			cells[k] = s.inline(cells[k], m, before)
		}
		o = strings.Join(cells, "|")
	} else {
		o = s.inline(l, m, 0)
	}
	if indentCols(l) < 4 && indentCols(o) >= 4 {
		// A dropped link's blank text must not make the line code.
		o = l[:len(l)-len(strings.TrimLeft(l, " \t"))] + strings.TrimLeft(o, " \t")
	}
	return fixStart(o, m)
}

// splitCells splits a line that may be a table's row at each | that no
// backslash escapes: a forge splits cells there before it reads code spans
// or links, so each cell is read on its own.
func splitCells(l string) []string {
	var cells []string
	start, slashes := 0, 0
	for i := 0; i < len(l); i++ {
		switch l[i] {
		case '\\':
			slashes++
			continue
		case '|':
			if slashes%2 == 0 {
				cells = append(cells, l[start:i])
				start = i + 1
			}
		}
		slashes = 0
	}
	return append(cells, l[start:])
}

// fixStart makes what starts an output line harmless: a / (a GitLab quick
// action) and ~~~ (a fence a container could open) are escaped.
func fixStart(o string, m mode) string {
	k := 0
	for k < len(o) && (o[k] == ' ' || o[k] == '\t') {
		k++
	}
	if k < len(o) && o[k] == '/' {
		if m == modeMarkdown {
			return o[:k] + `\` + o[k:]
		}
		return o[:k] + "&#47;" + o[k+1:]
	}
	rest := stripMarkers(o)
	if strings.HasPrefix(rest, "~~~") {
		p := len(o) - len(rest)
		if m == modeMarkdown {
			return o[:p] + `\` + o[p:]
		}
		return o[:p] + "&#126;" + o[p+1:]
	}
	return o
}

// opener is a [ or ![ not yet closed: the piece of output it is, where it
// is in the line, and whether a link may have formed after it (CommonMark
// then makes it inactive: a link holds no link).
type opener struct {
	piece, pos   int
	image, stale bool
}

// inliner rewrites one line (or one table cell), left to right as a
// CommonMark parser reads it.
type inliner struct {
	s    *sanitizer
	m    mode
	seg  string
	runs map[int][]int // the starts of seg's backtick runs, by length

	pieces  []string // the output; each opener is a piece of its own
	b       strings.Builder
	stack   []opener
	urlEnd  int  // where the allowed bare URL being read ends
	before  byte // what the line holds before seg (a table cell's |)
	genSpan bool // the last thing written is a code span Sanitize made
}

func (s *sanitizer) inline(seg string, m mode, before byte) string {
	in := &inliner{s: s, m: m, seg: seg, before: before}
	for i := 0; i < len(seg); {
		if seg[i] != '`' {
			i++
			continue
		}
		j := i
		for j < len(seg) && seg[j] == '`' {
			j++
		}
		if in.runs == nil {
			in.runs = map[int][]int{}
		}
		in.runs[j-i] = append(in.runs[j-i], i)
		i = j
	}
	for i := 0; i < len(seg); {
		i = in.step(i)
	}
	// A [ that does not close on its line could close on the next one.
	for _, o := range in.stack {
		in.pieces[o.piece] = in.escOpener(o.image)
	}
	in.flush()
	return strings.Join(in.pieces, "")
}

func (in *inliner) flush() {
	if in.b.Len() > 0 {
		in.pieces = append(in.pieces, in.b.String())
		in.b.Reset()
	}
}

func (in *inliner) write(s string) {
	if in.genSpan {
		if strings.HasPrefix(s, "`") {
			in.b.WriteByte(' ') // two code spans side by side would merge
		}
		in.genSpan = false
	}
	in.b.WriteString(s)
}

// lastByte is the last byte written (before: none).
func (in *inliner) lastByte() byte {
	if in.b.Len() > 0 {
		s := in.b.String()
		return s[len(s)-1]
	}
	for k := len(in.pieces) - 1; k >= 0; k-- {
		if p := in.pieces[k]; p != "" {
			return p[len(p)-1]
		}
	}
	return in.before
}

// esc escapes an ASCII punctuation character: with a backslash in
// Markdown, as an entity where the line may be HTML.
func (in *inliner) esc(c byte) string {
	if in.m == modeMarkdown {
		return `\` + string(c)
	}
	return "&#" + itoa(int(c)) + ";"
}

func (in *inliner) escOpener(image bool) string {
	if image {
		return "!" + in.esc('[')
	}
	return in.esc('[')
}

// step rewrites what starts at seg[i] and answers where to go on.
func (in *inliner) step(i int) int {
	seg := in.seg
	c := seg[i]
	switch c {
	case '\\':
		if i+1 < len(seg) && isPunct(seg[i+1]) {
			switch seg[i+1] {
			case '<':
				in.write("&lt;") // the same text, and no "<" left
			case '@':
				in.write(`\@`)
				if in.s.atSign(seg, i+1, false, '\\') != "@" {
					in.write(zwsp)
				}
			case ':':
				// An escaped colon still reads as one.
				suffix, _ := schemeCheck(seg, i, i+2)
				in.write(`\:` + suffix)
			case '&':
				if in.m == modeHTML {
					// HTML reads no backslash escape: the entity stands.
					in.write(`\`)
					return i + 1
				}
				in.write(seg[i : i+2])
			default:
				in.write(seg[i : i+2])
			}
			return i + 2
		}
	case '`':
		return in.backticks(i)
	case '<':
		return in.angle(i)
	case '&':
		if n, dec := entityAt(seg, i); n > 0 {
			in.write(entityText(seg, i, seg[i:i+n], dec))
			return i + n
		}
	case '[':
		in.push(i, false)
		return i + 1
	case '!':
		if i+1 < len(seg) && seg[i+1] == '[' {
			in.push(i, true)
			return i + 2
		}
	case ']':
		return in.closeBracket(i)
	case '@':
		in.write(in.s.atSign(seg, i, i < in.urlEnd, in.lastByte()))
		return i + 1
	case ':':
		suffix, web := colonCheck(seg, i)
		switch {
		case i < in.urlEnd:
			// Within an allowed URL (a port, a path): only a nested
			// scheme:// is broken.
			if !strings.HasPrefix(seg[i+1:], "//") {
				suffix = ""
			}
		case web:
			// GFM links the URL whole, up to a blank or a <: it must
			// hold nothing Sanitize reads as Markdown.
			if end, ok := in.plainURLAt(i); ok {
				in.urlEnd = end
			} else {
				suffix = zwsp
			}
		}
		in.write(":" + suffix)
		return i + 1
	case 'w', 'W':
		if i >= in.urlEnd && (i == 0 || !isAlnum(seg[i-1])) && len(seg) >= i+4 && strings.EqualFold(seg[i:i+4], "www.") {
			end, ok := in.plainURLAt(i)
			if !ok {
				in.write(seg[i:i+3] + in.esc('.'))
				return i + 4
			}
			in.urlEnd = end
		}
	}
	in.write(seg[i : i+1])
	return i + 1
}

// backticks reads the backtick run at seg[i]: a code span when a run as
// long follows on the line (kept as written), else each backtick escaped.
func (in *inliner) backticks(i int) int {
	seg := in.seg
	e := i
	for e < len(seg) && seg[e] == '`' {
		e++
	}
	n := e - i
	starts := in.runs[n]
	k := sort.SearchInts(starts, e)
	if k == len(starts) {
		for range n {
			in.write(in.esc('`'))
		}
		return e
	}
	j := starts[k]
	if in.m == modeMarkdown {
		in.write(seg[i : j+n])
	} else {
		in.write(seg[i:e] + in.s.light(seg[e:j]) + seg[j:j+n])
	}
	return j + n
}

// angle reads what starts with < at seg[i]: an autolink, an allowed tag,
// or a < to escape.
func (in *inliner) angle(i int) int {
	seg := in.seg
	if url, end, email, ok := autolinkAt(seg, i); ok {
		// On a line that may be HTML, <https://...> may be no link but a
		// tag: it is shown.
		if !email && allowedAutolink(url) && in.m == modeMarkdown {
			in.write("<" + keptURL(url) + ">")
		} else {
			in.span(url, false)
		}
		return end
	}
	if n, _ := tagAt(seg, i); n > 0 {
		in.write(seg[i : i+n])
		return i + n
	}
	in.write("&lt;")
	return i + 1
}

func (in *inliner) push(pos int, image bool) {
	in.flush()
	in.genSpan = false
	p := "["
	if image {
		p = "!["
	}
	in.stack = append(in.stack, opener{piece: len(in.pieces), pos: pos, image: image})
	in.pieces = append(in.pieces, p)
}

// stale marks the openers before a link that may have formed: CommonMark
// makes them inactive (an image's are not).
func (in *inliner) stale() {
	for k := range in.stack {
		if !in.stack[k].image {
			in.stack[k].stale = true
		}
	}
}

// unpair escapes an opener and its ], which form nothing: no later parse
// may pair either with another.
func (in *inliner) unpair(o opener) {
	in.pieces[o.piece] = in.escOpener(o.image)
	in.write(in.esc(']'))
}

// closeBracket reads a ] at seg[i]. With an open [ before it, followed by
// (target) it is a link or an image, followed by : a reference definition;
// a target that is not allowed is dropped, and one that does not end on
// the line unpairs the brackets (no link spans lines). A [ that may be
// inactive (a link may have formed within it) is unpaired too.
func (in *inliner) closeBracket(i int) int {
	seg := in.seg
	if len(in.stack) == 0 {
		in.write("]")
		return i + 1
	}
	o := in.stack[len(in.stack)-1]
	in.stack = in.stack[:len(in.stack)-1]
	if o.stale {
		in.unpair(o)
		return i + 1
	}
	var next byte
	if i+1 < len(seg) {
		next = seg[i+1]
	}
	start := o.pos + 1
	if o.image {
		start++
	}
	blank := strings.Trim(seg[start:i], " \t") == "" // no label
	switch {
	case next == '(':
		t, ok := inlineTail(seg, i+1)
		switch {
		case !ok:
			in.unpair(o)
			return i + 1
		case keptTarget(t):
			in.write("](" + keptURL(t.shown) + t.title + ")")
			if !o.image {
				in.stale()
			}
		default:
			in.pieces[o.piece] = in.dropOpener(o.piece)
			in.span(t.shown, true)
		}
		return t.end
	case next == ':' && !blank:
		t, ok := definitionTail(seg, i+2)
		switch {
		case !ok || t.shown == "":
			in.unpair(o)
			return i + 1
		case keptTarget(t):
			in.write("]" + seg[i+1:t.end-len(t.raw)] + keptURL(t.shown))
		default:
			in.unpair(o)
			in.write(":")
			in.span(t.shown, true)
		}
		return t.end
	}
	// [text], [text][label] or [text][]: a link when a definition names
	// it.
	in.write("]")
	if !o.image && !blank {
		in.stale()
	}
	return i + 1
}

// keptTarget reports whether a link's target stays: its scheme is allowed
// and it is written plain, so that every parser reads it alike and, read
// as text, it links nothing else. It is then written without <>, which a
// parser that reads no link there would take for a tag.
func keptTarget(t tail) bool {
	if !allowedTarget(t.dest) || !plainURL(t.shown) {
		return false
	}
	depth := 0
	for i := 0; i < len(t.shown); i++ {
		switch t.shown[i] {
		case '(':
			depth++
		case ')':
			depth--
			if depth < 0 {
				return false
			}
		case ':':
			if _, web := colonCheck(t.shown, i); !web && strings.HasPrefix(t.shown[i+1:], "//") {
				return false // a nested scheme:// a forge could link
			}
		}
	}
	return depth == 0
}

// dropOpener is what a dropped link's [ becomes: nothing, or a space when
// it parted two characters that, side by side, could make something new
// (an entity, a mention, a URL's scheme, a longer run of backticks).
func (in *inliner) dropOpener(p int) string {
	var prev, next byte
	for k := p - 1; k >= 0 && prev == 0; k-- {
		if s := in.pieces[k]; s != "" {
			prev = s[len(s)-1]
		}
	}
	if prev == 0 {
		prev = in.before
	}
	for k := p + 1; k < len(in.pieces) && next == 0; k++ {
		if s := in.pieces[k]; s != "" {
			next = s[0]
		}
	}
	if next == 0 && in.b.Len() > 0 {
		next = in.b.String()[0]
	}
	if prev == 0 || next == 0 || prev == ' ' || prev == '\t' || next == ' ' || next == '\t' {
		return ""
	}
	return " "
}

// span writes content as a code span, after a space when sep is set (a
// dropped link's text, then its target) or when what precedes would join
// its backticks.
func (in *inliner) span(content string, sep bool) {
	if in.m == modeHTML {
		content = in.s.light(content)
	}
	lb := in.lastByte()
	if lb == '`' || lb == '\\' || sep && lb != 0 && lb != ' ' && lb != '\t' {
		in.write(" ")
	}
	in.write(codeSpan(content))
	in.genSpan = true
}

// codeSpan writes s (not empty) as a code span that shows s as it is.
func codeSpan(s string) string {
	f := strings.Repeat("`", longestRun(s, '`')+1)
	pad := ""
	if s[0] == '`' || s[len(s)-1] == '`' || s[0] == ' ' && s[len(s)-1] == ' ' {
		pad = " "
	}
	return f + pad + s + pad + f
}

// light neutralises text that a forge may read either as code or as HTML
// text: what code spans hold on a line that may be HTML, and the targets
// Sanitize shows there. It escapes < and entities, and breaks mentions and
// bare URLs; it writes no backtick.
func (s *sanitizer) light(t string) string {
	var b strings.Builder
	for i := 0; i < len(t); i++ {
		switch c := t[i]; c {
		case '<':
			b.WriteString("&lt;")
			continue
		case '&':
			if n, dec := entityAt(t, i); n > 0 {
				b.WriteString(entityText(t, i, t[i:i+n], dec))
				i += n - 1
				continue
			}
		case '@':
			var prev byte
			if b.Len() > 0 {
				prev = b.String()[b.Len()-1]
			}
			b.WriteString(s.atSign(t, i, false, prev))
			continue
		case ':':
			suffix, _ := colonCheck(t, i)
			b.WriteString(":" + suffix)
			continue
		}
		b.WriteByte(t[i])
	}
	return b.String()
}

// atSign answers how to write the @ at t[i] (prev is the byte written
// before it, 0: none): as it is when no name follows it, or when it
// mentions the actor (after a blank or a bracket, a quote or a backtick,
// : or ; or ,: else it may read as an e-mail address); else, so that no forge reads a mention nor
// an address in it, with a zero-width space after it, or as %40 within an
// allowed URL.
func (s *sanitizer) atSign(t string, i int, inURL bool, prev byte) string {
	name := mentionName(t, i+1)
	switch {
	case name == "":
		return "@"
	case s.isActor(name) && (prev == 0 || strings.IndexByte(" \t([{<>)]}\"`,;:", prev) >= 0):
		return "@"
	case inURL:
		return "%40"
	}
	return "@" + zwsp
}

// keptURL is a link's target as kept, each @ that a name follows written
// %40: should a parser read it as text, it mentions no one.
func keptURL(u string) string {
	if !strings.Contains(u, "@") {
		return u
	}
	var b strings.Builder
	for i := 0; i < len(u); i++ {
		if u[i] == '@' && i+1 < len(u) && isWord(u[i+1]) {
			b.WriteString("%40")
			continue
		}
		b.WriteByte(u[i])
	}
	return b.String()
}

// mentionName reads what an @ at t[j-1] names, as a forge reads it: a
// login, or a team or (GitLab) group path such as org/team or
// group/sub/project, each character written plain, escaped or as an
// entity.
func mentionName(t string, j int) string {
	var name []byte
	k := j
	c, n := nameChar(t, k)
	if !isWord(c) {
		return ""
	}
	for n > 0 {
		if c == '/' {
			if d, _ := nameChar(t, k+n); !isWord(d) {
				break
			}
		}
		name = append(name, c)
		k += n
		c, n = nameChar(t, k)
	}
	return string(name)
}

// nameChar answers the character of a name that t[k] stands for, and how
// many bytes write it (0: none).
func nameChar(t string, k int) (byte, int) {
	if k >= len(t) {
		return 0, 0
	}
	inName := func(c byte) bool { return isWord(c) || c == '.' || c == '-' || c == '/' }
	switch c := t[k]; {
	case inName(c):
		return c, 1
	case c == '\\' && k+1 < len(t) && isPunct(t[k+1]) && inName(t[k+1]):
		return t[k+1], 2
	case c == '&':
		if n, dec := entityAt(t, k); n > 0 && len(dec) == 1 && inName(dec[0]) {
			return dec[0], n
		}
	}
	return 0, 0
}

// isActor reports whether name is the actor's login (a trailing dot ends
// the sentence, not the name). A team or group, and the names that notify
// many (all, everyone, here, channel), never are.
func (s *sanitizer) isActor(name string) bool {
	if s.actor == "" || strings.Contains(name, "/") {
		return false
	}
	name = strings.TrimRight(name, ".")
	switch strings.ToLower(name) {
	case "all", "everyone", "here", "channel":
		return false
	}
	return strings.EqualFold(name, s.actor)
}

// colonCheck looks at the colon at t[i] as the end of a bare URL's scheme
// when what follows it reads as a letter, a digit or a / (written plain,
// escaped or as an entity): it answers what to write after the colon, zwsp
// when the scheme is not http or https (no forge then links it), and
// whether it is http or https.
func colonCheck(t string, i int) (string, bool) {
	return schemeCheck(t, i, i+1)
}

// schemeCheck is colonCheck for a colon written between t[end] and
// t[next]: plain, or escaped (\:).
func schemeCheck(t string, end, next int) (string, bool) {
	if !urlAfterColon(t, next) {
		return "", false
	}
	scheme, entity := schemeBefore(t, end)
	switch {
	case scheme == "":
		return "", false
	case !entity && (scheme == "http" || scheme == "https"):
		return "", true
	}
	return zwsp, false
}

// schemeBefore reads, back from t[end], the scheme a URL's colon there
// would end as a forge reads it: letters, digits, +, - and ., each plain or
// as an entity, from the first letter; lower-cased. It tells whether an
// entity wrote part of it.
func schemeBefore(t string, end int) (string, bool) {
	var rev []byte
	entity := false
	for k := end; k > 0; {
		if c := t[k-1]; isSchemeChar(c) {
			rev = append(rev, c)
			k--
			continue
		}
		if t[k-1] == '\\' && k < end && isPunct(t[k]) {
			k-- // it escapes the scheme's character after it
			entity = true
			continue
		}
		if t[k-1] != ';' {
			break
		}
		amp := strings.LastIndexByte(t[max(0, k-40):k], '&')
		if amp < 0 {
			break
		}
		amp += max(0, k-40)
		n, dec := entityAt(t, amp)
		if n != k-amp || len(dec) != 1 || !isSchemeChar(dec[0]) {
			break
		}
		rev = append(rev, dec[0])
		entity = true
		k = amp
	}
	slices.Reverse(rev)
	for len(rev) > 0 && !isLetter(rev[0]) {
		rev = rev[1:]
	}
	return strings.ToLower(string(rev)), entity
}

// urlAfterColon reports whether the character t[j] stands for, once read,
// may go on a URL after its scheme's colon: a letter, a digit or a /.
func urlAfterColon(t string, j int) bool {
	if j >= len(t) {
		return false
	}
	c := t[j]
	switch {
	case c == '\\' && j+1 < len(t) && isPunct(t[j+1]):
		c = t[j+1]
	case c == '&':
		n, dec := entityAt(t, j)
		if n == 0 || dec == "" {
			return false
		}
		c = dec[0]
	}
	return isAlnum(c) || c == '/'
}

// tail is a link's or a definition's target, read on its line.
type tail struct {
	dest  string // the target as a parser reads it (backslash escapes undone)
	shown string // as written, without <>
	raw   string // as written
	title string // " " and the title, when it is plain; "" else
	end   int
}

// inlineTail reads "(target "title")" at seg[k] ('('). It fails when it
// does not end on the line.
func inlineTail(seg string, k int) (tail, bool) {
	j := skipBlanks(seg, k+1)
	if j >= len(seg) {
		return tail{}, false
	}
	if seg[j] == ')' {
		return tail{end: j + 1}, true
	}
	t, ok := destination(seg, j)
	if !ok {
		return tail{}, false
	}
	m := skipBlanks(seg, t.end)
	if m < len(seg) && seg[m] == ')' {
		t.end = m + 1
		return t, true
	}
	if m == t.end || m >= len(seg) {
		return tail{}, false
	}
	title, e, ok := linkTitle(seg, m)
	if !ok {
		return tail{}, false
	}
	e = skipBlanks(seg, e)
	if e >= len(seg) || seg[e] != ')' {
		return tail{}, false
	}
	if plainTitle(title) {
		t.title = " " + title
	}
	t.end = e + 1
	return t, true
}

// definitionTail reads the target of a reference definition after its
// "]:" (k): it must be on the line, and a blank or the end follow it.
func definitionTail(seg string, k int) (tail, bool) {
	j := skipBlanks(seg, k)
	if j >= len(seg) {
		return tail{}, false
	}
	t, ok := destination(seg, j)
	if !ok || t.end < len(seg) && seg[t.end] != ' ' && seg[t.end] != '\t' {
		return tail{}, false
	}
	return t, true
}

// destination reads a link destination at seg[j]: <...> or a run of
// non-blank characters with balanced parentheses.
func destination(seg string, j int) (tail, bool) {
	if seg[j] == '<' {
		for m := j + 1; m < len(seg); m++ {
			switch seg[m] {
			case '\\':
				if m+1 < len(seg) && isPunct(seg[m+1]) {
					m++
				}
			case '<':
				return tail{}, false
			case '>':
				inner := seg[j+1 : m]
				return tail{dest: unescapeBackslashes(inner), shown: inner, raw: seg[j : m+1], end: m + 1}, true
			}
		}
		return tail{}, false
	}
	m, depth := j, 0
loop:
	for m < len(seg) {
		switch c := seg[m]; {
		case c == '\\' && m+1 < len(seg) && isPunct(seg[m+1]):
			m += 2
			continue
		case c == '(':
			depth++
			if depth > 32 {
				return tail{}, false
			}
		case c == ')':
			if depth == 0 {
				break loop
			}
			depth--
		case c <= ' ' || c == 0x7f:
			break loop
		}
		m++
	}
	if m == j || depth != 0 {
		return tail{}, false
	}
	raw := seg[j:m]
	return tail{dest: unescapeBackslashes(raw), shown: raw, raw: raw, end: m}, true
}

// linkTitle reads a title at seg[m]: "...", '...' or (...).
func linkTitle(seg string, m int) (string, int, bool) {
	var closer byte
	switch seg[m] {
	case '"', '\'':
		closer = seg[m]
	case '(':
		closer = ')'
	default:
		return "", 0, false
	}
	for k := m + 1; k < len(seg); k++ {
		switch c := seg[k]; {
		case c == '\\' && k+1 < len(seg) && isPunct(seg[k+1]):
			k++
		case c == closer:
			return seg[m : k+1], k + 1, true
		case seg[m] == '(' && c == '(':
			return "", 0, false
		}
	}
	return "", 0, false
}

// plainTitle reports whether a title can be kept as it is: no escape,
// entity, quote, bracket or backtick in it. Another is dropped (the link
// stays).
func plainTitle(title string) bool {
	inner := title[1 : len(title)-1]
	for _, r := range inner {
		if badRune(r) || strings.ContainsRune("\\`<>&\"'()[]", r) {
			return false
		}
	}
	return true
}

func skipBlanks(s string, i int) int {
	for i < len(s) && (s[i] == ' ' || s[i] == '\t') {
		i++
	}
	return i
}

func itoa(n int) string {
	if n < 10 {
		return string(rune('0' + n))
	}
	return itoa(n/10) + string(rune('0'+n%10))
}

// plainURLAt reports whether the bare URL at seg[i] (its colon, or its
// www.) can stay one, and where it ends: it must hold no backtick, bracket,
// backslash or entity (but zwsp), and end at a blank, the end, or a <
// Sanitize keeps (else, the < escaped, it would run on).
func (in *inliner) plainURLAt(i int) (int, bool) {
	seg := in.seg
	end := i
	for end < len(seg) && seg[end] != ' ' && seg[end] != '\t' && seg[end] != '<' {
		end++
	}
	for k := i; k < end; k++ {
		switch seg[k] {
		case '`', '[', ']', '\\':
			return 0, false
		case '&':
			// Only a zwsp that stays one (after @ or :): another entity
			// is no URL's, and an escaped one would write &amp;.
			if n, _ := entityAt(seg, k); n > 0 && (seg[k:k+n] != zwsp || k == 0 || seg[k-1] != '@' && seg[k-1] != ':') {
				return 0, false
			}
		}
	}
	if end < len(seg) && seg[end] == '<' {
		if n, _ := tagAt(seg, end); n > 0 {
			return end, true
		}
		url, _, email, ok := autolinkAt(seg, end)
		return end, ok && !email && allowedAutolink(url) && in.m == modeMarkdown
	}
	return end, true
}
