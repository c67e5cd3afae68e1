// Package capabilities decides which queue a job that needs something host-specific belongs on.
//
// A secrets profile (PI_SECRET_PROFILES) or a wait profile (PI_WAIT_PROFILES) exists on one
// machine's disk, not in the repository, so a job naming one can only run on a host that declared
// it. Each host publishes what it can serve as a token list ("s:<name>", "w:<name>") in its
// registry row; a front-end computes what a job needs and calls [Route] at enqueue time.
//
// The choice is made at enqueue rather than by letting any host pop the job and defer it: a
// BullMQ delayed job is promoted on each worker's own clock, so the host with the fastest clock
// wins every attempt, and if it cannot serve the job the job never reaches the one that can.
//
// Everything here is byte-for-byte the original's capabilities.mjs, so a Go front-end and a
// Node front-end route the same job to the same host. The package imports nothing of ours.
package capabilities

import (
	"cmp"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// Capability classes, the part of a token before its colon. The set is open: "g" is reserved
// for forge credentials.
const (
	SecretClass = "s" // a secrets profile from PI_SECRET_PROFILES
	WaitClass   = "w" // a wait-check profile from PI_WAIT_PROFILES
)

// RouteFresh is how recently a host must have beaten before a job is routed to it.
//
// It is deliberately shorter than the 90 s row TTL. The TTL answers "has this host definitely
// gone"; routing needs evidence of life, because a job routed onto a dead host's queue waits
// there until that host comes back and nothing else takes it. Three beats rides out a slow beat
// and stops a stopped host from attracting work long before its row expires.
const RouteFresh = 45 * time.Second

// validName reports whether name matches the original's ^[A-Za-z0-9._-]+$ (ASCII only).
// What matters is what the set excludes: a comma, so a token list joins unambiguously, and a
// colon, so "<class>:<name>" splits at its only colon.
func validName(name string) bool {
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '.', c == '_', c == '-':
		default:
			return false
		}
	}
	return true
}

// validToken reports whether tok is exactly what Parse keeps: a known class, one colon, a
// valid name. Because the name charset has no colon, the class is the single byte before it.
func validToken(tok string) bool {
	return len(tok) >= 3 && tok[1] == ':' && (tok[0] == SecretClass[0] || tok[0] == WaitClass[0]) && validName(tok[2:])
}

// appendTokens appends "<class>:<name>" for every valid name and drops the rest, as the
// original does: an invalid name is one the deployment would refuse anyway.
func appendTokens(out []string, class string, names []string) []string {
	for _, name := range names {
		if validName(name) {
			out = append(out, class+":"+name)
		}
	}
	return out
}

// sortedUnique sorts tokens in place and removes duplicates. Tokens are ASCII, so byte order is
// JavaScript's default sort order.
func sortedUnique(tokens []string) []string {
	slices.Sort(tokens)
	return slices.Compact(tokens)
}

// Tokens returns what a host can serve, from its own profile names, as a sorted list of unique
// "<class>:<name>" tokens. Invalid names are dropped. Sorted so the published row is stable from
// beat to beat. The result is never nil.
func Tokens(secretProfiles, waitProfiles []string) []string {
	out := make([]string, 0, len(secretProfiles)+len(waitProfiles))
	out = appendTokens(out, SecretClass, secretProfiles)
	out = appendTokens(out, WaitClass, waitProfiles)
	return sortedUnique(out)
}

// Serialize renders tokens as a registry value: comma-joined, which the name charset makes
// unambiguous.
func Serialize(tokens []string) string {
	return strings.Join(tokens, ",")
}

// Set is a parsed token list.
type Set map[string]struct{}

// Parse reads a peer's registry value. The row was written by another process and decides where
// money-spending work goes, so every element is re-validated: anything that is not a known class,
// one colon and a valid name is dropped. Duplicates collapse. The result is never nil, and the
// work is linear in len(raw).
func Parse(raw string) Set {
	s := Set{}
	for part := range strings.SplitSeq(raw, ",") {
		if !validToken(part) {
			continue
		}
		if _, ok := s[part]; !ok {
			// Clone so a small set does not pin a peer's arbitrarily large raw value.
			s[strings.Clone(part)] = struct{}{}
		}
	}
	return s
}

