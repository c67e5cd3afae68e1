package fingerprint

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// nodeCanonical is the original's fingerprint.mjs, verbatim where it computes, fed each
// document as Node reads a UTF-8 file: bytes -> Buffer.toString("utf8") -> JSON.parse.
const nodeCanonical = `
const { createHash } = require("node:crypto");
const fs = require("node:fs");
function canonical(value) {
	if (value === null || typeof value !== "object") return JSON.stringify(value ?? null);
	if (Array.isArray(value)) return ` + "`[${value.map(canonical).join(\",\")}]`" + `;
	const keys = Object.keys(value).sort();
	return ` + "`{${keys.map((k) => `${JSON.stringify(k)}:${canonical(value[k])}`).join(\",\")}}`" + `;
}
function fingerprint(value) {
	return createHash("sha256").update(canonical(value)).digest("hex").slice(0, 16);
}
const docs = JSON.parse(fs.readFileSync(process.argv[2], "utf8"));
const out = docs.map((b64) => {
	let value;
	try {
		value = JSON.parse(Buffer.from(b64, "base64").toString("utf8"));
	} catch {
		return null;
	}
	return [Buffer.from(canonical(value), "utf8").toString("base64"), fingerprint(value)];
});
process.stdout.write(JSON.stringify(out));
`

// TestAgainstNode generates random JSON documents (numbers of every magnitude and shape,
// strings with escapes, lone surrogates, raw invalid UTF-8, duplicate keys, some corrupted
// documents) and checks that Node running the original's code and this package agree on
// acceptance, canonical bytes and fingerprint. It needs node on PATH, as CI has.
func TestAgainstNode(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not on PATH; this cross-check needs it")
	}
	// The script is the original only if it reproduces the original's own vectors.
	rows := loadVectors(t)
	vectorDocs := make([][]byte, len(rows))
	for i, row := range rows {
		vectorDocs[i] = []byte(row.JSON)
	}
	for i, res := range compareWithNode(t, node, 0, vectorDocs) {
		if res == nil || res[1] != rows[i].Want {
			t.Errorf("node script on %s gives %v, the reference says %s", rows[i].JSON, res, rows[i].Want)
		}
	}
	seed := uint64(time.Now().UnixNano())
	for _, s := range []uint64{1, 2, seed} {
		rng := rand.New(rand.NewPCG(s, 0x5eed))
		docs := make([][]byte, 0, 300)
		for len(docs) < cap(docs) {
			g := docGen{rng: rng}
			g.value(0)
			doc := g.out
			if rng.IntN(10) == 0 {
				doc = corrupt(rng, doc)
			}
			docs = append(docs, doc)
		}
		compareWithNode(t, node, s, docs)
	}
}

