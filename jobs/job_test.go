package jobs_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pidispatch/pidispatch/jobs"
)

func TestParseJob_Valid(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		give string
		want jobs.Job
	}{
		{"Local", `{"kind":"local","folder":"/home/me/proj","flow":"review","task":"fix it"}`,
			jobs.Job{Kind: jobs.KindLocal, Folder: "/home/me/proj", Flow: "review", Task: "fix it"}},
		{"LocalCommand", `{"kind":"local","folder":"/p","command":"lint"}`,
			jobs.Job{Kind: jobs.KindLocal, Folder: "/p", Command: "lint"}},
		{"Cron", `{"kind":"cron","folder":"/p","flow":"nightly","task":"t","image":"pi-job:2"}`,
			jobs.Job{Kind: jobs.KindCron, Folder: "/p", Flow: "nightly", Task: "t", Image: "pi-job:2"}},
		{"Chain", `{"kind":"chain","folder":"/p","flow":"f","task":"t","parentJobId":"local-0123456789abcdef"}`,
			jobs.Job{Kind: jobs.KindChain, Folder: "/p", Flow: "f", Task: "t", ParentJobID: "local-0123456789abcdef"}},
		{"Forge", `{"kind":"forge","repo":"acme/web","ref":"feature/x","flow":"f","task":"t","secretsProfile":"prod","waitFor":[{"profile":"jira","args":["PROJ-1"]},{"after":"90m"}]}`,
			jobs.Job{Kind: jobs.KindForge, Repo: "acme/web", Ref: "feature/x", Flow: "f", Task: "t", SecretsProfile: "prod",
				WaitFor: []jobs.WaitCondition{{Profile: "jira", Args: []string{"PROJ-1"}}, {After: "90m"}}}},
		{"ForgeSubgroupResume", `{"kind":"forge","repo":"group/sub/web","flow":"f","task":"t","resume":true}`,
			jobs.Job{Kind: jobs.KindForge, Repo: "group/sub/web", Flow: "f", Task: "t", Resume: true}},
		{"NetworkGranted", `{"kind":"local","folder":"/p","flow":"f","task":"t","network":true}`,
			jobs.Job{Kind: jobs.KindLocal, Folder: "/p", Flow: "f", Task: "t", Network: true}},
		{"ManualFolder", `{"kind":"manual","folder":"/p","flow":"f","task":"t"}`,
			jobs.Job{Kind: jobs.KindManual, Folder: "/p", Flow: "f", Task: "t"}},
		{"ManualRepo", `{"kind":"manual","repo":"a/b","ref":"main","flow":"f","task":"t"}`,
			jobs.Job{Kind: jobs.KindManual, Repo: "a/b", Ref: "main", Flow: "f", Task: "t"}},
		{"UnicodeTask", `{"kind":"local","folder":"/p","flow":"f","task":"répare \u2028 ça"}`,
			jobs.Job{Kind: jobs.KindLocal, Folder: "/p", Flow: "f", Task: "répare \u2028 ça"}},
		{"MaxTask", `{"kind":"local","folder":"/p","flow":"f","task":"` + strings.Repeat("x", jobs.MaxTaskBytes) + `"}`,
			jobs.Job{Kind: jobs.KindLocal, Folder: "/p", Flow: "f", Task: strings.Repeat("x", jobs.MaxTaskBytes)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			j, err := jobs.ParseJob([]byte(tt.give))
			require.NoError(t, err)
			require.Equal(t, tt.want, j)
			// Round trip: what we produce, we accept.
			data, err := json.Marshal(j)
			require.NoError(t, err)
			again, err := jobs.ParseJob(data)
			require.NoError(t, err)
			require.Equal(t, j, again)
		})
	}
}