// Has reports whether the set holds token. A nil Set holds nothing.
func (s Set) Has(token string) bool {
	_, ok := s[token]
	return ok
}

// Sorted returns the set's tokens in byte order (JavaScript's order for the ASCII tokens Parse
// keeps). The result is never nil.
func (s Set) Sorted() []string {
	out := make([]string, 0, len(s))
	for tok := range s {
		out = append(out, tok)
	}
	slices.Sort(out)
	return out
}

// Needs returns what a job needs, from the same two fields the worker's own pre-spend refusals
// read: its secrets profile and the profiles of its wait conditions. Invalid or empty names are
// dropped (the worker refuses those on its own terms). Sorted and unique; never nil.
func Needs(secretsProfile string, waitProfiles []string) []string {
	out := make([]string, 0, 1+len(waitProfiles))
	if validName(secretsProfile) {
		out = append(out, SecretClass+":"+secretsProfile)
	}
	out = appendTokens(out, WaitClass, waitProfiles)
	return sortedUnique(out)
}

// Host is one peer as the router sees it, read from its registry row.
type Host struct {
	Name     string
	Caps     string        // the peer's serialized tokens, re-validated by Route
	Routes   bool          // the peer declared a name and drains a queue of its own
	Age      time.Duration // how long since its last beat
	AgeKnown bool          // false: undatable row, never evidence of life
	// Untrusted: the row lacks the fleet key's signature, so anyone who can
	// write Valkey may have written it. Route ignores the host entirely.
	Untrusted bool
}

// routableBuf is how many routable names Route collects without a heap allocation; a fleet
// rarely has more capable routing hosts than this.
const routableBuf = 16

// Route returns the name of the host whose queue the job belongs on, or "" for the shared queue.
//
// It abstains (returns "") in four cases, each of which is the behaviour without routing, so
// the rule only ever moves a job that would otherwise have had a coin flip decide whether it ran:
//
//  1. needs is empty: the job needs nothing host-specific.
//  2. Every live host can serve it: the shared queue load-balances, which beats picking one.
//  3. No live host can serve it: the shared queue yields the existing pre-spend refusal, which
//     names what to fix.
//  4. No capable host drains a queue of its own (Routes and a non-empty Name), or hosts is empty
//     (the registry could not be read, or nobody is home).
//
// A host is live when AgeKnown && Age <= fresh; fresh <= 0 means [RouteFresh]. A live host is
// capable when [Parse] of its Caps has every need. Otherwise the job goes to one of the capable
// routing hosts, chosen by FNV-1a over jobID: deterministic, so a redelivery lands the same way
// and dedup still works, and spread, so replicas of one delivery do not pile onto one machine.
//
// To choose the same host as the original, names are sorted and jobID is hashed as JavaScript
// sees them, as UTF-16 code units (a character outside the BMP is two surrogate units). Bytes
// that are not valid UTF-8 each count as U+FFFD, as Go's range over a string decodes them; a
// JavaScript decoder may fold a truncated multi-byte sequence into a single U+FFFD, so only
// valid UTF-8 IDs are guaranteed to match a Node front-end. Route does not modify its arguments.
func Route(hosts []Host, needs []string, jobID string, fresh time.Duration) string {
	if len(needs) == 0 || len(hosts) == 0 { // (1), (4)
		return ""
	}
	// A need that is not a valid token is in no Parse result, so no host is capable: (3).
	for _, need := range needs {
		if !validToken(need) {
			return ""
		}
	}
	if fresh <= 0 {
		fresh = RouteFresh
	}

	var buf [routableBuf]string
	routable := buf[:0]
	live, capable, routing, firstRouting := 0, 0, 0, -1
	for i := range hosts {
		isLive, isCapable, isRouting := classify(&hosts[i], needs, fresh)
		if isLive {
			live++
		}
		if isCapable {
			capable++
		}
		if isRouting {
			if routing == 0 {
				firstRouting = i
			}
			routing++
			if len(routable) < cap(routable) {
				routable = append(routable, hosts[i].Name)
			}
		}
	}
	if capable == 0 || capable == live || routing == 0 { // (3), (2), (4)
		return ""
	}
	if routing > len(routable) {
		// More than the stack buffer holds: one exact allocation and a second look at the hosts
		// from the first routing one on, rather than growing the slice step by step.
		routable = make([]string, 0, routing)
		for i := firstRouting; i < len(hosts); i++ {
			if _, _, isRouting := classify(&hosts[i], needs, fresh); isRouting {
				routable = append(routable, hosts[i].Name)
			}
		}
	}
	slices.SortFunc(routable, compareNames)
	return routable[fnv1aUTF16(jobID)%uint32(len(routable))]
}

