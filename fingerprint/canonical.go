package fingerprint

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// MaxDepth is how many arrays and objects may nest inside one another. It matches
// encoding/json's own scanner limit, so a document encoding/json accepts is never refused here
// for its depth, and it bounds the recursion a hostile document (or a cyclic Go map) can cause.
const MaxDepth = 10000

var (
	// ErrInvalidJSON reports JSON text (a json.RawMessage, a []byte, or a json.Number) that
	// JSON.parse would refuse: bad syntax, trailing data, or empty input.
	ErrInvalidJSON = errors.New("fingerprint: invalid JSON")
	// ErrTooDeep reports a value nested deeper than MaxDepth.
	ErrTooDeep = errors.New("fingerprint: value nested deeper than MaxDepth")
)

// Canonical renders v (the value json.Unmarshal produces into `any`, or any value that
// marshals to JSON) as JSON with object keys sorted recursively, byte-identical to the
// original's canonical(): keys ordered by UTF-16 code units, numbers as JavaScript prints them,
// strings escaped as JSON.stringify escapes them (no HTML escaping, U+2028/9 raw).
//
// Accepted inputs, at any depth: nil, bool, float64, json.Number, string, []any,
// map[string]any, and json.RawMessage holding JSON text (nil means null, as encoding/json
// marshals it). A top-level []byte is JSON text too. Any other value (structs, integers,
// typed maps and slices, a []byte nested below the top) goes through encoding/json.Marshal
// first, so it hashes exactly as its JSON does.
//
// JSON text is read the way Node reads a UTF-8 file and JSON.parse reads the result: trailing
// data is refused, a duplicated key keeps its last value, a number is a double (so 1e400 is
// Infinity and prints null), an invalid UTF-8 byte sequence inside a string is U+FFFD per
// maximal subpart (WHATWG, as Buffer.toString does), and a \uD800-style escape with no partner
// stays a lone surrogate and prints escaped, as JSON.stringify prints it. A Go string holds
// such a lone surrogate as its 3-byte generalized UTF-8 form (ED A0 80 for U+D800); any other
// invalid UTF-8 in a Go string is U+FFFD per maximal subpart. Values that went through
// encoding/json (Unmarshal before the call, or Marshal inside it) had each invalid byte replaced
// by U+FFFD already, which is the defined result for them.
//
// A float64 NaN or ±Inf prints null, as in JavaScript (inside a struct, Marshal refuses it).
// Nesting deeper than MaxDepth is ErrTooDeep; bad JSON text is ErrInvalidJSON.
func Canonical(v any) ([]byte, error) {
	if b, ok := v.([]byte); ok {
		v = json.RawMessage(b)
	}
	return appendCanonical(make([]byte, 0, 256), v, 0)
}

// appendCanonical appends the canonical form of v, which sits inside depth containers.
func appendCanonical(buf []byte, v any, depth int) ([]byte, error) {
	switch x := v.(type) {
	case nil:
		return append(buf, "null"...), nil
	case bool:
		return strconv.AppendBool(buf, x), nil
	case float64:
		return appendNumber(buf, x), nil
	case json.Number:
		return appendNumberText(buf, string(x))
	case string:
		return appendString(buf, x), nil
	case []any:
		return appendArray(buf, x, depth)
	case map[string]any:
		return appendObject(buf, x, depth)
	case json.RawMessage:
		if x == nil {
			return append(buf, "null"...), nil
		}
		return appendText(buf, x, depth)
	default:
		text, err := json.Marshal(x)
		if err != nil {
			return nil, fmt.Errorf("fingerprint: marshal %T: %w", x, err)
		}
		return appendText(buf, text, depth)
	}
}

// appendArray appends the elements in their own order, as JSON.stringify keeps an array's order.
func appendArray(buf []byte, a []any, depth int) ([]byte, error) {
	if depth >= MaxDepth {
		return nil, ErrTooDeep
	}
	buf = append(buf, '[')
	for i, elem := range a {
		if i > 0 {
			buf = append(buf, ',')
		}
		var err error
		if buf, err = appendCanonical(buf, elem, depth+1); err != nil {
			return nil, err
		}
	}
	return append(buf, ']'), nil
}