func TestParseJob_Invalid(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", jobs.MaxTaskBytes+1)
	tests := []struct {
		name  string
		give  string
		field string // the field the error must name ("" = document-level)
		rule  string
	}{
		{"Empty", ``, "", "empty"},
		{"NotObject", `[]`, "", "must be a JSON object"},
		{"Trailing", `{"kind":"local"} {}`, "", "after the top-level value"},
		{"Truncated", `{"kind":"local"`, "", ""},
		{"InvalidUTF8", "{\"kind\":\"local\",\"task\":\"\xff\"}", "", "UTF-8"},
		{"UnknownField", `{"kind":"local","folder":"/p","flow":"f","task":"t","maxCost":"5"}`, "maxCost", "unknown field"},
		{"BadCost", `{"kind":"local","folder":"/p","flow":"f","task":"t","maxCostUsd":"0.0"}`, "maxCostUsd", "positive decimal"},
		{"SchedulerOnLocal", `{"kind":"local","folder":"/p","flow":"f","task":"t","schedulerId":"n"}`, "schedulerId", "only a cron job"},
		{"ModelSpace", `{"kind":"local","folder":"/p","flow":"f","task":"t","model":"a b"}`, "model", "printable"},
		{"UnknownNested", `{"kind":"forge","repo":"a/b","flow":"f","task":"t","waitFor":[{"profile":"j","every":"1m"}]}`, "every", "unknown field"},
		{"DuplicateKey", `{"kind":"local","folder":"/p","folder":"/q","flow":"f","task":"t"}`, `"folder"`, "duplicate key"},
		{"DuplicateFoldedKey", `{"kind":"local","folder":"/p","Folder":"/q","flow":"f","task":"t"}`, `"Folder"`, "duplicate key"},
		{"WrongType", `{"kind":"local","folder":"/p","flow":"f","task":"t","resume":"yes"}`, "resume", "boolean"},
		{"NoKind", `{"folder":"/p","flow":"f","task":"t"}`, "kind", "required"},
		{"UnknownKind", `{"kind":"github","folder":"/p","flow":"f","task":"t"}`, "kind", "unknown kind"},
		{"LocalNoFolder", `{"kind":"local","flow":"f","task":"t"}`, "folder", "required"},
		{"LocalWithRepo", `{"kind":"local","folder":"/p","repo":"a/b","flow":"f","task":"t"}`, "repo", "targets a folder"},
		{"RelativeFolder", `{"kind":"local","folder":"proj","flow":"f","task":"t"}`, "folder", "absolute"},
		{"UncleanFolder", `{"kind":"local","folder":"/p/../q","flow":"f","task":"t"}`, "folder", "clean"},
		{"NulFolder", `{"kind":"local","folder":"/p\u0000q","flow":"f","task":"t"}`, "folder", "NUL"},
		{"ForgeNoRepo", `{"kind":"forge","flow":"f","task":"t"}`, "repo", "required"},
		{"ForgeWithFolder", `{"kind":"forge","repo":"a/b","folder":"/p","flow":"f","task":"t"}`, "folder", "targets a repository"},
		{"BadRepo", `{"kind":"forge","repo":"acme","flow":"f","task":"t"}`, "repo", "owner/name"},
		{"DotDotRepo", `{"kind":"forge","repo":"acme/..","flow":"f","task":"t"}`, "repo", "owner/name"},
		{"BadRef", `{"kind":"forge","repo":"a/b","ref":"-delete","flow":"f","task":"t"}`, "ref", "git ref"},
		{"DotDotRef", `{"kind":"forge","repo":"a/b","ref":"a..b","flow":"f","task":"t"}`, "ref", "git ref"},
		{"ManualBoth", `{"kind":"manual","folder":"/p","repo":"a/b","flow":"f","task":"t"}`, "folder", "exactly one"},
		{"ManualFolderRef", `{"kind":"manual","folder":"/p","ref":"main","flow":"f","task":"t"}`, "ref", "only a repository"},
		{"NoFlowNoCommand", `{"kind":"local","folder":"/p","task":"t"}`, "flow", "exactly one of flow and command"},
		{"FlowAndCommand", `{"kind":"local","folder":"/p","flow":"f","command":"c","task":"t"}`, "flow", "exactly one"},
		{"BadFlow", `{"kind":"local","folder":"/p","flow":"a b","task":"t"}`, "flow", "^[A-Za-z0-9._-]+$"},
		{"BadCommand", `{"kind":"local","folder":"/p","command":"rm -rf"}`, "command", "^[A-Za-z0-9._-]+$"},
		{"NoTask", `{"kind":"local","folder":"/p","flow":"f"}`, "task", "required"},
		{"HugeTask", `{"kind":"local","folder":"/p","flow":"f","task":"` + long + `"}`, "task", "longer than 65536"},
		{"NulTask", `{"kind":"local","folder":"/p","flow":"f","task":"a\u0000b"}`, "task", "NUL"},
		{"BadImage", `{"kind":"local","folder":"/p","flow":"f","task":"t","image":"Bad Image"}`, "image", "image reference"},
		{"BadSecretsProfile", `{"kind":"forge","repo":"a/b","flow":"f","task":"t","secretsProfile":"a:b"}`, "secretsProfile", "^[A-Za-z0-9._-]+$"},
		{"EmptyWaitFor", `{"kind":"forge","repo":"a/b","flow":"f","task":"t","waitFor":[]}`, "waitFor", "1 to 4"},
		{"FiveWaitFor", `{"kind":"forge","repo":"a/b","flow":"f","task":"t","waitFor":[{"after":"1m"},{"after":"1m"},{"after":"1m"},{"after":"1m"},{"after":"1m"}]}`, "waitFor", "1 to 4"},
		{"WaitBoth", `{"kind":"forge","repo":"a/b","flow":"f","task":"t","waitFor":[{"profile":"j","after":"1m"}]}`, "waitFor[0]", "exactly one of profile and after"},
		{"WaitNeither", `{"kind":"forge","repo":"a/b","flow":"f","task":"t","waitFor":[{"after":"1m"},{}]}`, "waitFor[1]", "exactly one"},
		{"WaitBadProfile", `{"kind":"forge","repo":"a/b","flow":"f","task":"t","waitFor":[{"profile":"j,k"}]}`, "waitFor[0].profile", "^[A-Za-z0-9._-]+$"},
		{"WaitBareAfter", `{"kind":"forge","repo":"a/b","flow":"f","task":"t","waitFor":[{"after":"3600"}]}`, "waitFor[0].after", "needs a unit"},
		{"WaitLongAfter", `{"kind":"forge","repo":"a/b","flow":"f","task":"t","waitFor":[{"after":"721h"}]}`, "waitFor[0].after", "between 1s and 720h0m0s"},
		{"WaitAfterArgs", `{"kind":"forge","repo":"a/b","flow":"f","task":"t","waitFor":[{"after":"1m","args":["x"]}]}`, "waitFor[0].args", "only a profile"},
		{"WaitManyArgs", `{"kind":"forge","repo":"a/b","flow":"f","task":"t","waitFor":[{"profile":"j","args":["1","2","3","4","5","6","7","8","9"]}]}`, "waitFor[0].args", "at most 8"},
		{"WaitNulArg", `{"kind":"forge","repo":"a/b","flow":"f","task":"t","waitFor":[{"profile":"j","args":["ok","a\u0000"]}]}`, "waitFor[0].args[1]", "NUL"},
		{"CronWaits", `{"kind":"cron","folder":"/p","flow":"f","task":"t","waitFor":[{"after":"1m"}]}`, "waitFor", "cron job cannot wait"},
		{"CronResume", `{"kind":"cron","folder":"/p","flow":"f","task":"t","resume":true}`, "resume", "cron"},
		{"CommandResume", `{"kind":"local","folder":"/p","command":"c","resume":true}`, "resume", "command"},
		{"SecretsResume", `{"kind":"forge","repo":"a/b","flow":"f","task":"t","secretsProfile":"p","resume":true}`, "resume", "secrets"},
		{"ChainNoParent", `{"kind":"chain","folder":"/p","flow":"f","task":"t"}`, "parentJobId", "required"},
		{"ParentOnLocal", `{"kind":"local","folder":"/p","flow":"f","task":"t","parentJobId":"x"}`, "parentJobId", "only a chain"},
		{"BadParent", `{"kind":"chain","folder":"/p","flow":"f","task":"t","parentJobId":"a b"}`, "parentJobId", "must match"},
		{"AttemptNotData", `{"kind":"local","folder":"/p","flow":"f","task":"t","Attempt":2}`, "Attempt", "unknown field"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := jobs.ParseJob([]byte(tt.give))
			require.Error(t, err)
			require.ErrorIs(t, err, jobs.ErrInvalidJob)
			require.Contains(t, err.Error(), tt.rule)
			if tt.field != "" {
				var fe *jobs.FieldError
				require.ErrorAs(t, err, &fe, "%v", err)
				require.Equal(t, tt.field, fe.Field, "%v", err)
			}
		})
	}
}