// classify says whether h is live, capable (live and serves every need) and routing (capable
// with a queue of its own). needs must all be valid tokens.
func classify(h *Host, needs []string, fresh time.Duration) (live, capable, routing bool) {
	if h.Untrusted || !h.AgeKnown || h.Age > fresh {
		return false, false, false
	}
	for _, need := range needs {
		if !hasPart(h.Caps, need) {
			return true, false, false
		}
	}
	return true, true, h.Routes && h.Name != ""
}

// hasPart reports whether tok is one of the comma-separated parts of caps. For a valid token
// this is exactly Parse(caps).Has(tok) (a part equal to a valid token is itself valid), without
// building a Set per host. Linear in len(caps): tok holds no comma, so after a match that is
// not a whole part the next candidate starts after the next comma, which lies past the match.
func hasPart(caps, tok string) bool {
	for {
		i := strings.Index(caps, tok)
		if i < 0 {
			return false
		}
		end := i + len(tok)
		if (i == 0 || caps[i-1] == ',') && (end == len(caps) || caps[end] == ',') {
			return true
		}
		next := strings.IndexByte(caps[end:], ',')
		if next < 0 {
			return false
		}
		caps = caps[end+next+1:]
	}
}

// compareNames orders host names as JavaScript's default sort does (by UTF-16 code units), then
// by bytes so that two byte strings decoding to the same UTF-16 text still order
// deterministically.
func compareNames(a, b string) int {
	if c := compareUTF16(a, b); c != 0 {
		return c
	}
	return strings.Compare(a, b)
}

// compareUTF16 compares a and b by their UTF-16 code units, invalid UTF-8 bytes reading as
// U+FFFD. UTF-8 byte order is code point order, which differs from UTF-16 order only when a
// character outside the BMP (high surrogate 0xD800-0xDBFF) meets one in U+E000-U+FFFF.
func compareUTF16(a, b string) int {
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		ca, cb := a[i], b[j]
		if ca < utf8.RuneSelf && cb < utf8.RuneSelf {
			if ca != cb {
				return cmp.Compare(ca, cb)
			}
			i++
			j++
			continue
		}
		ra, na := utf8.DecodeRuneInString(a[i:])
		rb, nb := utf8.DecodeRuneInString(b[j:])
		if ra != rb {
			ua, ub := firstUnit(ra), firstUnit(rb)
			if ua != ub {
				return cmp.Compare(ua, ub)
			}
			// Both outside the BMP with the same high surrogate: the low surrogates order as the
			// code points do.
			return cmp.Compare(ra, rb)
		}
		i += na
		j += nb
	}
	switch {
	case i < len(a):
		return 1
	case j < len(b):
		return -1
	}
	return 0
}

// firstUnit is the first UTF-16 code unit of r: r itself in the BMP, else its high surrogate.
func firstUnit(r rune) rune {
	if r < 0x10000 {
		return r
	}
	return 0xD800 + (r-0x10000)>>10
}

// FNV-1a 32-bit parameters.
const (
	fnvOffset32 = 0x811c9dc5
	fnvPrime32  = 0x01000193
)

// fnv1aUTF16 is FNV-1a 32-bit over s's UTF-16 code units, as the original computes it with
// charCodeAt. Invalid UTF-8 bytes each read as U+FFFD (range-over-string decoding).
func fnv1aUTF16(s string) uint32 {
	h := uint32(fnvOffset32)
	for _, r := range s {
		if r < 0x10000 {
			h ^= uint32(r)
			h *= fnvPrime32
			continue
		}
		r -= 0x10000
		h ^= uint32(0xD800 + r>>10)
		h *= fnvPrime32
		h ^= uint32(0xDC00 + r&0x3FF)
		h *= fnvPrime32
	}
	return h
}
