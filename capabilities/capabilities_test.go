package capabilities

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf16"
)

// ---- assertion helpers (standard library only: testify's yaml dependency is not in go.sum) ----

func msg(args []any) string {
	if len(args) == 0 {
		return ""
	}
	if format, ok := args[0].(string); ok {
		return fmt.Sprintf(format, args[1:]...) + ": "
	}
	return fmt.Sprint(args...) + ": "
}

func equal(t testing.TB, want, got any, args ...any) {
	t.Helper()
	if !reflect.DeepEqual(want, got) {
		t.Fatalf("%sgot %#v, want %#v", msg(args), got, want)
	}
}

func isTrue(t testing.TB, cond bool, args ...any) {
	t.Helper()
	if !cond {
		t.Fatalf("%scondition is false", msg(args))
	}
}

func isFalse(t testing.TB, cond bool, args ...any) {
	t.Helper()
	if cond {
		t.Fatalf("%scondition is true", msg(args))
	}
}

func noError(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func hasLen(t testing.TB, v any, n int, args ...any) {
	t.Helper()
	if got := reflect.ValueOf(v).Len(); got != n {
		t.Fatalf("%slen %d, want %d", msg(args), got, n)
	}
}

func isEmpty(t testing.TB, v any, args ...any) { t.Helper(); hasLen(t, v, 0, args...) }

func notEmpty(t testing.TB, v any, args ...any) {
	t.Helper()
	if reflect.ValueOf(v).Len() == 0 {
		t.Fatalf("%sempty", msg(args))
	}
}

func notNil(t testing.TB, v any, args ...any) {
	t.Helper()
	if rv := reflect.ValueOf(v); !rv.IsValid() || rv.IsNil() {
		t.Fatalf("%snil", msg(args))
	}
}

// ---- reference vectors (computed with the original's capabilities.mjs) ----

// jsBool decodes a field the original tests with `v === true || v === "true"`.
type jsBool bool

func (b *jsBool) UnmarshalJSON(data []byte) error {
	var v any
	if err := json.Unmarshal(data, &v); err != nil {
		return err
	}
	*b = jsBool(v == true || v == "true")
	return nil
}

type vectorHost struct {
	Name   string   `json:"name"`
	Caps   string   `json:"caps"`
	Routes jsBool   `json:"routes"`
	AgeMs  *float64 `json:"ageMs"` // null or absent: an undatable row
}

type vectors struct {
	CapabilityTokens []struct {
		Secret []string `json:"secret"`
		Wait   []string `json:"wait"`
		Want   []string `json:"want"`
	} `json:"capabilityTokens"`
	ParseCaps []struct {
		Raw  string   `json:"raw"`
		Want []string `json:"want"`
	} `json:"parseCaps"`
	JobNeeds []struct {
		SecretsProfile string   `json:"secretsProfile"`
		WaitProfiles   []string `json:"waitProfiles"`
		Want           []string `json:"want"`
	} `json:"jobNeeds"`
	Route []struct {
		Hosts []vectorHost `json:"hosts"`
		Needs []string     `json:"needs"`
		JobID string       `json:"jobId"`
		Want  *string      `json:"want"` // "" or null: the shared queue
	} `json:"route"`
}

func loadVectors(t *testing.T) vectors {
	t.Helper()
	data, err := os.ReadFile("../test/testdata/reference-vectors.json")
	noError(t, err)
	var v vectors
	noError(t, json.Unmarshal(data, &v))
	return v
}

func (h vectorHost) host() Host {
	out := Host{Name: h.Name, Caps: h.Caps, Routes: bool(h.Routes)}
	if h.AgeMs != nil {
		out.Age = time.Duration(*h.AgeMs * float64(time.Millisecond))
		out.AgeKnown = true
	}
	return out
}

// orEmpty makes a JSON [] and a nil slice compare equal while Go results must be non-nil.
func orEmpty(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func TestReferenceVectors(t *testing.T) {
	t.Parallel()
	v := loadVectors(t)

	t.Run("CapabilityTokens", func(t *testing.T) {
		t.Parallel()
		notEmpty(t, v.CapabilityTokens)
		for i, row := range v.CapabilityTokens {
			got := Tokens(row.Secret, row.Wait)
			notNil(t, got, "row %d", i)
			equal(t, orEmpty(row.Want), got, "row %d: %+v", i, row)
		}
	})
	t.Run("JobNeeds", func(t *testing.T) {
		t.Parallel()
		notEmpty(t, v.JobNeeds)
		for i, row := range v.JobNeeds {
			got := Needs(row.SecretsProfile, row.WaitProfiles)
			notNil(t, got, "row %d", i)
			equal(t, orEmpty(row.Want), got, "row %d: %+v", i, row)
		}
	})
	t.Run("ParseCaps", func(t *testing.T) {
		t.Parallel()
		notEmpty(t, v.ParseCaps)
		for i, row := range v.ParseCaps {
			got := Parse(row.Raw)
			equal(t, orEmpty(row.Want), got.Sorted(), "row %d: %q", i, row.Raw)
			for _, tok := range row.Want {
				isTrue(t, got.Has(tok), "row %d: %q", i, tok)
			}
		}
	})
	t.Run("Route", func(t *testing.T) {
		t.Parallel()
		notEmpty(t, v.Route)
		routed := 0
		for i, row := range v.Route {
			hosts := make([]Host, len(row.Hosts))
			for j, h := range row.Hosts {
				hosts[j] = h.host()
			}
			want := ""
			if row.Want != nil {
				want = *row.Want
			}
			if want != "" {
				routed++
			}
			equal(t, want, Route(hosts, row.Needs, row.JobID, RouteFresh), "row %d: %+v", i, row)
			equal(t, want, referenceRoute(hosts, row.Needs, row.JobID, RouteFresh), "reference, row %d", i)
		}
		// The vectors must exercise the hash choice, not only the abstentions.
		isTrue(t, routed > 0, "no vector routes")
	})
}

// ---- a straight port of routeForgeJob over Parse, to check the fast path against ----

func utf16Less(a, b string) int {
	return slices.Compare(utf16.Encode([]rune(a)), utf16.Encode([]rune(b)))
}

func referenceFNV(s string) uint32 {
	h := uint32(0x811c9dc5)
	for _, u := range utf16.Encode([]rune(s)) {
		h ^= uint32(u)
		h *= 0x01000193
	}
	return h
}

func referenceRoute(hosts []Host, needs []string, jobID string, fresh time.Duration) string {
	if len(needs) == 0 || len(hosts) == 0 {
		return ""
	}
	if fresh <= 0 {
		fresh = RouteFresh
	}
	var live, capable []Host
	for _, h := range hosts {
		if h.AgeKnown && h.Age <= fresh {
			live = append(live, h)
		}
	}
	if len(live) == 0 {
		return ""
	}
	for _, h := range live {
		caps := Parse(h.Caps)
		all := true
		for _, n := range needs {
			all = all && caps.Has(n)
		}
		if all {
			capable = append(capable, h)
		}
	}
	if len(capable) == 0 || len(capable) == len(live) {
		return ""
	}
	var routable []string
	for _, h := range capable {
		if h.Routes && h.Name != "" {
			routable = append(routable, h.Name)
		}
	}
	if len(routable) == 0 {
		return ""
	}
	slices.SortStableFunc(routable, func(a, b string) int {
		if c := utf16Less(a, b); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	return routable[referenceFNV(jobID)%uint32(len(routable))]
}

// ---- Route edge cases ----

func live(name, caps string) Host {
	return Host{Name: name, Caps: caps, Routes: true, AgeKnown: true}
}

func TestRouteEdgeCases(t *testing.T) {
	t.Parallel()
	incapable := Host{Name: "plain", Caps: "w:jira", AgeKnown: true}
	aged := func(h Host, age time.Duration) Host { h.Age = age; return h }

	tests := []struct {
		name  string
		hosts []Host
		needs []string
		jobID string
		fresh time.Duration
		want  string
	}{
		{name: "NoNeeds", hosts: []Host{live("a", "s:prod"), incapable}, jobID: "1", want: ""},
		{name: "NoHosts", needs: []string{"s:prod"}, jobID: "1", want: ""},
		{name: "NobodyLive", hosts: []Host{aged(live("a", "s:prod"), time.Minute), {Name: "b", Caps: "s:prod", Routes: true}}, needs: []string{"s:prod"}, want: ""},
		{name: "EveryLiveCapable", hosts: []Host{live("a", "s:prod"), live("b", "s:prod,w:ci"), aged(incapable, 45001*time.Millisecond)}, needs: []string{"s:prod"}, want: ""},
		{name: "NoneCapable", hosts: []Host{live("a", "w:ci"), incapable}, needs: []string{"s:prod"}, want: ""},
		{name: "InvalidNeedNeverServed", hosts: []Host{live("a", "s:bad name"), incapable}, needs: []string{"s:bad name"}, want: ""},
		{name: "NeedsEveryToken", hosts: []Host{live("a", "s:prod"), live("b", "w:ci,s:prod"), incapable}, needs: []string{"s:prod", "w:ci"}, want: "b"},
		{name: "CapableButNotRouting", hosts: []Host{{Name: "a", Caps: "s:prod", AgeKnown: true}, incapable}, needs: []string{"s:prod"}, want: ""},
		{name: "EmptyNameNotRoutable", hosts: []Host{live("", "s:prod"), incapable}, needs: []string{"s:prod"}, want: ""},
		{name: "EmptyNameSkipped", hosts: []Host{live("", "s:prod"), live("z", "s:prod"), incapable}, needs: []string{"s:prod"}, jobID: "a", want: "z"},
		{name: "AgeExactlyFreshIsLive", hosts: []Host{aged(live("a", "s:prod"), 45*time.Second), incapable}, needs: []string{"s:prod"}, want: "a"},
		{name: "AgeOneMsPastFreshIsStale", hosts: []Host{aged(live("a", "s:prod"), 45001*time.Millisecond), incapable}, needs: []string{"s:prod"}, want: ""},
		{name: "AgeUnknownIsNotLife", hosts: []Host{{Name: "a", Caps: "s:prod", Routes: true}, incapable}, needs: []string{"s:prod"}, want: ""},
		{name: "ZeroFreshMeansDefault", hosts: []Host{aged(live("a", "s:prod"), 44*time.Second), incapable}, needs: []string{"s:prod"}, fresh: 0, want: "a"},
		{name: "NegativeFreshMeansDefault", hosts: []Host{aged(live("a", "s:prod"), 44*time.Second), incapable}, needs: []string{"s:prod"}, fresh: -time.Second, want: "a"},
		{name: "ShortFresh", hosts: []Host{aged(live("a", "s:prod"), 2*time.Second), incapable}, needs: []string{"s:prod"}, fresh: time.Second, want: ""},
		{name: "LongerFresh", hosts: []Host{aged(live("a", "s:prod"), time.Minute), incapable}, needs: []string{"s:prod"}, fresh: 2 * time.Minute, want: "a"},
		{name: "DuplicateCaps", hosts: []Host{live("a", "s:prod,s:prod,,junk,s:prod"), incapable}, needs: []string{"s:prod", "s:prod"}, want: "a"},
		{name: "CapsSubstringIsNotAPart", hosts: []Host{live("a", "s:prod2,xs:prod,s:prod:x"), incapable, live("b", "s:prod")}, needs: []string{"s:prod"}, jobID: "a", want: "b"},
		// Node: "c" picks index 2 of [a a b]; dropping the duplicate would pick "a".
		{name: "DuplicateNamesKeptLikeJS", hosts: []Host{live("a", "s:prod"), live("a", "s:prod"), live("b", "s:prod"), incapable}, needs: []string{"s:prod"}, jobID: "c", want: "b"},
		// Hash values computed with the original under Node 20: fnv("a") = 0xe40c292c (even),
		// fnv("b") = 0xe70c2de5 (odd). UTF-16 order puts U+1F600 (0xD83D...) before U+FF21;
		// UTF-8 byte order would put U+FF21 first.
		{name: "SortByUTF16Units0", hosts: []Host{live("\uFF21", "s:prod"), live("\U0001F600", "s:prod"), incapable}, needs: []string{"s:prod"}, jobID: "a", want: "\U0001F600"},
		{name: "SortByUTF16Units1", hosts: []Host{live("\uFF21", "s:prod"), live("\U0001F600", "s:prod"), incapable}, needs: []string{"s:prod"}, jobID: "b", want: "\uFF21"},
		// From the original under Node 20: "job-😀-1" -> alpha, "😀" -> charlie.
		{name: "NonBMPJobID", hosts: []Host{live("charlie", "s:prod"), live("alpha", "s:prod"), live("bravo", "s:prod"), incapable}, needs: []string{"s:prod"}, jobID: "job-\U0001F600-1", want: "alpha"},
		{name: "NonBMPJobIDOnly", hosts: []Host{live("charlie", "s:prod"), live("alpha", "s:prod"), live("bravo", "s:prod"), incapable}, needs: []string{"s:prod"}, jobID: "\U0001F600", want: "charlie"},
		{name: "InvalidUTF8JobIDDoesNotPanic", hosts: []Host{live("a", "s:prod"), live("b", "s:prod"), incapable}, needs: []string{"s:prod"}, jobID: "\xff\xfe\x00", want: "b"}, // Node, given "\uFFFD\uFFFD\x00", picks b
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			equal(t, tc.want, Route(tc.hosts, tc.needs, tc.jobID, tc.fresh))
			equal(t, tc.want, referenceRoute(tc.hosts, tc.needs, tc.jobID, tc.fresh))
		})
	}
}

func TestFNVOverUTF16Units(t *testing.T) {
	t.Parallel()
	// ASCII: one unit per byte, so it is the standard FNV-1a 32.
	for _, s := range []string{"", "a", "gh-1234-r1", "cron:nightly:1700000000000"} {
		std := fnv.New32a()
		_, _ = std.Write([]byte(s))
		equal(t, std.Sum32(), fnv1aUTF16(s), "%q", s)
	}
	// U+1F600 is the surrogate pair 0xD83D 0xDE00, hashed as two units, by hand.
	h := uint32(0x811c9dc5)
	for _, u := range []uint32{'j', 0xD83D, 0xDE00} {
		h ^= u
		h *= 0x01000193
	}
	equal(t, h, fnv1aUTF16("j\U0001F600"))
	equal(t, uint32(0xc8f3e878), fnv1aUTF16("job-\U0001F600-1")) // from Node
	equal(t, uint32(0xcb31c4b8), fnv1aUTF16("\U0001F600"))       // from Node
	// Each invalid byte reads as U+FFFD.
	equal(t, fnv1aUTF16("\uFFFD\uFFFDx"), fnv1aUTF16("\xff\xc0x"))
}

func TestCompareUTF16MatchesEncode(t *testing.T) {
	t.Parallel()
	alphabet := []string{"a", "b", "Z", ".", "\x00", "\u00e9", "\u07ff", "\ud7ff", "\ue000", "\uff21", "\uffff", "\U00010000", "\U0001F600", "\U0010FFFF", "\xff", "\xed\xa0\x80", "\xe2\x82"}
	rng := rand.New(rand.NewPCG(1, 2))
	word := func() string {
		var b strings.Builder
		for range rng.IntN(4) {
			b.WriteString(alphabet[rng.IntN(len(alphabet))])
		}
		return b.String()
	}
	for range 20000 {
		a, b := word(), word()
		equal(t, utf16Less(a, b), compareUTF16(a, b), "%q vs %q", a, b)
	}
}

func TestRouteDoesNotMutate(t *testing.T) {
	t.Parallel()
	hosts := []Host{live("zulu", "s:prod"), live("alpha", "s:prod"), {Name: "plain", Caps: "w:ci", AgeKnown: true}, live("mike", "s:prod")}
	for i := range 40 { // past the stack buffer, so the second pass runs too
		hosts = append(hosts, live("h"+strconv.Itoa(40-i), "s:prod"))
	}
	needs := []string{"w:ci", "s:prod"} // unsorted on purpose
	hosts[0].Caps, hosts[1].Caps, hosts[3].Caps = "w:ci,s:prod", "s:prod,w:ci", "s:prod,w:ci"
	for i := 4; i < len(hosts); i++ {
		hosts[i].Caps = "w:ci,s:prod"
	}
	hostsCopy := slices.Clone(hosts)
	needsCopy := slices.Clone(needs)
	for i := range 50 {
		notEmpty(t, Route(hosts, needs, strconv.Itoa(i), RouteFresh))
	}
	equal(t, hostsCopy, hosts)
	equal(t, needsCopy, needs)
}

// TestRouteMatchesReference compares the allocation-free path with the Parse-based port on
// random fleets, including ones larger than the stack buffer.
func TestRouteMatchesReference(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(3, 4))
	names := []string{"", "a", "b", "mini1", "mac-studio", "\uff21", "\U0001F600", "\xff", "zeta_z"}
	tokens := []string{"s:prod", "w:ci", "w:jira", "s:prod2", "s:", "junk", "s:a:b", "x:prod", ""}
	needPool := []string{"s:prod", "w:ci", "w:jira", "s:nope", "s:bad name"}
	ages := []time.Duration{0, time.Second, 45 * time.Second, 45*time.Second + 1, time.Minute, -time.Second}
	routed := 0
	for range 5000 {
		hosts := make([]Host, rng.IntN(40))
		for i := range hosts {
			var caps []string
			for range rng.IntN(4) {
				caps = append(caps, tokens[rng.IntN(len(tokens))])
			}
			hosts[i] = Host{
				Name:     names[rng.IntN(len(names))] + strconv.Itoa(rng.IntN(3)),
				Caps:     strings.Join(caps, ","),
				Routes:   rng.IntN(4) != 0,
				Age:      ages[rng.IntN(len(ages))],
				AgeKnown: rng.IntN(6) != 0,
			}
		}
		var needs []string
		for range rng.IntN(3) {
			needs = append(needs, needPool[rng.IntN(len(needPool))])
		}
		jobID := strconv.Itoa(rng.IntN(1000)) + names[rng.IntN(len(names))]
		want := referenceRoute(hosts, needs, jobID, RouteFresh)
		if want != "" {
			routed++
		}
		equal(t, want, Route(hosts, needs, jobID, 0), "hosts=%+v needs=%q job=%q", hosts, needs, jobID)
	}
	isTrue(t, routed > 100, "only %d random cases routed", routed)
}

// ---- Tokens, Needs, Parse, Set ----

func TestTokensAndNeedsNeverNil(t *testing.T) {
	t.Parallel()
	equal(t, []string{}, Tokens(nil, nil))
	equal(t, []string{}, Tokens([]string{"", "a b", "\xff"}, []string{"é"}))
	equal(t, []string{}, Needs("", nil))
	equal(t, []string{}, Needs("s:x", []string{"a,b", "a\x00"}))
	equal(t, []string{"s:b", "w:a", "w:b"}, Needs("b", []string{"b", "a", "b"}))
	equal(t, []string{"s:x", "w:x"}, Tokens([]string{"x", "x"}, []string{"x"}))
	equal(t, "s:a,w:b", Serialize([]string{"s:a", "w:b"}))
	equal(t, "", Serialize(nil))
}

func TestParseHostile(t *testing.T) {
	t.Parallel()
	isEmpty(t, Parse("s:prod\n"))          // JS $ anchors at the very end
	isEmpty(t, Parse("s:pr\x00od,w:\xff")) // NUL, invalid UTF-8
	isEmpty(t, Parse("s:\u0130"))          // non-ASCII letter
	equal(t, []string{"s:-._"}, Parse(" s:x,s:-._").Sorted())
	var nilSet Set
	isFalse(t, nilSet.Has("s:x"))
	equal(t, []string{}, nilSet.Sorted())
	notNil(t, Parse(""))
}

func TestParseLargeIsLinear(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	const n = 200_000
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "w:p%d", i%50_000)
	}
	b.WriteString(",")
	b.WriteString(strings.Repeat("x", 4<<20)) // one 4 MiB junk part
	raw := b.String()
	start := time.Now()
	s := Parse(raw)
	// A quadratic Parse would take hours here; linear takes milliseconds even under -race.
	isTrue(t, time.Since(start) < 20*time.Second, "Parse took %v", time.Since(start))
	hasLen(t, s, 50_000)
	isTrue(t, s.Has("w:p49999"))
	isTrue(t, hasPart(raw, "w:p49999"))
	isFalse(t, hasPart(raw, "w:p50000"))
}

