package fingerprint

import (
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"
	"unicode/utf8"
)

func mustCanonical(t testing.TB, v any) string {
	t.Helper()
	got, err := Canonical(v)
	if err != nil {
		t.Fatalf("Canonical(%#v): %v", v, err)
	}
	return string(got)
}

// TestNumbers pins Number::toString's layout; each row was checked against node's String(x).
func TestNumbers(t *testing.T) {
	cases := []struct {
		text string // JSON number text, read as JSON.parse reads it
		want string
	}{
		{"0", "0"},
		{"-0", "0"},
		{"-0.0e5", "0"},
		{"12.0", "12"},
		{"100", "100"},
		{"0.1", "0.1"},
		{"-1.5", "-1.5"},
		{"1E5", "100000"},
		{"123456789012", "123456789012"},
		{"1e20", "100000000000000000000"},
		{"999999999999999900000", "999999999999999900000"},
		{"1e21", "1e+21"},
		{"1.5e21", "1.5e+21"},
		{"123e-20", "1.23e-18"},
		{"1e-6", "0.000001"},
		{"0.000001234", "0.000001234"},
		{"1e-7", "1e-7"},
		{"1.5e-7", "1.5e-7"},
		{"-1.234e-7", "-1.234e-7"},
		{"5e-324", "5e-324"},
		{"2.4703282292062328e-324", "5e-324"},
		{"1e-400", "0"},
		{"-1e-400", "0"},
		{"1.7976931348623157e308", "1.7976931348623157e+308"},
		{"1e400", "null"},
		{"-1e400", "null"},
		{"9007199254740993", "9007199254740992"},
		{"9007199254740995", "9007199254740996"},
		{"0.30000000000000004", "0.30000000000000004"},
		{"123456789012345678901234567890", "1.2345678901234568e+29"},
	}
	for _, c := range cases {
		if got := mustCanonical(t, json.Number(c.text)); got != c.want {
			t.Errorf("json.Number(%s) = %s, want %s", c.text, got, c.want)
		}
		if got := mustCanonical(t, json.RawMessage(c.text)); got != c.want {
			t.Errorf("raw %s = %s, want %s", c.text, got, c.want)
		}
	}
	floats := []struct {
		f    float64
		want string
	}{
		{math.Copysign(0, -1), "0"},
		{1e21, "1e+21"},
		{1e-7, "1e-7"},
		{math.MaxFloat64, "1.7976931348623157e+308"},
		{math.SmallestNonzeroFloat64, "5e-324"},
		{math.NaN(), "null"},
		{math.Inf(1), "null"},
		{math.Inf(-1), "null"},
	}
	for _, c := range floats {
		if got := mustCanonical(t, c.f); got != c.want {
			t.Errorf("float64 %v = %s, want %s", c.f, got, c.want)
		}
	}
}

func TestNumberTextOutsideJSONGrammar(t *testing.T) {
	for _, text := range []string{"abc", "0x10", "1_0", "Inf", "NaN", " 1", "1 ", "+1", "01", "1.", ".5", "1e", "--1"} {
		if _, err := Canonical(json.Number(text)); !errors.Is(err, ErrInvalidJSON) {
			t.Errorf("json.Number(%q): err = %v, want ErrInvalidJSON", text, err)
		}
	}
	if got := mustCanonical(t, json.Number("")); got != "0" {
		t.Errorf(`json.Number("") = %s, want 0 as encoding/json marshals it`, got)
	}
}

func TestStrings(t *testing.T) {
	cases := []struct {
		in   string
		want string
	}{
		{"", `""`},
		{`quote" back\ slash/`, `"quote\" back\\ slash/"`},
		{"\b\f\n\r\t", `"\b\f\n\r\t"`},
		{"\x00\x01\x0b\x1f", `"\u0000\u0001\u000b\u001f"`},
		{"\x7f <>& \u2028\u2029", "\"\x7f <>& \u2028\u2029\""},
		{"é中😀\ufeff\uffff", "\"é中😀\ufeff\uffff\""},
		// invalid UTF-8: U+FFFD per maximal subpart, as Node's decoder
		{"a\xffb", "\"a\ufffdb\""},
		{"\xe2\x82A", "\"\ufffdA\""},
		{"\xf0\x9f\x98", "\"\ufffd\""},
		{"\xc0\xaf", "\"\ufffd\ufffd\""},
		// the 3-byte form of a surrogate is that lone surrogate; two of them form a pair
		{"\xed\xa0\x80", `"\ud800"`},
		{"x\xed\xbf\xbfy", `"x\udfffy"`},
		{"\xed\xa0\xbd\xed\xb8\x80", "\"😀\""},
		{"\xed\xb8\x80\xed\xa0\xbd", `"\ude00\ud83d"`},
		{"\xed\xa0", "\"\ufffd\ufffd\""},
	}
	for _, c := range cases {
		if got := mustCanonical(t, c.in); got != c.want {
			t.Errorf("string %q = %s, want %s", c.in, got, c.want)
		}
	}
}

