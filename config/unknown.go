package config

import (
	"slices"
	"strings"
)

// unknownPrefixes are the families of variables this software reads: a name
// of one of them that no part of it reads is most likely misspelt.
var unknownPrefixes = []string{"PI_", "GITHUB_", "GITLAB_", "FORGEJO_", "RECEIVER_", "POLL_", "VALKEY_"}

// knownVars are the variables of those families some part of the software
// reads: the worker's and the CLI's configuration (EnvVars), the forges'
// and the receiver's, what the host gives a job's container or a profile's
// resolver, and what the agent image's programs read. A test holds it to
// .env.example and to every read in the source.
var knownVars = []string{
	"VALKEY_URL", "VALKEY_PASSWORD", "VALKEY_TEST_URL", "PI_ENV_FILE",
	"GITHUB_API_URL", "GITHUB_APP_ID", "GITHUB_APP_INSTALLATION_ID", "GITHUB_APP_PRIVATE_KEY_PATH",
	"GITHUB_AUTH_SOURCE", "GITHUB_PAT", "GITHUB_TOKEN", "WEBHOOK_SECRET",
	"GITLAB_TOKEN", "GITLAB_URL", "GITLAB_WEBHOOK_MODE", "GITLAB_WEBHOOK_SECRET",
	"FORGEJO_TOKEN", "FORGEJO_URL", "FORGEJO_WEBHOOK_SECRET",
	"POLL_INTERVAL_SECONDS", "POLL_REPOS",
	"RECEIVER_BIND", "RECEIVER_PORT", "RECEIVER_INBOX_MAX", "RECEIVER_SPOOL_DIR", "RECEIVER_SPOOL_MAX", "RECEIVER_STATUS_COMMENT", "RECEIVER_STORE_TIMEOUT",
	"PI_PUBLISH_MAX_BYTES", "PI_PUBLISH_MAX_FILES",
	// Given to a job's container and to a profile's resolver or check.
	"PI_JOB_ID", "PI_SECRET_PROFILE", "PI_WAIT_PROFILE",
	// Read inside the agent image by pi itself.
	"PI_OFFLINE", "PI_TELEMETRY", "PI_SKIP_VERSION_CHECK", "PI_CODING_AGENT_DIR",
	// Recording the agent's runs for the tests.
	"PI_RECORD", "PI_RECORD_ONLY",
}

// knownPrefixes are families read by name: the agent image's settings.
var knownPrefixes = []string{"PI_AGENT_"}

// UnknownVar is a variable no part of the software reads, and the known one
// it is closest to ("" when none is close).
type UnknownVar struct {
	Name, Closest string
}

// KnownVars lists every variable of the software's families that some part
// of it reads, sorted.
func KnownVars() []string {
	all := append(slices.Clone(EnvVars), knownVars...)
	slices.Sort(all)
	return slices.Compact(all)
}

// UnknownVars lists, sorted, the names of names (an environment's, an env
// file's) that look like the software's own (PI_, GITHUB_, GITLAB_,
// FORGEJO_, RECEIVER_, POLL_, VALKEY_) but that nothing reads, each with the
// closest known name: a misspelt variable is said, never silently ignored.
func UnknownVars(names []string) []UnknownVar {
	known := KnownVars()
	var out []UnknownVar
	for _, n := range names {
		if !hasPrefix(n, unknownPrefixes) || hasPrefix(n, knownPrefixes) {
			continue
		}
		if _, ok := slices.BinarySearch(known, n); ok {
			continue
		}
		out = append(out, UnknownVar{Name: n, Closest: closest(n, known)})
	}
	slices.SortFunc(out, func(a, b UnknownVar) int { return strings.Compare(a.Name, b.Name) })
	return slices.CompactFunc(out, func(a, b UnknownVar) bool { return a.Name == b.Name })
}

// String says the warning in one line.
func (u UnknownVar) String() string {
	if u.Closest == "" {
		return u.Name + " is not a variable pidispatch reads"
	}
	return u.Name + " is not a variable pidispatch reads; did you mean " + u.Closest + "?"
}

func hasPrefix(s string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

// closest is the known name nearest to name by edit distance, when it is
// near enough to be a misspelling (at most a quarter of its length, and at
// least two edits allowed); else "".
func closest(name string, known []string) string {
	best, bestD := "", max(2, len(name)/4)+1
	for _, k := range known {
		if d := editDistance(name, k); d < bestD {
			best, bestD = k, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
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
	return prev[len(b)]
}