func TestParseJob_Huge(t *testing.T) {
	t.Parallel()
	data := []byte(`{"kind":"local","folder":"/p","flow":"f","task":"` + strings.Repeat("x", jobs.MaxJobDataBytes) + `"}`)
	_, err := jobs.ParseJob(data)
	require.ErrorIs(t, err, jobs.ErrInvalidJob)
	require.Contains(t, err.Error(), "more than")
}

func TestJob_NeedsScopeTarget(t *testing.T) {
	t.Parallel()
	forge := jobs.Job{Kind: jobs.KindForge, Repo: "acme/web", Flow: "f", Task: "t", SecretsProfile: "prod",
		WaitFor: []jobs.WaitCondition{{Profile: "jira"}, {After: "1m"}, {Profile: "ci.v2"}, {Profile: "jira"}}}
	require.Equal(t, []string{"s:prod", "w:ci.v2", "w:jira"}, forge.Needs())
	require.Equal(t, []string{"jira", "ci.v2", "jira"}, forge.WaitProfiles())
	require.Equal(t, "acme/web", forge.Scope())
	require.Equal(t, "acme/web", forge.Target())

	local := jobs.Job{Kind: jobs.KindLocal, Folder: "/home/rob/clients/acme", Flow: "f", Task: "t"}
	require.Empty(t, local.Needs())
	require.NotNil(t, local.Needs())
	require.Equal(t, "/home/rob/clients/acme", local.Scope())
	require.Equal(t, "local:acme", local.Target(), "a record names the basename, never the full path")
}