func TestRawStrings(t *testing.T) {
	cases := []struct {
		raw  string
		want string
	}{
		{`"\u0041\/\u00e9"`, `"A/é"`},
		{`"\u003c\u2028"`, "\"<\u2028\""},
		{`"\ud83d\ude00"`, "\"😀\""},
		{`"\uD83D\uDE00"`, "\"😀\""},
		{`"\ud800"`, `"\ud800"`},
		{`"\uDC00x"`, `"\udc00x"`},
		{`"\ud800\u0041"`, `"\ud800A"`},
		{`"\ude00\ud83d"`, `"\ude00\ud83d"`},
		{`"\ud83d\ud83d\ude00"`, "\"\\ud83d😀\""},
		{`"\u0000\u001F\u007f"`, "\"\\u0000\\u001f\x7f\""},
		// raw invalid bytes are decoded before the string is read, so they never form a surrogate
		{"\"\xed\xa0\x80\"", "\"\ufffd\ufffd\ufffd\""},
		{"\"\xe2\x82\"", "\"\ufffd\""},
	}
	for _, c := range cases {
		if got := mustCanonical(t, json.RawMessage(c.raw)); got != c.want {
			t.Errorf("raw %s = %s, want %s", c.raw, got, c.want)
		}
	}
}

// TestKeyOrderUTF16 proves keys sort by UTF-16 code units: U+1F600 is D83D DE00 in UTF-16, so
// it sorts before U+E000 and U+FFFF, although its UTF-8 bytes (F0 ...) sort after theirs (EE, EF).
func TestKeyOrderUTF16(t *testing.T) {
	v := map[string]any{"\uffff": 1.0, "😀": 2.0, "\ue000": 3.0, "z": 4.0, "é": 5.0, "": 6.0}
	want := "{\"\":6,\"z\":4,\"é\":5,\"😀\":2,\"\ue000\":3,\"\uffff\":1}"
	if got := mustCanonical(t, v); got != want {
		t.Errorf("got %s, want %s", got, want)
	}
	// Byte order would put U+FFFF first; that is the mistake this test exists to catch.
	if !strings.HasPrefix(mustCanonical(t, map[string]any{"\uffff": nil, "\U00010000": nil}), "{\"\U00010000\"") {
		t.Error("a supplementary character must sort before U+FFFF")
	}
	// Integer-like keys are strings to Array.prototype.sort: "10" < "2" < "9"; case is by code unit.
	if got := mustCanonical(t, json.RawMessage(`{"9":0,"10":0,"2":0,"b":0,"B":0,"a":0,"aa":0}`)); got != `{"10":0,"2":0,"9":0,"B":0,"a":0,"aa":0,"b":0}` {
		t.Errorf("got %s", got)
	}
	// A lone surrogate key sorts by its unit too.
	if got := mustCanonical(t, json.RawMessage(`{"\uffff":0,"\udc00":1,"\ud800":2}`)); got != "{\"\\ud800\":2,\"\\udc00\":1,\"\uffff\":0}" {
		t.Errorf("got %s", got)
	}
}

// TestInputShapesAgree proves a raw document, its encoding/json trees and a struct hash alike.
func TestInputShapesAgree(t *testing.T) {
	docs := []string{
		`{"b":[1,2.5,{"z":null,"y":true}],"a":"x\u2028","c":{}}`,
		`[1e2, -0, 0.1, "\u00e9", false, []]`,
		`"plain"`,
		`{"run":{"folder":"/srv/app","secrets":["A","B"]},"pattern":"0 3 * * *"}`,
	}
	for _, doc := range docs {
		want := mustCanonical(t, json.RawMessage(doc))
		var plain any
		if err := json.Unmarshal([]byte(doc), &plain); err != nil {
			t.Fatal(err)
		}
		for name, in := range map[string]any{
			"bytes": []byte(doc), "float64": plain, "useNumber": unmarshalNumber(t, []byte(doc)),
			"nested raw": []any{json.RawMessage(doc)},
		} {
			got := mustCanonical(t, in)
			if name == "nested raw" {
				got = strings.TrimSuffix(strings.TrimPrefix(got, "["), "]")
			}
			if got != want {
				t.Errorf("%s of %s = %s, want %s", name, doc, got, want)
			}
		}
	}
}

