package check

import (
	"net/url"
	"strconv"
	"strings"
)

// PlainInt parses plain decimal digits: "0" or a digit string without a
// leading zero. It refuses "+3", " 3", "3.0", "3abc", "1e3" and "03". A huge
// value saturates at 2^53, past every bound, so the caller's range check
// states the bounds. The rule is "" when s parses.
func PlainInt(s string) (int64, string) {
	const rule = "must be a whole number written in plain digits"
	if s == "" || len(s) > 1 && s[0] == '0' {
		return 0, rule
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, rule
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n > 1<<53 {
		n = 1 << 53
	}
	return n, ""
}

// ValkeyURL returns "" for a usable redis:// or rediss:// URL (a host, an
// optional port, an optional /N database) or unix:// URL (an absolute socket
// path, ?db=N for a database), query options left to go-redis. Otherwise it
// is the rule the URL breaks; the rule never repeats the URL, which may hold
// a password. The configuration (VALKEY_URL) and the client constructor
// (package valkey) both apply it.
func ValkeyURL(s string) string {
	const rule = "must be a redis://, rediss:// or unix:// URL such as redis://127.0.0.1:6379/0 or unix:///run/valkey/valkey.sock"
	if strings.Contains(s, "#") {
		return "must not carry a fragment ('#'); percent-encode it in a password (%23)"
	}
	u, err := url.Parse(s)
	if err == nil && u.Scheme == "unix" && u.Opaque == "" {
		if u.Hostname() != "" || !strings.HasPrefix(u.Path, "/") || strings.HasSuffix(u.Path, "/") {
			return "a unix:// URL names a socket by its absolute path, with no host (unix:///run/valkey/valkey.sock)"
		}
		return ""
	}
	if err != nil || u.Opaque != "" || (u.Scheme != "redis" && u.Scheme != "rediss") {
		return rule
	}
	if u.Hostname() == "" {
		return "needs a host (" + rule + ")"
	}
	if p := u.Port(); p != "" {
		if n, rule2 := PlainInt(p); rule2 != "" || n < 1 || n > 65535 {
			return "port must be between 1 and 65535"
		}
	}
	if db := strings.TrimPrefix(u.Path, "/"); db != "" {
		if _, rule2 := PlainInt(db); rule2 != "" {
			return "path must be a database number (/0, /1, ...)"
		}
	}
	return ""
}

// RedactURL returns s with everything between "://" and the last '@' (the
// userinfo: user and password) replaced by "xxxxx", for error messages and
// logs. It works on the raw text rather than a parsed URL, so a password with
// an unescaped '#' or '/' that confuses a URL parser is still redacted whole.
func RedactURL(s string) string {
	prefix, rest := "", s
	if i := strings.Index(s, "://"); i >= 0 {
		prefix, rest = s[:i+3], s[i+3:]
	}
	if j := strings.LastIndex(rest, "@"); j >= 0 {
		return prefix + "xxxxx" + rest[j:]
	}
	return s
}