func TestLocalJobID(t *testing.T) {
	t.Parallel()
	// Vectors computed with node: sha256(parts.join("\0")).hex.slice(0,16), minute being
	// new Date(ms).toISOString().slice(0, 16).
	at := time.Date(2026, 11, 30, 2, 11, 42, 0, time.UTC)
	require.Equal(t, "local-00a5c2f57c689cf5", jobs.LocalJobID("/home/me/proj", "review", "fix the bug", at))
	// Same minute in another zone and another second: same id (the minute is UTC).
	ams, err := time.LoadLocation("Europe/Amsterdam")
	require.NoError(t, err)
	require.Equal(t, "local-00a5c2f57c689cf5", jobs.LocalJobID("/home/me/proj", "review", "fix the bug", at.Add(17*time.Second).In(ams)))
	require.NotEqual(t, "local-00a5c2f57c689cf5", jobs.LocalJobID("/home/me/proj", "review", "fix the bug", at.Add(time.Minute)))
	require.Equal(t, "local-26c83670cfedc325", jobs.LocalJobID("/srv/ü", "cmd:lint", "", time.Date(2027, 1, 1, 0, 0, 59, 999e6, time.UTC)))
	require.Equal(t, "chain-be75be984d2b5edd", jobs.ChainJobID("local-0123456789abcdef", "review", "follow up"))
	// The separator is NUL, so moving text across a boundary changes the id.
	require.NotEqual(t, jobs.ChainJobID("a", "bc", "d"), jobs.ChainJobID("ab", "c", "d"))
	require.True(t, jobs.ValidJobID(jobs.ChainJobID("p", "f", "t")))
}

func TestLocalRunID(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 30, 2, 11, 42, 0, time.UTC)
	base := jobs.Job{Kind: jobs.KindLocal, Folder: "/home/me/proj", Flow: "review", Task: "fix the bug"}
	// A job with only folder, flow and task keeps the original's id.
	require.Equal(t, "local-00a5c2f57c689cf5", jobs.LocalRunID(base, at))
	require.Equal(t, "local-26c83670cfedc325", jobs.LocalRunID(jobs.Job{Folder: "/srv/ü", Command: "lint"}, time.Date(2027, 1, 1, 0, 0, 59, 0, time.UTC)))
	// Every field that changes what runs makes another job.
	seen := map[string]string{jobs.LocalRunID(base, at): "base"}
	pkgs := false
	for name, change := range map[string]func(*jobs.Job){
		"image":          func(j *jobs.Job) { j.Image = "pi-job:2" },
		"model":          func(j *jobs.Job) { j.Model = "m" },
		"provider":       func(j *jobs.Job) { j.Provider = "p" },
		"models":         func(j *jobs.Job) { j.Models = []string{"a"} },
		"maxTurns":       func(j *jobs.Job) { j.MaxTurns = 3 },
		"maxCostUsd":     func(j *jobs.Job) { j.MaxCostUSD = "1.00" },
		"packages":       func(j *jobs.Job) { j.Packages = &pkgs },
		"secretsProfile": func(j *jobs.Job) { j.SecretsProfile = "prod" },
		"waitFor":        func(j *jobs.Job) { j.WaitFor = []jobs.WaitCondition{{After: "1m"}} },
		"resume":         func(j *jobs.Job) { j.Resume = true },
		"skillsDir":      func(j *jobs.Job) { j.SkillsDir = "/skills" },
		"github":         func(j *jobs.Job) { j.GitHub = true },
		"excludeTools":   func(j *jobs.Job) { j.ExcludeTools = []string{"bash"} },
	} {
		j := base
		change(&j)
		id := jobs.LocalRunID(j, at)
		if prev, dup := seen[id]; dup {
			t.Errorf("%s: same id as %s", name, prev)
		}
		seen[id] = name
		require.True(t, jobs.ValidJobID(id))
		require.Regexp(t, `^local-[0-9a-f]{16}$`, id)
		// Still one job per minute.
		require.Equal(t, id, jobs.LocalRunID(j, at.Add(10*time.Second)), name)
	}
	// The attempt is not part of what runs.
	j := base
	j.Attempt = 2
	require.Equal(t, "local-00a5c2f57c689cf5", jobs.LocalRunID(j, at))
	// An extra part (the nonce of a forced fresh run) makes another job.
	require.NotEqual(t, jobs.LocalRunID(base, at), jobs.LocalRunID(base, at, "new:1"))
}

