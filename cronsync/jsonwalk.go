package cronsync

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// syntaxError describes why data is not one valid JSON value, with a line and
// column an operator can jump to.
func syntaxError(data []byte) string {
	var v any
	err := json.Unmarshal(data, &v)
	var se *json.SyntaxError
	if errors.As(err, &se) {
		line, col := lineCol(data, se.Offset)
		return fmt.Sprintf("invalid JSON at line %d, column %d: %v", line, col, se)
	}
	if err != nil {
		return "invalid JSON: " + err.Error()
	}
	return "invalid JSON"
}

// lineCol locates the byte a *json.SyntaxError blames: the last one read.
func lineCol(data []byte, offset int64) (line, col int) {
	offset = min(offset-1, int64(len(data)))
	offset = max(offset, 0)
	line, col = 1, 1
	for _, c := range data[:offset] {
		if c == '\n' {
			line++
			col = 1
		} else {
			col++
		}
	}
	return line, col
}

// object decodes raw as a JSON object. ok is false when raw is anything else.
func object(raw json.RawMessage) (map[string]json.RawMessage, bool) {
	if len(raw) == 0 || raw[0] != '{' {
		return nil, false
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, false
	}
	return m, true
}

// sortedKeys returns m's keys in order, so messages come out the same every time.
func sortedKeys(m map[string]json.RawMessage) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// compact returns raw without insignificant whitespace, in key order as
// written, with <, >, &, U+2028 and U+2029 escaped as encoding/json escapes them
// when it embeds a raw value: the same text whether it is written back through
// MarshalJSON or through json.Marshal, so a written-back file parses to equal
// bytes. The escapes do not change the value, nor so any fingerprint.
func compact(raw json.RawMessage) json.RawMessage {
	var c, b bytes.Buffer
	if err := json.Compact(&c, raw); err != nil {
		return append(json.RawMessage(nil), raw...)
	}
	json.HTMLEscape(&b, c.Bytes())
	return json.RawMessage(b.Bytes())
}

// clipQuote quotes a value for a message, cut at 64 bytes: a hostile file must
// not be able to fill a log line.
func clipQuote(s string) string {
	const limit = 64
	if len(s) <= limit {
		return strconv.Quote(s)
	}
	cut := limit
	for cut > 0 && !isRuneStart(s[cut]) {
		cut--
	}
	return strconv.Quote(s[:cut]) + "..."
}

func isRuneStart(b byte) bool { return b&0xC0 != 0x80 }

// suggest returns the known key that an unknown one most likely meant, or "".
// It catches case and separator slips (max_turns, MaxTurns) and small typos
// (patern, foldr).
func suggest(key string, known []string) string {
	norm := func(s string) string {
		return strings.ToLower(strings.NewReplacer("_", "", "-", "").Replace(s))
	}
	best, bestDist := "", 3
	for _, k := range known {
		if norm(k) == norm(key) {
			return k
		}
		if d := editDistance(strings.ToLower(key), strings.ToLower(k), bestDist); d < bestDist {
			best, bestDist = k, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance of a and b, or limit when it is at
// least limit (long hostile keys cost nothing).
func editDistance(a, b string, limit int) int {
	if len(a) > 64 || len(b) > 64 {
		return limit
	}
	diff := len(a) - len(b)
	if diff >= limit || -diff >= limit {
		return limit
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	if prev[len(b)] > limit {
		return limit
	}
	return prev[len(b)]
}