func TestStructsAndTypedValues(t *testing.T) {
	type run struct {
		Folder  string   `json:"folder"`
		Secrets []string `json:"secrets,omitempty"`
		Timeout int      `json:"timeoutMinutes"`
	}
	type entry struct {
		SchedulerID string            `json:"schedulerId"`
		Run         *run              `json:"run"`
		Labels      map[string]string `json:"labels"`
		Raw         json.RawMessage   `json:"raw"`
		Big         int64             `json:"big"`
		HTML        string            `json:"html"`
		skipped     int
	}
	v := entry{SchedulerID: "n", Run: &run{Folder: "/srv", Timeout: 45},
		Labels: map[string]string{"b": "2", "a": "1"}, Raw: json.RawMessage(`{"y":1,"x":2}`),
		Big: 1<<53 + 1, HTML: "<a&b>", skipped: 7}
	want := `{"big":9007199254740992,"html":"<a&b>","labels":{"a":"1","b":"2"},"raw":{"x":2,"y":1},"run":{"folder":"/srv","timeoutMinutes":45},"schedulerId":"n"}`
	if got := mustCanonical(t, v); got != want {
		t.Errorf("struct = %s\nwant     %s", got, want)
	}
	if got := mustCanonical(t, map[string]any{"n": 3, "u": uint8(7), "p": (*run)(nil), "f": float32(0.5)}); got != `{"f":0.5,"n":3,"p":null,"u":7}` {
		t.Errorf("typed values = %s", got)
	}
	// A []byte below the top is what encoding/json makes of it: base64 text.
	if got := mustCanonical(t, map[string]any{"b": []byte("hi")}); got != `{"b":"aGk="}` {
		t.Errorf("nested []byte = %s", got)
	}
	if _, err := Canonical(map[string]any{"f": func() {}}); err == nil {
		t.Error("a func cannot be hashed: want an error")
	}
	if got := mustCanonical(t, json.RawMessage(nil)); got != "null" {
		t.Errorf("nil RawMessage = %s, want null", got)
	}
}

func TestDuplicateKeysLastWins(t *testing.T) {
	got := mustCanonical(t, json.RawMessage(`{"a":1,"b":0,"a":{"x":[2]},"__proto__":3}`))
	if want := `{"__proto__":3,"a":{"x":[2]},"b":0}`; got != want {
		t.Errorf("got %s, want %s", got, want)
	}
}

func TestInvalidJSONText(t *testing.T) {
	for _, doc := range []string{
		"", " ", "1 2", "{}x", "{} {}", "[1,]", "[,1]", `{"a"}`, `{"a":1,}`, `{a:1}`, "01", "1.", "-", "+1",
		".5", "nul", "truex", "[", "]", `"abc`, "\"\x01\"", `"\x"`, `"\ud8"`, `"\u12G4"`, "\ufeff1",
		"[1]\x00", "\x00", "'a'", "NaN", "Infinity", `{"a":1}}`, "[1 2]",
	} {
		_, err := Canonical(json.RawMessage(doc))
		if !errors.Is(err, ErrInvalidJSON) {
			t.Errorf("%q: err = %v, want ErrInvalidJSON", doc, err)
		}
		if json.Valid([]byte(doc)) {
			t.Errorf("%q: encoding/json accepts it; the case is wrong", doc)
		}
	}
}

func nested(depth int) []byte {
	return []byte(strings.Repeat("[", depth) + strings.Repeat("]", depth))
}

