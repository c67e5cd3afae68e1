package queue

import (
	"embed"

	"github.com/redis/go-redis/v9"
)

// The Lua scripts, one per state change. Each file documents its KEYS and
// ARGV at its top; lua/lib.lua (shared helpers, and the common KEYS[1..14]
// layout) is prepended to each when it is built.
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

// buildScript joins lib.lua and the named script. redis.Script runs it with
// EVALSHA and falls back to EVAL when the server does not have it yet.
func buildScript(name string) *redis.Script {
	lib, err := luaFiles.ReadFile("lua/lib.lua")
	if err != nil {
		panic(err) // embedded at build time; cannot happen
	}
	body, err := luaFiles.ReadFile("lua/" + name)
	if err != nil {
		panic(err)
	}
	return redis.NewScript(string(lib) + "\n" + string(body))
}
