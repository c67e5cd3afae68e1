// Package hostileid lists the hostile job ids the tests feed every entrance.
package hostileid

import (
	"math/rand/v2"
	"strings"
)

// IDs returns job ids every entrance must survive: lengths 0 to 2,000,
// control characters, invalid UTF-8, the separators : @ # / and unicode, and
// random bytes from a fixed seed.
func IDs() []string {
	var ids []string
	for _, n := range []int{0, 1, 2, 100, 200, 201, 255, 256, 257, 300, 511, 512, 513, 1000, 1999, 2000} {
		ids = append(ids, strings.Repeat("a", n))
	}
	ids = append(ids, strings.Repeat("é", 128), strings.Repeat("é", 129)) // 256 and 258 bytes
	for c := rune(0); c < 0x20; c++ {
		ids = append(ids, "id"+string(c)+"x")
	}
	ids = append(ids, "id\x7fx", "id\u0085x", "id\u009fx", "line\nbreak", "tab\there", "\r")
	ids = append(ids, "\xff", "a\xc3", "\xed\xa0\x80", "ok\xfe\xffok", "\xc0\xaf")
	ids = append(ids, "a:b:c", "a:b", ":", "x@y#z/w", "/", "@", "#", "..", "../etc/passwd", ".hidden",
		"gh-1/2", "X:coll:1", "X-coll-1", "123", "-1", "0", "1e3")
	ids = append(ids, "日本語", "rocket-🚀", "rtl-\u202e-x", "sep\u2028x", "zw\u200bj", "ﬁ")
	r := rand.New(rand.NewPCG(16, 2))
	for range 60 {
		b := make([]byte, r.IntN(400))
		for i := range b {
			b[i] = byte(r.IntN(256))
			if r.IntN(3) > 0 {
				b[i] = "az09:@#/.-_ ~"[r.IntN(13)]
			}
		}
		ids = append(ids, string(b))
	}
	return ids
}