// TestDeepNesting proves hostile depth is an error, never a crash, on every input path.
func TestDeepNesting(t *testing.T) {
	if _, err := Canonical(json.RawMessage(nested(MaxDepth))); err != nil {
		t.Errorf("%d levels are allowed (encoding/json allows them too): %v", MaxDepth, err)
	}
	if !json.Valid(nested(MaxDepth)) {
		t.Error("encoding/json's limit moved; MaxDepth should follow it")
	}
	for _, depth := range []int{MaxDepth + 1, 100_000} {
		if _, err := Canonical(json.RawMessage(nested(depth))); !errors.Is(err, ErrTooDeep) {
			t.Errorf("raw, %d levels: err = %v, want ErrTooDeep", depth, err)
		}
		// What a caller does before handing us a tree: encoding/json refuses it with an error.
		var v any
		if err := json.Unmarshal(nested(depth), &v); err == nil {
			t.Errorf("encoding/json accepted %d levels", depth)
		}
		var deep any = []any{}
		for range depth - 1 {
			deep = []any{deep}
		}
		if _, err := Canonical(deep); !errors.Is(err, ErrTooDeep) {
			t.Errorf("[]any, %d levels: err = %v, want ErrTooDeep", depth, err)
		}
	}
	// A RawMessage inside a Go tree counts from the tree's depth.
	wrap := func(inner []byte) any {
		var outer any = json.RawMessage(inner)
		for range MaxDepth / 2 {
			outer = map[string]any{"k": outer}
		}
		return outer
	}
	if _, err := Canonical(wrap(nested(MaxDepth / 2))); err != nil {
		t.Errorf("tree of raw, %d levels in all: %v", MaxDepth, err)
	}
	if _, err := Canonical(wrap(nested(MaxDepth/2 + 1))); !errors.Is(err, ErrTooDeep) {
		t.Errorf("tree of raw, %d levels in all: err = %v, want ErrTooDeep", MaxDepth+1, err)
	}
	// A cycle is unbounded depth.
	cyclic := map[string]any{}
	cyclic["self"] = cyclic
	if _, err := Canonical(cyclic); !errors.Is(err, ErrTooDeep) {
		t.Errorf("cyclic map: err = %v, want ErrTooDeep", err)
	}
	// A deep value of a recursive type goes through encoding/json.Marshal, then is refused.
	type tree []tree
	var typed tree
	for range 20_000 {
		typed = tree{typed}
	}
	if _, err := Canonical(typed); !errors.Is(err, ErrTooDeep) {
		t.Errorf("recursive type: err = %v, want ErrTooDeep", err)
	}
}

// hasLoneSurrogateEscape reports whether JSON text holds a \udxxx escape, which is how
// canonical output writes a lone surrogate (a pair is always written raw).
func hasLoneSurrogateEscape(text []byte) bool {
	for i := 0; i < len(text)-2; i++ {
		if text[i] == '\\' {
			if text[i+1] == 'u' && (text[i+2] == 'd' || text[i+2] == 'D') {
				return true
			}
			i++ // skip the escaped character, so `\\ud` is not mistaken for one
		}
	}
	return false
}

func FuzzCanonical(f *testing.F) {
	for _, row := range loadVectors(f) {
		f.Add([]byte(row.JSON))
	}
	for _, seed := range []string{
		`{"\ud800":1,"\ufffd":2}`, `"\ud83d\ude00\udc00"`, "\"\xed\xa0\x80\xe2\x82\"", `[1e400,-0,5e-324,1e21,1e-7]`,
		`{"a":1,"a":2}`, "[1,]", "", " ", "{} x", `{"\u2028":"\u0000<>&"}`, string(nested(50)),
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		// Any bytes as a Go string: valid JSON out, and a fixed point through our own reader.
		quoted, err := Canonical(string(data))
		if err != nil || !json.Valid(quoted) || !utf8.Valid(quoted) {
			t.Fatalf("string %q: %q, %v", data, quoted, err)
		}
		if again := mustCanonical(t, json.RawMessage(quoted)); again != string(quoted) {
			t.Fatalf("string %q: %s re-reads as %s", data, quoted, again)
		}

		raw := append(json.RawMessage{}, data...) // never nil: nil is null, not invalid
		out, err := Canonical(raw)
		if !json.Valid(data) {
			if err == nil {
				t.Fatalf("%q is not JSON, yet Canonical gave %s", data, out)
			}
			return
		}
		if errors.Is(err, ErrTooDeep) {
			return
		}
		if err != nil {
			t.Fatalf("%q is JSON, yet Canonical failed: %v", data, err)
		}
		if !json.Valid(out) || !utf8.Valid(out) {
			t.Fatalf("output %q is not valid UTF-8 JSON", out)
		}
		if again := mustCanonical(t, json.RawMessage(out)); again != string(out) {
			t.Fatalf("not a fixed point: %s -> %s", out, again)
		}
		if hasLoneSurrogateEscape(out) {
			return // encoding/json turns a lone surrogate into U+FFFD; JSON.parse does not
		}
		if again := mustCanonical(t, unmarshalNumber(t, out)); again != string(out) {
			t.Fatalf("not a fixed point through encoding/json: %s -> %s", out, again)
		}
		if utf8.Valid(data) {
			// Where encoding/json and JSON.parse read the same value, the trees hash alike.
			if viaStd := mustCanonical(t, unmarshalNumber(t, data)); viaStd != string(out) {
				t.Fatalf("%q: raw gives %s, encoding/json's tree gives %s", data, out, viaStd)
			}
		}
	})
}
