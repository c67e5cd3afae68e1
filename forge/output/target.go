package output

import (
	"html"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// allowedTarget reports whether a link's target (its destination after
// backslash-unescaping, as CommonMark reads it) may stay a link: its
// scheme, once decoded, is http or https, or it has none (a relative path,
// query or fragment). A target that starts with // names another host with
// the page's own scheme; it counts as having a scheme.
func allowedTarget(target string) bool {
	s := target
	for i := 0; ; i++ {
		if i == 8 {
			return false // still decoding: no honest URL nests that deep
		}
		t := percentDecode(html.UnescapeString(s))
		if t == s {
			break
		}
		s = t
	}
	s = strings.Map(func(r rune) rune {
		switch {
		case r == '\\':
			return '/' // browsers read \ as / in http(s) URLs
		case unicode.IsSpace(r) || badRune(r):
			return -1
		}
		return unicode.ToLower(r)
	}, s)
	if strings.HasPrefix(s, "//") {
		return false
	}
	i := strings.IndexAny(s, ":/?#")
	if i < 0 || s[i] != ':' {
		return true
	}
	scheme := s[:i]
	return scheme == "http" || scheme == "https"
}

// percentDecode decodes every %XX; a % not followed by two hex digits
// stays as it is.
func percentDecode(s string) string {
	if !strings.Contains(s, "%") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) && isHex(s[i+1]) && isHex(s[i+2]) {
			v, _ := strconv.ParseUint(s[i+1:i+3], 16, 8)
			b.WriteByte(byte(v))
			i += 2
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// plainURL reports whether s, a target as written, holds only characters
// of a URL (RFC 3986's, % for escapes, printable non-ASCII letters, and
// entities that stand for such characters, but for @ and :), so that every
// Markdown parser reads it the same way and, read as text, it makes no
// mention: no blank, backslash, backtick, angle bracket or quote.
func plainURL(s string) bool {
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r >= utf8.RuneSelf:
			if r == utf8.RuneError || !unicode.IsPrint(r) || badRune(r) {
				return false
			}
		case r == '&':
			if m, dec := entityAt(s, i); m > 0 {
				if strings.ContainsAny(dec, "@:") || !plainURL(dec) {
					return false
				}
				n = m
			}
		case isAlnum(byte(r)):
		case strings.ContainsRune("-._~:/?#@!$'()*+,;=%", r):
		default:
			return false
		}
		i += n
	}
	return true
}

// unescapeBackslashes drops the backslash of each backslash escape.
func unescapeBackslashes(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) && isPunct(s[i+1]) {
			i++
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// entityAt reads a character reference at s[i] (s[i] is '&'): &name;,
// &#digits; or &#xhex;. It answers its length and the characters it stands
// for; 0 when there is none (or the name is no entity's: then it is text).
func entityAt(s string, i int) (int, string) {
	j := i + 1
	if j < len(s) && s[j] == '#' {
		j++
		base, max := 10, 7
		if j < len(s) && (s[j] == 'x' || s[j] == 'X') {
			j++
			base, max = 16, 6
		}
		k := j
		for k < len(s) && k-j < max && (base == 16 && isHex(s[k]) || base == 10 && isDigit(s[k])) {
			k++
		}
		if k == j || k >= len(s) || s[k] != ';' {
			return 0, ""
		}
		v, _ := strconv.ParseUint(s[j:k], base, 32)
		r := rune(v)
		if v == 0 || v > unicode.MaxRune || (r >= 0xD800 && r <= 0xDFFF) {
			r = utf8.RuneError // what CommonMark makes of it
		}
		return k + 1 - i, string(r)
	}
	k := j
	for k < len(s) && k-j < 32 && isAlnum(s[k]) {
		k++
	}
	if k == j || !isLetter(s[j]) || k >= len(s) || s[k] != ';' {
		return 0, ""
	}
	ent := s[i : k+1]
	dec := html.UnescapeString(ent)
	if dec == ent || strings.HasSuffix(dec, ";") && ent != "&semi;" {
		// No such entity (html's legacy names match a prefix, leaving the
		// rest): the text as it is.
		return 0, ""
	}
	return len(ent), dec
}

// zwsp is the zero-width space Sanitize writes after an @ or a colon.
const zwsp = "&#8203;"

// entityText answers how the reference ent at s[i] is written out: as it
// is, unless it stands for a character a text must not hold (a control or
// format character) or one that could make a mention or a URL once decoded
// (@ or :): then its & is escaped and it reads as the text it is.
func entityText(s string, i int, ent, dec string) string {
	if ent == zwsp && i > 0 && (s[i-1] == '@' || s[i-1] == ':') {
		return ent
	}
	for _, r := range dec {
		if badRune(r) || r == '@' || r == ':' {
			return "&amp;" + ent[1:]
		}
	}
	return ent
}

func isDigit(c byte) bool  { return c >= '0' && c <= '9' }
func isLetter(c byte) bool { return c|0x20 >= 'a' && c|0x20 <= 'z' }
func isAlnum(c byte) bool  { return isDigit(c) || isLetter(c) }
func isHex(c byte) bool    { return isDigit(c) || c|0x20 >= 'a' && c|0x20 <= 'f' }

// isWord is the ASCII word character: what may not stand before an @ that
// mentions.
func isWord(c byte) bool { return isAlnum(c) || c == '_' }

// isSchemeChar is a character of a URL scheme.
func isSchemeChar(c byte) bool { return isAlnum(c) || c == '+' || c == '.' || c == '-' }

// isPunct is CommonMark's ASCII punctuation: what a backslash escapes.
func isPunct(c byte) bool {
	return c >= '!' && c <= '/' || c >= ':' && c <= '@' || c >= '[' && c <= '`' || c >= '{' && c <= '~'
}
