// Package jobrule holds the rules a job's run settings obey, in one place for
// the two readers of those settings: the worker's job model (package dispatch)
// and the triggers file (package cronsync). A cron trigger's run object becomes
// the data of every job its scheduler fires, so a rule that differed between
// them would install a scheduler whose every run the worker refuses.
//
// Each rule reports only whether a value obeys it; callers word the message,
// naming their own field path.
package jobrule

import (
	"regexp"
	"slices"
	"strings"
	"unicode/utf8"
)

// Bounds of a job's run settings.
const (
	MaxTaskBytes    = 64 << 10 // a task is a prompt, not a payload
	MaxNameBytes    = 128      // a flow, command, profile, provider or model name
	MaxModels       = 16       // models in a fallback list
	MaxTurns        = 10000    // agent turns of one run
	MaxImageRef     = 512
	maxCostWhole    = 6 // digits before the point of a cost cap
	maxCostFraction = 4 // digits after it
)

// ExcludableTools are the agent tools a job may switch off. Another name would
// be ignored by the agent, so a job that thinks it removed a tool still has it:
// such a job is refused instead.
var ExcludableTools = []string{"read", "bash", "powershell", "edit", "write", "grep", "find", "ls"}

// Turns reports whether n is a valid maxTurns: 1 to MaxTurns.
func Turns(n int) bool { return n >= 1 && n <= MaxTurns }

// Token reports whether s is a provider or model name: 1 to MaxNameBytes of
// valid UTF-8 without spaces or control characters.
func Token(s string) bool {
	if s == "" || len(s) > MaxNameBytes || !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if r <= ' ' || r == 0x7f {
			return false
		}
	}
	return true
}

// shownName is the character set of a model or provider name that a log, a
// record, a comment or a notification may show as it is: it starts with a
// letter or a digit and holds no blank, control or format character (bidi
// controls), markup (< > ` [ ] ( ) ! & |) or quote.
var shownName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:@/-]{0,127}$`)

// ShownName reports whether s is a model or provider name that may be shown
// as it is; the gateway shows any other model by its digest, and the exit
// line keeps no other.
func ShownName(s string) bool { return shownName.MatchString(s) }

// Models returns the index of the first entry of models that is not a Token,
// or -1; and whether the list is short enough (at most MaxModels).
func Models(models []string) (bad int, shortEnough bool) {
	return slices.IndexFunc(models, func(m string) bool { return !Token(m) }), len(models) <= MaxModels
}

// ExcludeTool reports why tools[i] cannot be excluded: "unknown" (not one of
// ExcludableTools), "twice" (listed before), or "" when it can.
func ExcludeTool(tools []string, i int) string {
	switch {
	case !slices.Contains(ExcludableTools, tools[i]):
		return "unknown"
	case slices.Contains(tools[:i], tools[i]):
		return "twice"
	}
	return ""
}

// Cost reports whether s is a cost cap: a positive decimal string of 1 to 6
// digits with up to 4 decimals ("2.50"), as the original wrote it.
func Cost(s string) bool {
	whole, frac, hasPoint := strings.Cut(s, ".")
	if whole == "" || len(whole) > maxCostWhole || len(frac) > maxCostFraction || hasPoint && frac == "" {
		return false
	}
	nonzero := false
	for _, part := range []string{whole, frac} {
		for i := 0; i < len(part); i++ {
			c := part[i]
			if c < '0' || c > '9' {
				return false
			}
			nonzero = nonzero || c != '0'
		}
	}
	return nonzero
}

// imageRefRE follows the distribution reference grammar: an optional registry host
// (with port), lowercase path components, an optional tag and an optional digest.
var imageRefRE = regexp.MustCompile(`^` +
	`(?:(?:localhost|[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*)(?::[0-9]+)?/)?` +
	`[a-z0-9]+(?:(?:\.|_|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:\.|_|__|-+)[a-z0-9]+)*)*` +
	`(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?` +
	`(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?$`)

// ImageRef reports whether s is a plausible container image reference
// ("pi-job:latest", "ghcr.io/acme/pi-job:1.2@sha256:..."). It checks syntax
// only; whether the image is present is the runtime's question.
func ImageRef(s string) bool {
	return s != "" && len(s) <= MaxImageRef && imageRefRE.MatchString(s)
}