func TestValidImageRef(t *testing.T) {
	t.Parallel()
	good := []string{"pi-job", "pi-job:latest", "ghcr.io/edgehero/pi-job:1.8.0", "localhost:5000/a/b_c__d", "a.b-c:Tag_1.0",
		"registry.example.com:443/x@sha256:" + strings.Repeat("0", 64), "x:1@sha256:" + strings.Repeat("f", 64), "Registry.Example/x"}
	bad := []string{"", "Pi-Job", "pi job", "pi-job:", ":x", "a//b", "a/", "/a", "a:-tag", "a@sha256:12", "a\x00b", strings.Repeat("a", 600)}
	for _, s := range good {
		require.True(t, jobs.ValidImageRef(s), s)
	}
	for _, s := range bad {
		require.False(t, jobs.ValidImageRef(s), s)
	}
}

func FuzzParseJob(f *testing.F) {
	f.Add([]byte(`{"kind":"forge","repo":"a/b","flow":"f","task":"t","waitFor":[{"profile":"j","args":["x"]}]}`))
	f.Add([]byte(`{"kind":"local","folder":"/p","command":"c"}`))
	f.Add([]byte(`{"kind":"chain","folder":"/p","flow":"f","task":"t","parentJobId":"x"}`))
	f.Add([]byte(`{"a":{"b":[1,{"c":null}]},"a":2}`))
	f.Add([]byte("\xff\x00"))
	f.Fuzz(func(t *testing.T, data []byte) {
		j, err := jobs.ParseJob(data)
		if err != nil {
			if !errors.Is(err, jobs.ErrInvalidJob) {
				t.Fatalf("error does not wrap ErrInvalidJob: %v", err)
			}
			return
		}
		// Anything accepted validates, round-trips, and has sane derived values.
		if err := j.Validate(); err != nil {
			t.Fatalf("accepted job does not validate: %v", err)
		}
		out, err := json.Marshal(j)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := jobs.ParseJob(out); err != nil {
			t.Fatalf("re-encoded job refused: %v\n%s", err, out)
		}
		_ = j.Needs()
		_ = j.Target()
	})
}

func ExampleLocalJobID() {
	minute := time.Date(2026, 11, 30, 2, 11, 42, 0, time.UTC)
	fmt.Println(jobs.LocalJobID("/home/me/proj", "review", "fix the bug", minute))
	fmt.Println(jobs.ChainJobID("local-0123456789abcdef", "review", "follow up"))
	// Output:
	// local-00a5c2f57c689cf5
	// chain-be75be984d2b5edd
}

func ExampleParseJob() {
	j, err := jobs.ParseJob([]byte(`{"kind":"forge","repo":"acme/web","flow":"review","task":"look","secretsProfile":"prod","waitFor":[{"profile":"jira","args":["WEB-1"]}]}`))
	fmt.Println(err, j.Needs(), j.Scope())
	_, err = jobs.ParseJob([]byte(`{"kind":"forge","repo":"acme/web","flow":"review","task":"look","maxCost":99}`))
	fmt.Println(err)
	// Output:
	// <nil> [s:prod w:jira] acme/web
	// invalid job: maxCost: unknown field
}