// appendObject appends the members sorted by compareKeys, so key order never changes the hash.
func appendObject(buf []byte, m map[string]any, depth int) ([]byte, error) {
	if depth >= MaxDepth {
		return nil, ErrTooDeep
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, compareKeys)
	buf = append(buf, '{')
	for i, k := range keys {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = appendString(buf, k)
		buf = append(buf, ':')
		var err error
		if buf, err = appendCanonical(buf, m[k], depth+1); err != nil {
			return nil, err
		}
	}
	return append(buf, '}'), nil
}

// appendText appends JSON text read as JSON.parse reads it, so text hashes as the value it holds.
func appendText(buf, text []byte, depth int) ([]byte, error) {
	parsed, err := decode(text)
	if err != nil {
		return nil, err
	}
	return appendCanonical(buf, parsed, depth)
}

// appendNumberText prints a json.Number. It is checked against the JSON grammar first because
// strconv.ParseFloat also takes "Inf", "0x1p3" and "1_0", which no JSON holds. An empty Number
// is 0, as encoding/json marshals it.
func appendNumberText(buf []byte, text string) ([]byte, error) {
	if text == "" {
		return append(buf, '0'), nil
	}
	if n := scanNumber(text); n != len(text) {
		return nil, fmt.Errorf("%w: number %q", ErrInvalidJSON, text)
	}
	// A grammatical number only fails ParseFloat by overflowing, and then f is ±Inf, which
	// JavaScript's Number() also yields; appendNumber prints it as null.
	f, _ := strconv.ParseFloat(text, 64)
	return appendNumber(buf, f), nil
}

// appendNumber prints f as ECMAScript Number::toString (radix 10) does, which is also what
// JSON.stringify writes, except that a non-finite value is null. strconv's shortest
// round-trip digits are the digits the spec asks for; only the layout differs from Go's.
func appendNumber(buf []byte, f float64) []byte {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return append(buf, "null"...)
	}
	if f == 0 {
		return append(buf, '0') // also -0: JavaScript prints it without its sign
	}
	if f < 0 {
		buf = append(buf, '-')
		f = -f
	}
	var tmp [32]byte
	e := strconv.AppendFloat(tmp[:0], f, 'e', -1, 64) // "d.ddde±XX" or "de±XX"
	mark := slices.Index(e, 'e')
	exp, _ := strconv.Atoi(string(e[mark+1:]))
	var digitsBuf [24]byte
	digits := append(digitsBuf[:0], e[0])
	if mark > 1 {
		digits = append(digits, e[2:mark]...)
	}
	k, n := len(digits), exp+1 // the value is 0.digits × 10^n
	switch {
	case k <= n && n <= 21:
		buf = append(buf, digits...)
		for range n - k {
			buf = append(buf, '0')
		}
	case 0 < n && n <= 21:
		buf = append(buf, digits[:n]...)
		buf = append(buf, '.')
		buf = append(buf, digits[n:]...)
	case -6 < n && n <= 0:
		buf = append(buf, "0."...)
		for range -n {
			buf = append(buf, '0')
		}
		buf = append(buf, digits...)
	default:
		buf = append(buf, digits[0])
		if k > 1 {
			buf = append(buf, '.')
			buf = append(buf, digits[1:]...)
		}
		buf = append(buf, 'e')
		if n-1 >= 0 {
			buf = append(buf, '+')
		}
		buf = strconv.AppendInt(buf, int64(n-1), 10)
	}
	return buf
}

const hexDigits = "0123456789abcdef"

// appendString quotes s as JSON.stringify does (ES2019 well-formed): the two-character
// escapes, \u00xx for the other C0 controls, \udxxx for a lone surrogate, and every other
// character raw, which includes <, >, &, DEL, U+2028 and U+2029.
func appendString(buf []byte, s string) []byte {
	buf = append(buf, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch c {
			case '"':
				buf = append(buf, '\\', '"')
			case '\\':
				buf = append(buf, '\\', '\\')
			case '\b':
				buf = append(buf, '\\', 'b')
			case '\f':
				buf = append(buf, '\\', 'f')
			case '\n':
				buf = append(buf, '\\', 'n')
			case '\r':
				buf = append(buf, '\\', 'r')
			case '\t':
				buf = append(buf, '\\', 't')
			default:
				if c < 0x20 {
					buf = append(buf, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
				} else {
					buf = append(buf, c)
				}
			}
			i++
			continue
		}
		r, size := decodeRune(s[i:], true)
		i += size
		if isHighSurrogate(r) && i < len(s) {
			if r2, size2 := decodeRune(s[i:], true); isLowSurrogate(r2) {
				// Two code units that JavaScript would see side by side form one character.
				buf = utf8.AppendRune(buf, utf16.DecodeRune(r, r2))
				i += size2
				continue
			}
		}
		if isHighSurrogate(r) || isLowSurrogate(r) {
			buf = append(buf, '\\', 'u',
				hexDigits[r>>12&0xF], hexDigits[r>>8&0xF], hexDigits[r>>4&0xF], hexDigits[r&0xF])
			continue
		}
		buf = utf8.AppendRune(buf, r)
	}
	return append(buf, '"')
}