// ---- fuzz ----

func FuzzParse(f *testing.F) {
	for _, seed := range []string{"", ",", "s:prod,w:jira", "s:,w:", ":prod", "s:a:b", "S:prod", "s:\u00e9", "s:prod,s:prod", "w:ci.v2,s:a_b,junk", "\xff,s:\x00", "g:x,s:x\n"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		s := Parse(raw)
		sorted := s.Sorted()
		hasLen(t, sorted, len(s))
		isTrue(t, slices.IsSorted(sorted))
		hasLen(t, slices.Compact(slices.Clone(sorted)), len(sorted), "unique")
		for _, tok := range sorted {
			isTrue(t, validToken(tok))
			equal(t, []string{tok}, Parse(Serialize([]string{tok})).Sorted())
			isTrue(t, hasPart(raw, tok))
		}
		// The whole set round-trips through its own serialization.
		equal(t, sorted, Parse(Serialize(sorted)).Sorted())
	})
}

// FuzzHasPart proves the per-host fast path equals Parse: for a valid token, hasPart is
// Parse(caps).Has; for any comma-free string, it is membership in strings.Split.
func FuzzHasPart(f *testing.F) {
	f.Add("s:prod,w:ci", "s:prod")
	f.Add("s:prod2,xs:prod,s:prod", "s:prod")
	f.Add("s:prods:prod,", "s:prod")
	f.Add("s:prod:x", "s:prod")
	f.Add(",,", "")
	f.Add("aaaa,aa", "aa")
	f.Fuzz(func(t *testing.T, caps, tok string) {
		if strings.Contains(tok, ",") {
			return
		}
		equal(t, slices.Contains(strings.Split(caps, ","), tok), hasPart(caps, tok))
		if validToken(tok) {
			equal(t, Parse(caps).Has(tok), hasPart(caps, tok))
		}
	})
}

