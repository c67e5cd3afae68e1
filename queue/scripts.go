package queue

import (
	"embed"
	"regexp"
	"strings"

	"github.com/redis/go-redis/v9"
)

// The Lua scripts, one per state change. Each file documents its KEYS and
// ARGV at its top; the helpers of lua/lib.lua (and the common KEYS[1..14]
// layout it documents) are prepended to each when it is built.
//
//go:embed lua/*.lua
var luaFiles embed.FS

var (
	addScript              = buildScript("add.lua")
	fetchScript            = buildScript("fetch.lua")
	completeScript         = buildScript("complete.lua")
	failScript             = buildScript("fail.lua")
	deferScript            = buildScript("defer.lua")
	extendLockScript       = buildScript("extend_lock.lua")
	stalledScript          = buildScript("stalled.lua")
	pauseScript            = buildScript("pause.lua")
	getScript              = buildScript("get.lua")
	removeScript           = buildScript("remove.lua")
	schedulerUpsertScript  = buildScript("scheduler_upsert.lua")
	schedulerAdvanceScript = buildScript("scheduler_advance.lua")
	schedulerRemoveScript  = buildScript("scheduler_remove.lua")
	schedulersScript       = buildScript("schedulers.lua")
)

// layoutScript is one script built once per Config.Layout value (6, 5 and
// unset): lib.lua's layoutDefault, what a queue whose meta names no BullMQ
// version follows, is a constant of the script text, so no call passes it.
type layoutScript struct{ v6, v5, unset *redis.Script }

// of returns the script built for layout l.
func (s layoutScript) of(l Layout) *redis.Script {
	switch l {
	case Layout6:
		return s.v6
	case Layout5:
		return s.v5
	}
	return s.unset
}

// layoutDefaultLine is the lib.lua line each build rewrites.
const layoutDefaultLine = "local layoutDefault = 6\n"

// buildScript joins the lib.lua helpers the named script uses and the
// script, once per layout. redis.Script runs it with EVALSHA and falls back
// to EVAL when the server does not have it yet.
func buildScript(name string) layoutScript {
	return layoutScripts(scriptSource(name))
}

func layoutScripts(src string) layoutScript {
	return layoutScript{
		v6:    redis.NewScript(src),
		v5:    redis.NewScript(strings.Replace(src, layoutDefaultLine, "local layoutDefault = 5\n", 1)),
		unset: redis.NewScript(strings.Replace(src, layoutDefaultLine, "local layoutDefault = 0\n", 1)),
	}
}

func scriptSource(name string) string {
	lib, err := luaFiles.ReadFile("lua/lib.lua")
	if err != nil {
		panic(err) // embedded at build time; cannot happen
	}
	body, err := luaFiles.ReadFile("lua/" + name)
	if err != nil {
		panic(err)
	}
	return pruneLib(string(lib), string(body)) + "\n" + string(body)
}

// libDef is one top-level definition of lib.lua with the comment above it.
type libDef struct {
	name string
	text string
	uses map[string]bool
}

var libDefLine = regexp.MustCompile(`^local (?:function )?([A-Za-z_][A-Za-z0-9_]*)`)

// parseLib splits lib.lua into its top-level definitions: each starts at a
// line "local function name" or "local name" in column 0, preceded by its
// comment lines. The header comment before the first one is dropped.
func parseLib(lib string) []libDef {
	var defs []libDef
	var cur, comment []string
	flush := func() {
		if len(defs) > 0 {
			defs[len(defs)-1].text = strings.Join(cur, "\n")
		}
	}
	for line := range strings.SplitSeq(lib, "\n") {
		if m := libDefLine.FindStringSubmatch(line); m != nil {
			flush()
			defs = append(defs, libDef{name: m[1]})
			cur = append(comment, line)
			comment = nil
			continue
		}
		if strings.HasPrefix(line, "--") && !strings.HasPrefix(line, "--[[") && len(defs) > 0 {
			comment = append(comment, line)
			continue
		}
		// A blank or code line: comments seen so far belong to the current
		// definition (a comment inside a function body, or a trailing one).
		cur = append(cur, comment...)
		comment = nil
		if len(defs) > 0 {
			cur = append(cur, line)
		}
	}
	cur = append(cur, comment...)
	flush()
	for i := range defs {
		defs[i].uses = luaNames(defs[i].text)
	}
	return defs
}

var luaName = regexp.MustCompile(`(^|[^.:A-Za-z0-9_]|\.\.)([A-Za-z_][A-Za-z0-9_]*)`)

// luaNames returns the names Lua code reads, leaving out comments, string
// literals, field names after "." or ":", and names being assigned
// ("name =", which also covers table constructor keys).
func luaNames(code string) map[string]bool {
	code = luaCode(code)
	names := map[string]bool{}
	for _, m := range luaName.FindAllStringSubmatchIndex(code, -1) {
		rest := strings.TrimLeft(code[m[5]:], " \t")
		if strings.HasPrefix(rest, "=") && !strings.HasPrefix(rest, "==") {
			continue
		}
		names[code[m[4]:m[5]]] = true
	}
	return names
}

// luaCode blanks out comments and string literals (short and long).
func luaCode(src string) string {
	var b strings.Builder
	for i := 0; i < len(src); {
		switch {
		case strings.HasPrefix(src[i:], "--[["):
			i = skipPast(src, i+4, "]]")
			b.WriteByte(' ')
		case strings.HasPrefix(src[i:], "--"):
			i = skipPast(src, i+2, "\n") - 1
		case strings.HasPrefix(src[i:], "[["):
			i = skipPast(src, i+2, "]]")
			b.WriteString(`""`)
		case src[i] == '"' || src[i] == '\'':
			q := src[i]
			i++
			for i < len(src) && src[i] != q && src[i] != '\n' {
				if src[i] == '\\' {
					i++
				}
				i++
			}
			i++
			b.WriteString(`""`)
		default:
			b.WriteByte(src[i])
			i++
		}
	}
	return b.String()
}

// skipPast returns the index just after the first end at or after i, or
// len(src).
func skipPast(src string, i int, end string) int {
	if j := strings.Index(src[i:], end); j >= 0 {
		return i + j + len(end)
	}
	return len(src)
}

// pruneLib returns the definitions of lib that body uses, directly or
// through other definitions, in lib's order. Every definition runs on every
// call of a script, so leaving out unused ones saves server time.
func pruneLib(lib, body string) string {
	defs := parseLib(lib)
	byName := make(map[string]int, len(defs))
	for i, d := range defs {
		byName[d.name] = i
	}
	need := make([]bool, len(defs))
	var visit func(names map[string]bool)
	visit = func(names map[string]bool) {
		for n := range names {
			if i, ok := byName[n]; ok && !need[i] {
				need[i] = true
				visit(defs[i].uses)
			}
		}
	}
	visit(luaNames(body))
	var b strings.Builder
	b.WriteString("-- lib.lua helpers this script uses (see lua/lib.lua)\n")
	for i, d := range defs {
		if need[i] {
			b.WriteString(d.text)
			b.WriteString("\n")
		}
	}
	return b.String()
}
