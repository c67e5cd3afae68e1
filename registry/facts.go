package registry

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/pidispatch/pidispatch/capabilities"
)

// Row field names of host:h:<name>. All values are strings.
const (
	FieldName        = "name"
	FieldBeatAt      = "beatAt"    // ms, the server's TIME at the beat
	FieldStartedAt   = "startedAt" // ms, the server's TIME at this process's first beat
	FieldVersion     = "version"
	FieldImage       = "image"
	FieldImageDigest = "imageDigest"
	FieldConcurrency = "concurrency"
	FieldPid         = "pid"
	FieldInstance    = "instance"
	FieldRoutes      = "routes" // "true" or "false"
	FieldCaps        = "caps"
	FieldTZ          = "tz"
	FieldFPCron      = "fpCron" // empty: the host abstains from cron agreement
	FieldCronCount   = "cronCount"
	// FieldSig is the row's fleet signature (fleet.Key) over every
	// other field but beatAt and startedAt, which the server's clock writes.
	FieldSig = "sig"
)

// rowFields is every field a reader asks for, in the order the read script
// returns them. A peer's other fields are never fetched.
var rowFields = [...]string{
	FieldName, FieldBeatAt, FieldStartedAt, FieldVersion, FieldImage, FieldImageDigest,
	FieldConcurrency, FieldPid, FieldInstance, FieldRoutes, FieldCaps, FieldTZ,
	FieldFPCron, FieldCronCount, FieldSig,
}

// signedFields is the document a row's signature covers: every row field
// but the server-written times and the signature, a missing one as "".
func signedFields(get func(field string) string) map[string]string {
	m := make(map[string]string, len(rowFields))
	for _, f := range rowFields {
		if f != FieldBeatAt && f != FieldStartedAt && f != FieldSig {
			m[f] = get(f)
		}
	}
	return m
}

// MaxValueLen is the longest row value a writer publishes or a reader accepts,
// except caps (MaxCapsLen). Every legal value is far shorter; the bound keeps a
// hostile peer from making every reader of a 1,000-host fleet download megabytes.
const MaxValueLen = 256

// MaxCapsLen bounds the caps value, a token list that grows with the number of
// profiles a host declares.
const MaxCapsLen = 4096

// maxLen is the longest value field may hold.
func maxLen(field string) int {
	if field == FieldCaps {
		return MaxCapsLen
	}
	return MaxValueLen
}

// Fact is one row value, computed at every beat so a value that changes at run
// time (the live concurrency, the cron fingerprint after a reload) is never
// published frozen. A Fact that returns an error or panics publishes an empty
// value for that beat.
type Fact[T any] func() (T, error)

// Value is a Fact that always returns v, for facts fixed at boot.
func Value[T any](v T) Fact[T] { return func() (T, error) { return v, nil } }

// Facts are the host-described row values. A nil Fact publishes an empty value
// (unknown). The registry adds name, beatAt, startedAt, version, pid and
// instance itself.
type Facts struct {
	// Image is the default job image. Only a local tag without '/' (pi-job:latest)
	// is published: a name with a registry host or a path is a repository name,
	// which the content rule keeps out of the registry, so such a host publishes
	// the image empty and peers compare ImageDigest instead.
	Image Fact[string]
	// ImageDigest is the local image id, sha256:<64 hex>.
	ImageDigest Fact[string]
	// Concurrency is the live job concurrency.
	Concurrency Fact[int]
	// Routes reports whether this host declared a name and drains a queue of its
	// own; only such a host is routed to.
	Routes Fact[bool]
	// Caps is the serialized capability tokens (capabilities.Serialize). Invalid
	// tokens are dropped before publishing.
	Caps Fact[string]
	// TZ is this host's IANA time zone (Europe/Amsterdam, UTC).
	TZ Fact[string]
	// FPCron is the cron-set fingerprint (16 hex); empty abstains from cron
	// agreement.
	FPCron Fact[string]
	// CronCount is how many cron schedules this host has authored.
	CronCount Fact[int]
}

// Rules a value can break, named in host_registry_field_refused.
const (
	ruleTooLong        = "too-long"
	rulePrintable      = "not-printable-ascii"
	ruleURL            = "url-shaped"
	rulePath           = "path-shaped"
	ruleRepositoryName = "repository-name"
	ruleSyntax         = "syntax"
	ruleNegative       = "negative"
	ruleCapsToken      = "caps-token"
)

// syntaxOK checks the shape of a field's value beyond the rules every value
// obeys. Hand-written rather than regular expressions: a reader checks every
// field of every row of a 1,000-host fleet on each read.
func syntaxOK(field, v string) bool {
	switch field {
	case FieldVersion:
		// [A-Za-z0-9][A-Za-z0-9._+-]{0,63}
		return len(v) <= 64 && isAlnum(v[0]) && allBytes(v, func(c byte) bool { return isNameByte(c) || c == '+' })
	case FieldImage:
		return imageOK(v)
	case FieldImageDigest:
		return digestOK(v)
	case FieldTZ:
		return tzOK(v)
	case FieldFPCron:
		return len(v) >= 16 && len(v) <= 64 && allBytes(v, isLowerHex)
	case FieldInstance:
		return len(v) == 32 && allBytes(v, isLowerHex)
	}
	return true
}