// FuzzRouteMatchesReference drives Route and the Parse-based port with fleets built from
// fuzz input: "name|caps|routes|ageMs" per line, ageMs "-" for undatable.
func FuzzRouteMatchesReference(f *testing.F) {
	f.Add("a|s:prod|1|0\nb|w:ci|1|0\nc|s:prod,w:ci|1|45000", "s:prod", "job-1")
	f.Add("\U0001F600|s:prod|1|0\n\uff21|s:prod|1|0\nx|w:jira|0|-", "s:prod", "a")
	f.Add("|s:prod|1|0\nz|s:prod|1|45001\ny|s:x|0|1", "s:prod,w:ci", "\xff")
	f.Fuzz(func(t *testing.T, fleet, needList, jobID string) {
		var hosts []Host
		for line := range strings.SplitSeq(fleet, "\n") {
			f := strings.SplitN(line, "|", 4)
			if len(f) != 4 {
				continue
			}
			h := Host{Name: f[0], Caps: f[1], Routes: f[2] == "1"}
			if ms, err := strconv.ParseInt(f[3], 10, 64); err == nil {
				h.Age, h.AgeKnown = time.Duration(ms)*time.Millisecond, true
			}
			hosts = append(hosts, h)
		}
		var needs []string
		if needList != "" {
			needs = strings.Split(needList, ",")
		}
		equal(t, referenceRoute(hosts, needs, jobID, RouteFresh), Route(hosts, needs, jobID, RouteFresh))
	})
}