func isHighSurrogate(r rune) bool { return 0xD800 <= r && r < 0xDC00 }
func isLowSurrogate(r rune) bool  { return 0xDC00 <= r && r < 0xE000 }

// decodeRune reads one character from the start of s, which must not be empty. Invalid UTF-8
// is U+FFFD covering its maximal subpart, as the WHATWG decoder Node uses replaces it: a
// truncated but otherwise valid sequence is one U+FFFD, any other bad byte one each. With
// surrogates set, the 3-byte form of a surrogate code point (ED A0..BF 80..BF) yields that
// surrogate, which is how decoded JSON text carries a lone one in a Go string.
func decodeRune(s string, surrogates bool) (rune, int) {
	c := s[0]
	if c < utf8.RuneSelf {
		return rune(c), 1
	}
	if r, size := utf8.DecodeRuneInString(s); r != utf8.RuneError || size > 1 {
		return r, size
	}
	if surrogates && c == 0xED && len(s) >= 3 && 0xA0 <= s[1] && s[1] <= 0xBF && 0x80 <= s[2] && s[2] <= 0xBF {
		return 0xD000 | rune(s[1]&0x3F)<<6 | rune(s[2]&0x3F), 3
	}
	var need int
	lo, hi := byte(0x80), byte(0xBF) // the range of the byte after the lead
	switch {
	case 0xC2 <= c && c <= 0xDF:
		need = 1
	case c == 0xE0:
		need, lo = 2, 0xA0
	case c == 0xED:
		need, hi = 2, 0x9F
	case 0xE1 <= c && c <= 0xEF:
		need = 2
	case c == 0xF0:
		need, lo = 3, 0x90
	case c == 0xF4:
		need, hi = 3, 0x8F
	case 0xF1 <= c && c <= 0xF3:
		need = 3
	default:
		return utf8.RuneError, 1
	}
	size := 1
	for ; size <= need && size < len(s); size++ {
		if s[size] < lo || s[size] > hi {
			break
		}
		lo, hi = 0x80, 0xBF
	}
	return utf8.RuneError, size
}

// compareKeys orders keys as Array.prototype.sort orders strings: by UTF-16 code units, so a
// character above U+FFFF (a surrogate pair, D800..DBFF first) sorts before U+E000..U+FFFF,
// unlike in byte order. Two keys that read as the same units (different invalid bytes, each
// U+FFFD) fall back to byte order, so the output is still deterministic.
func compareKeys(a, b string) int {
	ua, ub := unitReader{s: a}, unitReader{s: b}
	for {
		x, okA := ua.next()
		y, okB := ub.next()
		switch {
		case !okA && !okB:
			return strings.Compare(a, b)
		case !okA:
			return -1
		case !okB:
			return 1
		case x != y:
			return int(x) - int(y)
		}
	}
}

// unitReader yields the UTF-16 code units of a Go string as appendString reads it.
type unitReader struct {
	s       string
	i       int
	pending rune // the low half of a pair whose high half was just returned, or 0
}

func (u *unitReader) next() (rune, bool) {
	if u.pending != 0 {
		r := u.pending
		u.pending = 0
		return r, true
	}
	if u.i >= len(u.s) {
		return 0, false
	}
	r, size := decodeRune(u.s[u.i:], true)
	u.i += size
	if r >= 0x10000 {
		hi, lo := utf16.EncodeRune(r)
		u.pending = lo
		return hi, true
	}
	return r, true
}