// compareWithNode runs the documents through node and this package, reports every
// difference, and returns node's [canonical base64, fingerprint] per document (nil: refused).
func compareWithNode(t *testing.T, node string, seed uint64, docs [][]byte) []*[2]string {
	t.Helper()
	dir := t.TempDir()
	encoded := make([]string, len(docs))
	for i, d := range docs {
		encoded[i] = base64.StdEncoding.EncodeToString(d)
	}
	input, err := json.Marshal(encoded)
	if err != nil {
		t.Fatal(err)
	}
	docsPath, scriptPath := filepath.Join(dir, "docs.json"), filepath.Join(dir, "canonical.js")
	if err := os.WriteFile(docsPath, input, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(scriptPath, []byte(nodeCanonical), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stdout, err := exec.CommandContext(ctx, node, scriptPath, docsPath).Output()
	if err != nil {
		t.Fatalf("node: %v", err)
	}
	var results []*[2]string
	if err := json.Unmarshal(stdout, &results); err != nil || len(results) != len(docs) {
		t.Fatalf("node output (%d results for %d docs): %v", len(results), len(docs), err)
	}
	t.Logf("seed %d: %d documents compared with node", seed, len(docs))
	accepted := 0
	for i, doc := range docs {
		got, err := Canonical(json.RawMessage(doc))
		res := results[i]
		if res == nil {
			if err == nil {
				t.Errorf("seed %d doc %q: JSON.parse refuses it, Canonical gave %s", seed, doc, got)
			}
			continue
		}
		accepted++
		want, _ := base64.StdEncoding.DecodeString(res[0])
		if err != nil {
			t.Errorf("seed %d doc %q: JSON.parse accepts it, Canonical failed: %v", seed, doc, err)
			continue
		}
		if string(got) != string(want) {
			t.Errorf("seed %d doc %q:\n go   %s\n node %s", seed, doc, got, want)
			continue
		}
		if fp, err := Of(json.RawMessage(doc)); err != nil || fp != res[1] {
			t.Errorf("seed %d doc %q: Of = %q, %v; node %q", seed, doc, fp, err, res[1])
		}
	}
	if accepted < len(docs)/2 {
		t.Errorf("seed %d: only %d of %d documents were valid; the generator is broken", seed, accepted, len(docs))
	}
	return results
}

// docGen writes one random JSON document.
type docGen struct {
	rng *rand.Rand
	out []byte
}

func (g *docGen) space() {
	if g.rng.IntN(6) == 0 {
		g.out = append(g.out, " \t\n\r"[g.rng.IntN(4)])
	}
}

func (g *docGen) value(depth int) {
	g.space()
	switch k := g.rng.IntN(10); {
	case k < 4:
		g.out = append(g.out, g.number()...)
	case k < 6:
		g.str(12)
	case k == 6:
		g.out = append(g.out, []string{"true", "false", "null"}[g.rng.IntN(3)]...)
	case k == 7 && depth < 4:
		g.out = append(g.out, '[')
		for i := range g.rng.IntN(5) {
			if i > 0 {
				g.out = append(g.out, ',')
			}
			g.value(depth + 1)
		}
		g.out = append(g.out, ']')
	default:
		if depth >= 4 {
			g.out = append(g.out, g.number()...)
			break
		}
		g.out = append(g.out, '{')
		var keys []string
		for i := range g.rng.IntN(6) {
			if i > 0 {
				g.out = append(g.out, ',')
			}
			g.space()
			if len(keys) > 0 && g.rng.IntN(5) == 0 { // a duplicate key
				g.out = append(g.out, keys[g.rng.IntN(len(keys))]...)
			} else {
				start := len(g.out)
				g.str(3)
				keys = append(keys, string(g.out[start:]))
			}
			g.space()
			g.out = append(g.out, ':')
			g.value(depth + 1)
		}
		g.space()
		g.out = append(g.out, '}')
	}
	g.space()
}

// number returns JSON number text of one of several shapes, biased to the edges of
// Number::toString's layouts.
func (g *docGen) number() string {
	r := g.rng
	switch r.IntN(7) {
	case 0: // any finite double, shortest form
		f := math.Float64frombits(r.Uint64())
		if math.IsNaN(f) || math.IsInf(f, 0) {
			f = 0.5
		}
		return strconv.FormatFloat(f, 'g', -1, 64)
	case 1: // any double, more digits than needed
		f := math.Float64frombits(r.Uint64())
		if math.IsNaN(f) || math.IsInf(f, 0) {
			f = -2.5
		}
		return strconv.FormatFloat(f, 'e', r.IntN(25), 64)
	case 2: // integer text, up to 30 digits
		return digitsText(r, 1+r.IntN(30), true)
	case 3: // decimal with an exponent anywhere, including overflow and underflow
		s := digitsText(r, 1+r.IntN(20), true) + "." + digitsText(r, 1+r.IntN(20), false)
		return s + []string{"e", "E", "e+", "e-", "E-"}[r.IntN(5)] + strconv.Itoa(r.IntN(420))
	case 4: // around the layout boundaries 1e21 and 1e-6/1e-7
		base := []float64{1e21, 1e-6, 1e-7, 1e20, 1e-5}[r.IntN(5)]
		f := base
		for range r.IntN(3) {
			if r.IntN(2) == 0 {
				f = math.Nextafter(f, 0)
			} else {
				f = math.Nextafter(f, math.Inf(1))
			}
		}
		return strconv.FormatFloat(f*float64(1+r.IntN(9)), 'g', -1, 64)
	case 5: // around 2^53, as integer text
		return strconv.FormatUint(1<<53+uint64(r.IntN(64))-32, 10)
	default: // small and negative zero shapes
		return []string{"0", "-0", "0.0", "-0e5", "1", "-1", "0.1", "100", "1e0", "5e-324", "1e400", "-1e-400"}[r.IntN(12)]
	}
}

func digitsText(r *rand.Rand, n int, leading bool) string {
	var b strings.Builder
	for i := range n {
		d := r.IntN(10)
		if i == 0 && leading && n > 1 && d == 0 {
			d = 1
		}
		b.WriteByte(byte('0' + d))
	}
	if r.IntN(4) == 0 && leading {
		return "-" + b.String()
	}
	return b.String()
}

// str writes a string literal of up to max pieces.
func (g *docGen) str(max int) {
	r := g.rng
	g.out = append(g.out, '"')
	for range r.IntN(max + 1) {
		switch r.IntN(12) {
		case 0, 1:
			g.out = append(g.out, "abzAZ09 <>&/'~"[r.IntN(14)])
		case 2:
			g.out = append(g.out, []string{`\"`, `\\`, `\/`, `\b`, `\f`, `\n`, `\r`, `\t`}[r.IntN(8)]...)
		case 3: // a C0 control or DEL, escaped
			c := r.IntN(0x20)
			if r.IntN(4) == 0 {
				c = 0x7F
			}
			g.out = append(g.out, `\u00`+strconv.FormatInt(int64(c>>4), 16)+strings.ToUpper(strconv.FormatInt(int64(c&0xF), 16))...)
		case 4: // any BMP character raw (a surrogate here would be invalid UTF-8)
			g.out = appendUnit(g.out, rune(0x80+r.IntN(0xFFFF-0x80)))
		case 5:
			g.out = append(g.out, []string{"\u2028", "\u2029", "\ufeff", "\uffff", "\ue000", "é"}[r.IntN(6)]...)
		case 6: // a supplementary character raw
			g.out = append(g.out, string(rune(0x10000+r.IntN(0x10FFFF-0x10000)))...)
		case 7: // a \u escape of any unit, lone surrogates included
			g.out = append(g.out, `\u`+leftPad(strconv.FormatInt(int64(r.IntN(0x10000)), 16))...)
		case 8: // a surrogate escape: high, low, or a pair
			hi, lo := 0xD800+r.IntN(0x400), 0xDC00+r.IntN(0x400)
			switch r.IntN(3) {
			case 0:
				g.out = append(g.out, `\u`+strconv.FormatInt(int64(hi), 16)...)
			case 1:
				g.out = append(g.out, `\u`+strings.ToUpper(strconv.FormatInt(int64(lo), 16))...)
			default:
				g.out = append(g.out, `\u`+strconv.FormatInt(int64(hi), 16)+`\u`+strconv.FormatInt(int64(lo), 16)...)
			}
		case 9: // raw bytes that may be invalid UTF-8
			for range 1 + r.IntN(3) {
				g.out = append(g.out, byte(0x80+r.IntN(0x80)))
			}
		case 10: // a truncated or surrogate-form multibyte sequence
			g.out = append(g.out, []string{"\xe2\x82", "\xf0\x9f\x98", "\xed\xa0\x80", "\xed\x9f\xbf", "\xc0\xaf", "\xf4\x90\x80\x80", "\xe0\x80\x80"}[r.IntN(7)]...)
		default:
			g.out = append(g.out, "xyz"[r.IntN(3)])
		}
	}
	g.out = append(g.out, '"')
}

func leftPad(hex string) string { return strings.Repeat("0", 4-len(hex)) + hex }

// corrupt damages a document so that both sides must usually refuse it.
func corrupt(r *rand.Rand, doc []byte) []byte {
	out := append([]byte(nil), doc...)
	switch r.IntN(4) {
	case 0:
		return out[:r.IntN(len(out))]
	case 1:
		return append(out, []string{" x", ",", "}", " 1", "\x00"}[r.IntN(5)]...)
	case 2:
		i := r.IntN(len(out))
		out[i] = "{}[],:\"\\-0e"[r.IntN(11)]
		return out
	default:
		return append([]byte("\ufeff"), out...)
	}
}