func allBytes(s string, ok func(byte) bool) bool {
	for i := 0; i < len(s); i++ {
		if !ok(s[i]) {
			return false
		}
	}
	return true
}

func isLowerHex(c byte) bool { return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' }

// digestOK: sha256:<64 lowercase hex>.
func digestOK(v string) bool {
	rest, ok := strings.CutPrefix(v, "sha256:")
	return ok && len(rest) == 64 && allBytes(rest, isLowerHex)
}

// imageOK: a local Docker reference without '/': name[:tag][@sha256:digest],
// name [A-Za-z0-9][A-Za-z0-9._-]{0,127}, tag [A-Za-z0-9_][A-Za-z0-9._-]{0,127}.
func imageOK(v string) bool {
	if at := strings.IndexByte(v, '@'); at >= 0 {
		if !digestOK(v[at+1:]) {
			return false
		}
		v = v[:at]
	}
	name, tag, hasTag := strings.Cut(v, ":")
	if name == "" || len(name) > 128 || !isAlnum(name[0]) || !allBytes(name, isNameByte) {
		return false
	}
	if !hasTag {
		return true
	}
	return tag != "" && len(tag) <= 128 && (isAlnum(tag[0]) || tag[0] == '_') && allBytes(tag, isNameByte)
}

// tzOK: an IANA zone name: [A-Za-z_][A-Za-z0-9_+-]* then any number of
// /[A-Za-z0-9_+-]+ segments (Europe/Amsterdam, Etc/GMT+5, UTC, EST5EDT).
func tzOK(v string) bool {
	zoneByte := func(c byte) bool { return isAlnum(c) || c == '_' || c == '+' || c == '-' }
	for i, seg := range strings.Split(v, "/") {
		if seg == "" || !allBytes(seg, zoneByte) {
			return false
		}
		if i == 0 && !(seg[0] >= 'A' && seg[0] <= 'Z' || seg[0] >= 'a' && seg[0] <= 'z' || seg[0] == '_') {
			return false
		}
	}
	return true
}

// refuseRule returns the content rule value v breaks as field, or "" when it is
// publishable. Empty is always publishable.
func refuseRule(field, v string) string {
	if v == "" {
		return ""
	}
	if len(v) > maxLen(field) {
		return ruleTooLong
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; c <= ' ' || c >= 0x7f {
			return rulePrintable
		}
	}
	if strings.Contains(v, "://") {
		return ruleURL
	}
	pathy := strings.ContainsRune(v, '\\') || v[0] == '~' || v[0] == '.' || v[0] == '/'
	switch {
	case pathy:
		return rulePath
	case field == FieldImage && strings.ContainsRune(v, '/'):
		return ruleRepositoryName
	case field != FieldTZ && strings.ContainsRune(v, '/'):
		return rulePath
	}
	if !syntaxOK(field, v) {
		return ruleSyntax
	}
	return ""
}

// evalFact runs f, turning a panic into an error. A nil Fact is the zero value.
func evalFact[T any](f Fact[T]) (v T, err error) {
	if f == nil {
		return v, nil
	}
	defer func() {
		if p := recover(); p != nil {
			var zero T
			v, err = zero, fmt.Errorf("fact panicked: %v", p)
		}
	}()
	return f()
}

// factValue is one evaluated row value before the content rule.
type factValue struct {
	field string
	value string
	err   error // the Fact failed: publish empty
}

// evaluate computes every fact of one beat, in a fixed order.
func (f *Facts) evaluate() []factValue {
	str := func(field string, fact Fact[string]) factValue {
		v, err := evalFact(fact)
		return factValue{field: field, value: v, err: err}
	}
	num := func(field string, fact Fact[int]) factValue {
		v, err := evalFact(fact)
		if err != nil || fact == nil {
			return factValue{field: field, err: err}
		}
		return factValue{field: field, value: strconv.Itoa(v)}
	}
	routes, err := evalFact(f.Routes)
	rv := factValue{field: FieldRoutes, err: err}
	if err == nil && f.Routes != nil {
		rv.value = strconv.FormatBool(routes)
	}
	return []factValue{
		str(FieldImage, f.Image),
		str(FieldImageDigest, f.ImageDigest),
		num(FieldConcurrency, f.Concurrency),
		rv,
		str(FieldCaps, f.Caps),
		str(FieldTZ, f.TZ),
		str(FieldFPCron, f.FPCron),
		num(FieldCronCount, f.CronCount),
	}
}

// cleanCaps re-validates a serialized token list through capabilities.Parse, so
// this host publishes only what a peer's reader would keep.
func cleanCaps(v string) string {
	return capabilities.Serialize(capabilities.Parse(v).Sorted())
}

// isNegativeInt reports whether v is a formatted negative integer.
func isNegativeInt(v string) bool { return strings.HasPrefix(v, "-") }

// isAlnum and isNameByte are the byte classes of the value rules above.
func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

func isNameByte(c byte) bool { return isAlnum(c) || c == '.' || c == '_' || c == '-' }