// decode parses JSON text into nil, bool, json.Number, string, []any and map[string]any, with
// JSON.parse's semantics where they differ from encoding/json's (lone surrogates, invalid
// UTF-8; see Canonical). encoding/json is the acceptance oracle: a document it refuses is
// refused here too, whatever this parser concluded.
func decode(data []byte) (any, error) {
	p := parser{data: data}
	p.skipSpace()
	v, err := p.value(0)
	if err != nil {
		return nil, err
	}
	p.skipSpace()
	if p.pos != len(p.data) {
		return nil, p.fail("trailing data after the value")
	}
	if !json.Valid(data) {
		return nil, fmt.Errorf("%w: refused by encoding/json", ErrInvalidJSON)
	}
	return v, nil
}

type parser struct {
	data []byte
	pos  int
}

func (p *parser) fail(what string) error {
	return fmt.Errorf("%w: %s at offset %d", ErrInvalidJSON, what, p.pos)
}

func (p *parser) skipSpace() {
	for p.pos < len(p.data) {
		switch p.data[p.pos] {
		case ' ', '\t', '\n', '\r':
			p.pos++
		default:
			return
		}
	}
}

// value parses one value at p.pos, which sits inside depth containers.
func (p *parser) value(depth int) (any, error) {
	if p.pos >= len(p.data) {
		return nil, p.fail("unexpected end of input")
	}
	switch c := p.data[p.pos]; {
	case c == '{':
		return p.object(depth)
	case c == '[':
		return p.array(depth)
	case c == '"':
		return p.string()
	case c == '-' || ('0' <= c && c <= '9'):
		n := scanNumber(p.data[p.pos:])
		if n == 0 {
			return nil, p.fail("malformed number")
		}
		v := json.Number(p.data[p.pos : p.pos+n])
		p.pos += n
		return v, nil
	default:
		for _, lit := range [...]struct {
			text string
			v    any
		}{{"true", true}, {"false", false}, {"null", nil}} {
			if bytes.HasPrefix(p.data[p.pos:], []byte(lit.text)) {
				p.pos += len(lit.text)
				return lit.v, nil
			}
		}
		return nil, p.fail(fmt.Sprintf("unexpected character %q", c))
	}
}

func (p *parser) object(depth int) (any, error) {
	if depth >= MaxDepth {
		return nil, ErrTooDeep
	}
	p.pos++ // '{'
	m := map[string]any{}
	p.skipSpace()
	if p.pos < len(p.data) && p.data[p.pos] == '}' {
		p.pos++
		return m, nil
	}
	for {
		if p.pos >= len(p.data) || p.data[p.pos] != '"' {
			return nil, p.fail("expected a string key")
		}
		key, err := p.string()
		if err != nil {
			return nil, err
		}
		p.skipSpace()
		if p.pos >= len(p.data) || p.data[p.pos] != ':' {
			return nil, p.fail("expected ':'")
		}
		p.pos++
		p.skipSpace()
		v, err := p.value(depth + 1)
		if err != nil {
			return nil, err
		}
		m[key] = v // a repeated key keeps its last value, as in JSON.parse
		p.skipSpace()
		if p.pos >= len(p.data) {
			return nil, p.fail("unexpected end of input in object")
		}
		switch p.data[p.pos] {
		case ',':
			p.pos++
			p.skipSpace()
		case '}':
			p.pos++
			return m, nil
		default:
			return nil, p.fail("expected ',' or '}'")
		}
	}
}

func (p *parser) array(depth int) (any, error) {
	if depth >= MaxDepth {
		return nil, ErrTooDeep
	}
	p.pos++ // '['
	a := []any{}
	p.skipSpace()
	if p.pos < len(p.data) && p.data[p.pos] == ']' {
		p.pos++
		return a, nil
	}
	for {
		v, err := p.value(depth + 1)
		if err != nil {
			return nil, err
		}
		a = append(a, v)
		p.skipSpace()
		if p.pos >= len(p.data) {
			return nil, p.fail("unexpected end of input in array")
		}
		switch p.data[p.pos] {
		case ',':
			p.pos++
			p.skipSpace()
		case ']':
			p.pos++
			return a, nil
		default:
			return nil, p.fail("expected ',' or ']'")
		}
	}
}