// ---- benchmark ----

func benchFleet(n int) []Host {
	capsByKind := []string{
		"s:prod,w:ci.v2,w:jira",        // capable
		"s:staging,w:jira",             // incapable
		"s:prod,s:staging,w:ci.v2",     // capable
		"w:deploy-gate,w:jira,s:local", // incapable
	}
	hosts := make([]Host, n)
	for i := range hosts {
		hosts[i] = Host{
			Name:     fmt.Sprintf("worker-%04d", (i*7919)%n),
			Caps:     capsByKind[i%len(capsByKind)],
			Routes:   i%5 != 0,
			Age:      time.Duration(i%7) * 5 * time.Second, // 0-30 s: live
			AgeKnown: i%11 != 0,
		}
		if i%9 == 0 {
			hosts[i].Age = 2 * time.Minute // stale
		}
	}
	return hosts
}

func BenchmarkRoute(b *testing.B) {
	needs := []string{"s:prod", "w:ci.v2"}
	jobIDs := make([]string, 64)
	for i := range jobIDs {
		jobIDs[i] = fmt.Sprintf("gh-%d-r1", 1000+i)
	}
	for _, n := range []int{3, 100, 1000} {
		hosts := benchFleet(n)
		if Route(hosts, needs, jobIDs[0], RouteFresh) == "" {
			b.Fatalf("%d hosts: fleet does not route; the benchmark would measure an abstention", n)
		}
		b.Run(fmt.Sprintf("hosts=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				_ = Route(hosts, needs, jobIDs[i&63], RouteFresh)
				i++
			}
		})
	}
}