// string parses a string literal at p.pos. Raw invalid UTF-8 becomes U+FFFD (Node decoded the
// file before JSON.parse saw it); an escaped surrogate pair becomes its character; an escaped
// surrogate without its partner is kept in its 3-byte form for appendString to escape again.
func (p *parser) string() (string, error) {
	p.pos++ // '"'
	var out []byte
	for {
		out = append(out, p.plain()...)
		if p.pos >= len(p.data) {
			return "", p.fail("unterminated string")
		}
		switch c := p.data[p.pos]; {
		case c == '"':
			p.pos++
			return string(out), nil
		case c < 0x20:
			return "", p.fail("control character in string")
		case c >= utf8.RuneSelf:
			r, size := decodeRune(string(p.data[p.pos:min(p.pos+utf8.UTFMax, len(p.data))]), false)
			out = utf8.AppendRune(out, r)
			p.pos += size
		default: // '\\'
			var err error
			if out, err = p.escape(out); err != nil {
				return "", err
			}
		}
	}
}

// plain returns the run of ASCII at p.pos that needs no decoding, which a string holds as written.
func (p *parser) plain() []byte {
	start := p.pos
	for p.pos < len(p.data) {
		c := p.data[p.pos]
		if c == '"' || c == '\\' || c < 0x20 || c >= utf8.RuneSelf {
			break
		}
		p.pos++
	}
	return p.data[start:p.pos]
}

// escape appends the character of the backslash escape at p.pos, refusing one JSON does not define.
func (p *parser) escape(out []byte) ([]byte, error) {
	if p.pos+1 >= len(p.data) {
		return nil, p.fail("unterminated escape")
	}
	esc := p.data[p.pos+1]
	p.pos += 2
	switch esc {
	case '"', '\\', '/':
		return append(out, esc), nil
	case 'b':
		return append(out, '\b'), nil
	case 'f':
		return append(out, '\f'), nil
	case 'n':
		return append(out, '\n'), nil
	case 'r':
		return append(out, '\r'), nil
	case 't':
		return append(out, '\t'), nil
	case 'u':
		return p.unicodeEscape(out)
	}
	p.pos -= 2
	return nil, p.fail("invalid escape")
}

// unicodeEscape appends the unit of a \u escape, joining an escaped surrogate pair as JSON.parse does.
func (p *parser) unicodeEscape(out []byte) ([]byte, error) {
	r, ok := p.hex4()
	if !ok {
		return nil, p.fail("malformed \\u escape")
	}
	if isHighSurrogate(r) && p.pos+1 < len(p.data) && p.data[p.pos] == '\\' && p.data[p.pos+1] == 'u' {
		save := p.pos
		p.pos += 2
		if r2, ok := p.hex4(); ok && isLowSurrogate(r2) {
			return utf8.AppendRune(out, utf16.DecodeRune(r, r2)), nil
		}
		p.pos = save
	}
	return appendUnit(out, r), nil
}

// hex4 reads the four hex digits of a \u escape.
func (p *parser) hex4() (rune, bool) {
	if p.pos+4 > len(p.data) {
		return 0, false
	}
	v, err := strconv.ParseUint(string(p.data[p.pos:p.pos+4]), 16, 16)
	if err != nil {
		return 0, false
	}
	p.pos += 4
	return rune(v), true
}

// appendUnit appends one UTF-16 code unit, writing a surrogate in the 3-byte form decodeRune
// reads back (utf8.AppendRune would write U+FFFD for it).
func appendUnit(buf []byte, r rune) []byte {
	if isHighSurrogate(r) || isLowSurrogate(r) {
		return append(buf, 0xED, byte(0x80|(r>>6)&0x3F), byte(0x80|r&0x3F))
	}
	return utf8.AppendRune(buf, r)
}

// scanNumber returns the length of the JSON number at the start of s, or 0 if there is none:
// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func scanNumber[T string | []byte](s T) int {
	i := 0
	digits := func() int {
		start := i
		for i < len(s) && '0' <= s[i] && s[i] <= '9' {
			i++
		}
		return i - start
	}
	if i < len(s) && s[i] == '-' {
		i++
	}
	switch {
	case i < len(s) && s[i] == '0':
		i++
	case digits() == 0:
		return 0
	}
	if i < len(s) && s[i] == '.' {
		i++
		if digits() == 0 {
			return 0
		}
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		if digits() == 0 {
			return 0
		}
	}
	return i
}
