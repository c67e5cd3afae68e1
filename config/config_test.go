package config_test

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pidispatch/pidispatch/config"
	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/fleet"
)

func envOf(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

// field reads the Config field a variable sets, so the tables stay free of funcs.
func field(c config.Config, name string) any {
	switch name {
	case "VALKEY_URL":
		return c.ValkeyURL
	case "VALKEY_PASSWORD":
		return c.ValkeyPassword
	case "PI_WORKER_NAME":
		return fmt.Sprintf("%s declared=%t", c.WorkerName, c.WorkerNameDeclared)
	case "PI_BULLMQ_LAYOUT":
		return c.BullMQLayout
	case "PI_CONCURRENCY":
		return c.Concurrency
	case "PI_GATEWAY_MAX_CALLS":
		return c.Gateway.MaxCalls
	case "PI_GATEWAY_MAX_BODY_BYTES":
		return c.Gateway.MaxBodyBytes
	case "PI_GATEWAY_MAX_CONNS":
		return c.Gateway.MaxConns
	case "PI_ALLOWED_MODELS":
		return strings.Join(c.Gateway.AllowedModels, "|")
	case "PI_DAILY_CAP":
		return c.DailyCap
	case "PI_WEEKLY_CAP":
		return c.WeeklyCap
	case "PI_JOB_IMAGE":
		return c.JobImage
	case "PI_JOB_MEMORY":
		return c.JobMemory
	case "PI_JOB_CPUS":
		return c.JobCPUs
	case "PI_JOB_TIMEOUT":
		return c.JobTimeout
	case "PI_SHUTDOWN_GRACE":
		return c.ShutdownGrace
	case "PI_CONTAINER_USER":
		return c.ContainerUser
	case "PI_JOB_NETWORK":
		return c.JobNetwork
	case "PI_MODEL_UPSTREAM":
		return c.ModelUpstream
	case "PI_LOGS_DIR":
		return c.LogsDir
	case "PI_LOG_RETENTION_DAYS":
		return c.LogRetentionDays
	case "PI_SESSION_STORE":
		return c.SessionStore
	case "PI_TRIGGERS_FILE":
		return c.TriggersFile
	case "PI_SCOPED_LIMITS_FILE":
		return c.ScopedLimitsFile
	case "PI_PAUSE_WINDOWS_FILE":
		return c.PauseWindowsFile
	case "PI_SECRET_PROFILES":
		return c.SecretProfiles
	case "PI_SECRET_RESOLVE_TIMEOUT_MS":
		return c.SecretResolveTimeout
	case "PI_WAIT_PROFILES":
		return c.WaitProfiles
	case "PI_WAIT_CHECK_TIMEOUT_MS":
		return c.WaitCheckTimeout
	case "PI_WAIT_CHECK_SLOTS":
		return c.WaitCheckSlots
	case "PI_WAIT_INTERVAL_MS":
		return c.WaitInterval
	case "PI_WAIT_MAX_MS":
		return c.WaitMax
	case "PI_WAIT_AFTER_MAX_MS":
		return c.WaitAfterMax
	}
	panic("no field for " + name)
}

func TestLoad_Defaults(t *testing.T) {
	t.Parallel()
	c, err := config.Load(envOf(nil))
	require.NoError(t, err)
	want := config.Config{
		ValkeyURL:        "redis://127.0.0.1:6379",
		BullMQLayout:     6,
		DailyCap:         25,
		EventMaxComments: 20,
		Settings: dispatch.Settings{
			WorkerName:           fleet.DefaultName(),
			Concurrency:          3,
			JobImage:             "pi-job:latest",
			JobMemory:            4 << 30,
			JobCPUs:              2,
			JobTimeout:           30 * time.Minute,
			ShutdownGrace:        25 * time.Second,
			JobNetwork:           "bridge",
			LogsDir:              "/tmp/pi-dispatch/logs",
			LogRetentionDays:     30,
			SecretResolveTimeout: 10 * time.Second,
			WaitCheckTimeout:     10 * time.Second,
			WaitCheckSlots:       1,
			WaitInterval:         60 * time.Second,
			WaitMax:              24 * time.Hour,
			WaitAfterMax:         30 * 24 * time.Hour,
		},
		Gateway: config.Gateway{Gateway: dispatch.Gateway{DefaultProvider: "anthropic", MaxConns: 32},
			DefaultModel: "claude-sonnet-4-5", RateLimitWait: time.Minute, MaxCalls: 4, MaxBodyBytes: 32 << 20},
		JobOutputMax: 16 << 20,
	}
	require.Equal(t, want, c)
	require.NoError(t, c.Validate())
	require.NoError(t, config.Default().Validate())
}

func TestLoad_GoodValues(t *testing.T) {
	t.Parallel()
	digest := "sha256:" + strings.Repeat("ab", 32)
	tests := []struct {
		name  string
		value string
		want  any
	}{
		{"VALKEY_URL", "rediss://:pw@valkey.example:6380/2", "rediss://:pw@valkey.example:6380/2"},
		{"VALKEY_URL", "redis://[::1]:6379", "redis://[::1]:6379"},
		{"VALKEY_URL", "redis://valkey/0?dial_timeout=3s", "redis://valkey/0?dial_timeout=3s"},
		{"VALKEY_URL", "unix:///run/valkey/valkey.sock?db=2", "unix:///run/valkey/valkey.sock?db=2"},
		// A Sentinel URL: the host is a sentinel, more follow as addr=.
		{"VALKEY_URL", "redis://127.0.0.1:26379/0?master_name=pi&addr=127.0.0.1:26380", "redis://127.0.0.1:26379/0?master_name=pi&addr=127.0.0.1:26380"},
		{"VALKEY_URL", "unix://:pw@/run/valkey.sock", "unix://:pw@/run/valkey.sock"},
		{"VALKEY_PASSWORD", "s3cret-Pass_+/=", "s3cret-Pass_+/="},
		{"PI_WORKER_NAME", "", fleet.DefaultName() + " declared=false"},
		{"PI_WORKER_NAME", "mini-1", "mini-1 declared=true"},
		{"PI_WORKER_NAME", "Mac.Studio_2", "Mac.Studio_2 declared=true"}, // verbatim, never lowercased
		{"PI_WORKER_NAME", strings.Repeat("a", 64), strings.Repeat("a", 64) + " declared=true"},
		{"PI_BULLMQ_LAYOUT", "5", 5},
		{"PI_BULLMQ_LAYOUT", "6", 6},
		{"PI_BULLMQ_LAYOUT", "", 6},
		{"PI_CONCURRENCY", "8", 8},
		{"PI_CONCURRENCY", "256", 256},
		{"PI_CONCURRENCY", "", 3},
		{"PI_DAILY_CAP", "1", 1},
		{"PI_DAILY_CAP", "1000000", 1000000},
		{"PI_WEEKLY_CAP", "100", 100},
		{"PI_WEEKLY_CAP", "", 0},
		{"PI_JOB_IMAGE", "ghcr.io/acme/pi-job:1.2", "ghcr.io/acme/pi-job:1.2"},
		{"PI_JOB_IMAGE", "localhost:5000/team/pi_job@" + digest, "localhost:5000/team/pi_job@" + digest},
		{"PI_JOB_MEMORY", "512m", int64(512 << 20)},
		{"PI_JOB_MEMORY", "4G", int64(4 << 30)},
		{"PI_JOB_MEMORY", "8192k", int64(8 << 20)},
		{"PI_JOB_MEMORY", "6291456", int64(6 << 20)},
		{"PI_JOB_MEMORY", "1t", int64(1 << 40)},
		{"PI_JOB_CPUS", "0.5", 0.5},
		{"PI_JOB_CPUS", "16", 16.0},
		{"PI_JOB_CPUS", "0.01", 0.01},
		{"PI_JOB_CPUS", "1024", 1024.0},
		{"PI_CONTAINER_USER", "owner", "owner"},
		{"PI_CONTAINER_USER", "image", "image"},
		{"PI_CONTAINER_USER", "root", "root"},
		{"PI_CONTAINER_USER", "1000:1000", "1000:1000"},
		{"PI_CONTAINER_USER", "0:0", "0:0"},
		{"PI_CONTAINER_USER", "", ""},
		{"PI_JOB_TIMEOUT", "45m", 45 * time.Minute},
		{"PI_JOB_TIMEOUT", "1h30m", 90 * time.Minute},
		{"PI_JOB_TIMEOUT", "1s", time.Second},
		{"PI_JOB_TIMEOUT", "24h", 24 * time.Hour},
		{"PI_SHUTDOWN_GRACE", "2m", 2 * time.Minute},
		{"PI_JOB_NETWORK", "pi-egress", "pi-egress"},
		{"PI_MODEL_UPSTREAM", "https://api.anthropic.com", "https://api.anthropic.com"},
		{"PI_MODEL_UPSTREAM", "http://127.0.0.1:8080/gateway", "http://127.0.0.1:8080/gateway"},
		{"PI_LOGS_DIR", "/srv/pi/logs", "/srv/pi/logs"},
		{"PI_SESSION_STORE", "valkey", "valkey"},
		{"PI_SESSION_STORE", "logs", "logs"},
		{"PI_LOG_RETENTION_DAYS", "7", 7},
		{"PI_LOG_RETENTION_DAYS", "3650", 3650},
		{"PI_TRIGGERS_FILE", "./triggers.json", "./triggers.json"},
		{"PI_SCOPED_LIMITS_FILE", "/etc/pi/scoped-limits.json", "/etc/pi/scoped-limits.json"},
		{"PI_PAUSE_WINDOWS_FILE", "pause-windows.json", "pause-windows.json"},
		{"PI_SECRET_PROFILES", "prod:/usr/local/lib/pi/resolve-prod,ci.v2:/opt/r", map[string]string{"prod": "/usr/local/lib/pi/resolve-prod", "ci.v2": "/opt/r"}},
		{"PI_SECRET_PROFILES", "", map[string]string(nil)},
		{"PI_SECRET_PROFILES", "a:/x:y", map[string]string{"a": "/x:y"}}, // splits at the first colon
		{"PI_SECRET_RESOLVE_TIMEOUT_MS", "2500", 2500 * time.Millisecond},
		{"PI_SECRET_RESOLVE_TIMEOUT_MS", "600000", 10 * time.Minute},
		{"PI_WAIT_PROFILES", "jira:/usr/local/lib/pi/check-jira", map[string]string{"jira": "/usr/local/lib/pi/check-jira"}},
		{"PI_WAIT_CHECK_TIMEOUT_MS", "1", time.Millisecond},
		{"PI_WAIT_CHECK_SLOTS", "4", 4},
		{"PI_WAIT_INTERVAL_MS", "30000", 30 * time.Second},
		{"PI_WAIT_INTERVAL_MS", "120000", 2 * time.Minute},
		{"PI_WAIT_MAX_MS", "3600000", time.Hour},
		{"PI_WAIT_MAX_MS", "2592000000", 30 * 24 * time.Hour},
		{"PI_WAIT_AFTER_MAX_MS", "1000", time.Second},
		{"PI_WAIT_AFTER_MAX_MS", "2592000000", 30 * 24 * time.Hour},
		{"PI_GATEWAY_MAX_CALLS", "2", 2},
		{"PI_GATEWAY_MAX_BODY_BYTES", "4096", int64(4096)},
		{"PI_GATEWAY_MAX_CONNS", "150", 150},
		{"PI_ALLOWED_MODELS", "anthropic/claude-sonnet-4-5*,openrouter/anthropic/*", "anthropic/claude-sonnet-4-5*|openrouter/anthropic/*"},
	}
	for _, tt := range tests {
		t.Run(tt.name+"="+tt.value, func(t *testing.T) {
			t.Parallel()
			c, err := config.Load(envOf(map[string]string{tt.name: tt.value}))
			require.NoError(t, err)
			require.Equal(t, tt.want, field(c, tt.name))
			require.NoError(t, c.Validate())
		})
	}
}

func TestLoad_BadValues(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		value string
		rule  string // a fragment of the rule the error must state
	}{
		{"VALKEY_URL", "http://127.0.0.1:6379", "redis://, rediss:// or unix://"},
		{"VALKEY_URL", "redis://", "needs a host"},
		{"VALKEY_URL", "redis:127.0.0.1", "redis://, rediss:// or unix://"},
		{"VALKEY_URL", "127.0.0.1:6379", "redis://, rediss:// or unix://"},
		{"VALKEY_URL", "redis://host:0", "port must be between 1 and 65535"},
		{"VALKEY_URL", "redis://host:99999", "port must be between 1 and 65535"},
		{"VALKEY_URL", "redis://host/abc", "database number"},
		{"VALKEY_URL", "redis://host/0#x", "fragment"},
		{"VALKEY_URL", "unix://valkey/run/valkey.sock", "absolute path, with no host"},
		{"VALKEY_URL", "unix:///run/", "absolute path, with no host"},
		{"VALKEY_URL", "unix:run/valkey.sock", "redis://, rediss:// or unix://"},
		{"VALKEY_PASSWORD", "line\nbreak", "control characters"},
		{"PI_WORKER_NAME", "-x", "must start with a letter or digit"},
		{"PI_WORKER_NAME", "my host", "may contain only"},
		{"PI_WORKER_NAME", "prod.json", "must not end in .json or .log"},
		{"PI_WORKER_NAME", "x.LOG", "must not end in .json or .log"},
		{"PI_WORKER_NAME", strings.Repeat("a", 65), "longer than 64"},
		{"PI_BULLMQ_LAYOUT", "7", "must be 6 or 5"},
		{"PI_BULLMQ_LAYOUT", "v6", "must be 6 or 5"},
		{"PI_BULLMQ_LAYOUT", "6.7.6", "must be 6 or 5"},
		{"PI_CONCURRENCY", "0", "between 1 and 256"},
		{"PI_CONCURRENCY", "257", "between 1 and 256"},
		{"PI_CONCURRENCY", "-1", "plain digits"},
		{"PI_CONCURRENCY", "+3", "plain digits"},
		{"PI_CONCURRENCY", " 3", "plain digits"},
		{"PI_CONCURRENCY", "3 ", "plain digits"},
		{"PI_CONCURRENCY", "3.0", "plain digits"},
		{"PI_CONCURRENCY", "3abc", "plain digits"},
		{"PI_CONCURRENCY", "03", "plain digits"},
		{"PI_CONCURRENCY", "1e3", "plain digits"},
		{"PI_CONCURRENCY", "99999999999999999999", "between 1 and 256"},
		{"PI_CONCURRENCY", "4294967297", "between 1 and 256"},
		{"PI_DAILY_CAP", "0", "between 1 and 1000000"},
		{"PI_DAILY_CAP", "1000001", "between 1 and 1000000"},
		{"PI_DAILY_CAP", "ten", "plain digits"},
		{"PI_WEEKLY_CAP", "0", "unset it to disable"},
		{"PI_WEEKLY_CAP", "1000001", "between 1 and 1000000"},
		{"PI_WEEKLY_CAP", "1_000", "plain digits"},
		{"PI_JOB_IMAGE", "Pi-Job:latest", "image reference"},
		{"PI_JOB_IMAGE", "pi job", "image reference"},
		{"PI_JOB_IMAGE", "pi-job:", "image reference"},
		{"PI_JOB_IMAGE", ":latest", "image reference"},
		{"PI_JOB_IMAGE", "a//b", "image reference"},
		{"PI_JOB_IMAGE", "pi-job@sha256:abc", "image reference"},
		{"PI_JOB_MEMORY", "4gb", "size such as"},
		{"PI_JOB_MEMORY", "4.5g", "size such as"},
		{"PI_JOB_MEMORY", "-1g", "size such as"},
		{"PI_JOB_MEMORY", "g", "size such as"},
		{"PI_JOB_MEMORY", "4 g", "size such as"},
		{"PI_JOB_MEMORY", "1m", "between 6m and 1t"},
		{"PI_JOB_MEMORY", "1024k", "between 6m and 1t"},
		{"PI_JOB_MEMORY", "0", "between 6m and 1t"},
		{"PI_JOB_MEMORY", "2t", "between 6m and 1t"},
		{"PI_JOB_MEMORY", "99999999999999999999g", "between 6m and 1t"},
		{"PI_JOB_CPUS", "0", "between 0.01 and 1024"},
		{"PI_JOB_CPUS", "0.001", "between 0.01 and 1024"},
		{"PI_JOB_CPUS", "1025", "between 0.01 and 1024"},
		{"PI_JOB_CPUS", "1e2", "decimal number"},
		{"PI_JOB_CPUS", "-1", "decimal number"},
		{"PI_JOB_CPUS", ".5", "decimal number"},
		{"PI_JOB_CPUS", "1.", "decimal number"},
		{"PI_JOB_CPUS", "NaN", "decimal number"},
		{"PI_JOB_CPUS", "Inf", "decimal number"},
		{"PI_JOB_CPUS", "2 ", "decimal number"},
		{"PI_CONTAINER_USER", "1000", "UID:GID in numbers"},
		{"PI_CONTAINER_USER", "bob", `"owner" (the folder's owner, the default), "image"`},
		{"PI_CONTAINER_USER", "bob:staff", "UID:GID in numbers"},
		{"PI_CONTAINER_USER", "-1:0", "UID:GID"},
		{"PI_CONTAINER_USER", "01:1", "UID:GID"},
		{"PI_CONTAINER_USER", "4294967295:0", "UID:GID"},
		{"PI_CONTAINER_USER", "1000:1000:1", "UID:GID"},
		{"PI_CONTAINER_USER", "Owner", "UID:GID"},
		{"PI_JOB_TIMEOUT", "1800", "needs a unit"},
		{"PI_JOB_TIMEOUT", "1800000", "needs a unit"},
		{"PI_JOB_TIMEOUT", "-5m", "Go duration"},
		{"PI_JOB_TIMEOUT", "+30m", "Go duration"},
		{"PI_JOB_TIMEOUT", "30 m", "Go duration"},
		{"PI_JOB_TIMEOUT", "thirty", "Go duration"},
		{"PI_SHUTDOWN_GRACE", "0s", "between"},
		{"PI_SHUTDOWN_GRACE", "2h", "between"},
		{"PI_SHUTDOWN_GRACE", "25", "needs a unit"},
		{"PI_JOB_TIMEOUT", "0s", "between 1s and 24h0m0s"},
		{"PI_JOB_TIMEOUT", "500ms", "between 1s and 24h0m0s"},
		{"PI_JOB_TIMEOUT", "25h", "between 1s and 24h0m0s"},
		{"PI_JOB_NETWORK", "host", "must not share the host's"},
		{"PI_JOB_NETWORK", "container:abc", "must not share the host's"},
		{"PI_MODEL_UPSTREAM", "api.anthropic.com", "http:// or https:// URL"},
		{"PI_MODEL_UPSTREAM", "ftp://x", "http:// or https:// URL"},
		{"PI_MODEL_UPSTREAM", "https://gw/v1?key=x", "must not have a query"},
		{"PI_LOGS_DIR", "logs", "absolute path"},
		{"PI_SESSION_STORE", "redis", "must be logs (this host's logs folder) or valkey"},
		{"PI_LOGS_DIR", "/srv/logs/", "clean path"},
		{"PI_LOGS_DIR", "/srv/../logs", "clean path"},
		{"PI_LOG_RETENTION_DAYS", "0", "between 1 and 3650"},
		{"PI_LOG_RETENTION_DAYS", "3651", "between 1 and 3650"},
		{"PI_LOG_RETENTION_DAYS", "30d", "plain digits"},
		{"PI_TRIGGERS_FILE", "/etc/pi/", "must name a file"},
		{"PI_SCOPED_LIMITS_FILE", "a\x00b", "without NUL"},
		{"PI_PAUSE_WINDOWS_FILE", "/x/", "must name a file"},
		{"PI_SECRET_PROFILES", "prod", "entry 1"},
		{"PI_SECRET_PROFILES", "prod:resolve-prod", "absolute path"},
		{"PI_SECRET_PROFILES", "bad name:/x", "must match ^[A-Za-z0-9._-]+$"},
		{"PI_SECRET_PROFILES", ":/x", "must match ^[A-Za-z0-9._-]+$"},
		{"PI_SECRET_PROFILES", "a:/x,a:/y", "declared twice"},
		{"PI_SECRET_PROFILES", "a:/x,", "entry 2 is empty"},
		{"PI_SECRET_PROFILES", "a:/x, b:/y", "entry 2"},
		{"PI_SECRET_PROFILES", "a:/x/../y", "clean path"},
		{"PI_SECRET_RESOLVE_TIMEOUT_MS", "0", "between 1 and 600000"},
		{"PI_SECRET_RESOLVE_TIMEOUT_MS", "600001", "between 1 and 600000"},
		{"PI_SECRET_RESOLVE_TIMEOUT_MS", "10s", "plain digits"},
		{"PI_WAIT_PROFILES", "jira=/x", "name:/absolute/path"},
		{"PI_WAIT_PROFILES", "jira:/x,jira:/x", "declared twice"},
		{"PI_WAIT_CHECK_TIMEOUT_MS", "0", "between 1 and 600000"},
		{"PI_WAIT_CHECK_TIMEOUT_MS", "1.5", "plain digits"},
		{"PI_WAIT_CHECK_SLOTS", "0", "between 1 and 64"},
		{"PI_WAIT_CHECK_SLOTS", "65", "between 1 and 64"},
		{"PI_WAIT_INTERVAL_MS", "29999", "floor of 30000"},
		{"PI_WAIT_INTERVAL_MS", "0", "floor of 30000"},
		{"PI_WAIT_INTERVAL_MS", "86400001", "between 30000 and 86400000"},
		{"PI_WAIT_INTERVAL_MS", "60s", "plain digits"},
		{"PI_WAIT_MAX_MS", "0", "at least PI_WAIT_INTERVAL_MS (60000)"},
		{"PI_WAIT_MAX_MS", "59999", "at least PI_WAIT_INTERVAL_MS (60000)"},
		{"PI_WAIT_MAX_MS", "2592000001", "between 1 and 2592000000"},
		{"PI_WAIT_MAX_MS", "99999999999999999", "between 1 and 2592000000"},
		{"PI_WAIT_AFTER_MAX_MS", "999", "between 1000 and 2592000000"},
		{"PI_WAIT_AFTER_MAX_MS", "2592000001", "between 1000 and 2592000000"},
		{"PI_WAIT_AFTER_MAX_MS", "1e6", "whole number"},
		{"PI_WAIT_AFTER_MAX_MS", "-5", "whole number"},
		{"PI_GATEWAY_MAX_CALLS", "0", "between 1 and 64"},
		{"PI_GATEWAY_MAX_CALLS", "8", "at most 134217728 (128 MiB)"},
		{"PI_GATEWAY_MAX_BODY_BYTES", "100", "between 4096 and 33554432"},
		{"PI_GATEWAY_MAX_CONNS", "151", "between 1 and 150"},
		{"PI_ALLOWED_MODELS", "anthropic/claude sonnet", "provider/model patterns"},
		{"PI_ALLOWED_MODELS", "claude-sonnet-4-5", "provider/model patterns"},
	}
	for _, tt := range tests {
		t.Run(tt.name+"="+tt.value, func(t *testing.T) {
			t.Parallel()
			_, err := config.Load(envOf(map[string]string{tt.name: tt.value}))
			require.Error(t, err)
			var errs config.ConfigErrors
			require.ErrorAs(t, err, &errs)
			require.Len(t, errs, 1, "one bad variable, one error: %v", err)
			var ce *config.ConfigError
			require.ErrorAs(t, err, &ce)
			require.Equal(t, tt.name, ce.Var)
			require.Contains(t, ce.Rule, tt.rule)
			require.True(t, strings.HasPrefix(ce.Error(), tt.name+"="), ce.Error())
			if tt.name != "VALKEY_PASSWORD" && tt.name != "VALKEY_URL" {
				require.Equal(t, tt.value, ce.Value, "the value is reported as typed, never altered")
			}
		})
	}
}

func TestLoad_CollectsEveryError(t *testing.T) {
	t.Parallel()
	_, err := config.Load(envOf(map[string]string{
		"PI_WAIT_INTERVAL_MS": "1000",
		"PI_CONCURRENCY":      "many",
		"VALKEY_URL":          "http://x",
		"PI_JOB_TIMEOUT":      "30",
	}))
	var errs config.ConfigErrors
	require.ErrorAs(t, err, &errs)
	var vars []string
	for _, e := range errs {
		vars = append(vars, e.Var)
	}
	require.Equal(t, []string{"VALKEY_URL", "PI_CONCURRENCY", "PI_JOB_TIMEOUT", "PI_WAIT_INTERVAL_MS"}, vars, "all of them, in EnvVars order")
	var first *config.ConfigError
	require.ErrorAs(t, err, &first)
	require.Equal(t, "VALKEY_URL", first.Var)
	require.Contains(t, err.Error(), `PI_CONCURRENCY="many": must be a whole number`)
}

func TestLoad_DeclaredNameIsNeverAltered(t *testing.T) {
	t.Parallel()
	// A sanitizable name is still refused when declared: the operator typed it.
	_, err := config.Load(envOf(map[string]string{"PI_WORKER_NAME": "Robs Mac"}))
	var ce *config.ConfigError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, `PI_WORKER_NAME="Robs Mac": name may contain only letters, digits, '.', '_' and '-' (^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$, not ending in .json or .log)`, ce.Error())
}

func TestLoad_LogsDirDefaultFollowsTMPDIR(t *testing.T) {
	t.Parallel()
	tests := []struct{ tmpdir, want string }{
		{"", "/tmp/pi-dispatch/logs"},
		{"/var/tmp", "/var/tmp/pi-dispatch/logs"},
		{"/var/tmp/", "/var/tmp/pi-dispatch/logs"},
		{"relative/tmp", "/tmp/pi-dispatch/logs"},
	}
	for _, tt := range tests {
		c, err := config.Load(envOf(map[string]string{"TMPDIR": tt.tmpdir}))
		require.NoError(t, err)
		require.Equal(t, tt.want, c.LogsDir, "TMPDIR=%q", tt.tmpdir)
	}
}

// Records default to a per-user state folder, which a reboot does not empty;
// the temporary folder only when no home is known.
func TestLoad_LogsDirDefaultSurvivesReboot(t *testing.T) {
	t.Parallel()
	tests := []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"HOME": "/home/op", "TMPDIR": "/var/tmp"}, "/home/op/.local/state/pidispatch/runs"},
		{map[string]string{"XDG_STATE_HOME": "/srv/state", "HOME": "/home/op"}, "/srv/state/pidispatch/runs"},
		{map[string]string{"XDG_STATE_HOME": "state", "HOME": "/home/op"}, "/home/op/.local/state/pidispatch/runs"},
		{map[string]string{"HOME": "op", "TMPDIR": "/var/tmp"}, "/var/tmp/pi-dispatch/logs"},
		{map[string]string{"HOME": "/home/op", "PI_LOGS_DIR": "/data/runs"}, "/data/runs"},
	}
	for _, tt := range tests {
		c, err := config.Load(envOf(tt.env))
		require.NoError(t, err)
		require.Equal(t, tt.want, c.LogsDir, "%v", tt.env)
	}
}

func TestLoad_SecretsAreRedacted(t *testing.T) {
	t.Parallel()
	const secret = "hunter2-very-secret"
	tests := []map[string]string{
		{"VALKEY_PASSWORD": secret + "\n"},
		{"VALKEY_URL": "redis://user:" + secret + "@host:0"},
		{"VALKEY_URL": "redis://:" + secret + "@"},
		{"VALKEY_URL": "redis://:" + secret + "#x@host"},
		{"VALKEY_URL": "redis://:a/" + secret + "@host/zz"},
		{"VALKEY_URL": "http://u:" + secret + "@host"},
		{"PI_MODEL_UPSTREAM": "https://u:" + secret + "@gateway"},
	}
	for _, env := range tests {
		_, err := config.Load(envOf(env))
		require.Error(t, err)
		require.NotContains(t, err.Error(), secret)
		require.NotContains(t, err.Error(), "hunter2")
		var ce *config.ConfigError
		require.ErrorAs(t, err, &ce)
		require.NotContains(t, ce.Value, "hunter2", "the struct holds the redacted value too")
	}

	c, err := config.Load(envOf(map[string]string{"VALKEY_URL": "rediss://admin:" + secret + "@v:6380/1", "VALKEY_PASSWORD": secret}))
	require.NoError(t, err)
	require.NotContains(t, c.String(), "hunter2")
	require.NotContains(t, fmt.Sprint(c), "hunter2")
	require.NotContains(t, fmt.Sprintf("%+v", c), "hunter2")
	var sb strings.Builder
	slog.New(slog.NewJSONHandler(&sb, nil)).Info("config", "config", c)
	require.NotContains(t, sb.String(), "hunter2")
	require.Contains(t, sb.String(), "rediss://xxxxx@v:6380/1")
}

func TestRedactURL(t *testing.T) {
	t.Parallel()
	tests := []struct{ give, want string }{
		{"redis://127.0.0.1:6379", "redis://127.0.0.1:6379"},
		{"redis://:pw@h:1/0", "redis://xxxxx@h:1/0"},
		{"rediss://user:pw@h", "rediss://xxxxx@h"},
		{"redis://:p@w#x@h", "redis://xxxxx@h"},
		{"user:pw@h", "xxxxx@h"},
		{"", ""},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, config.RedactURL(tt.give), tt.give)
	}
}

func TestLoad_ReadsOnlyEnvVars(t *testing.T) {
	t.Parallel()
	var read []string
	_, err := config.Load(func(k string) string {
		read = append(read, k)
		return ""
	})
	require.NoError(t, err)
	for _, k := range read {
		require.Contains(t, config.EnvVars, k, "Load read %s, which EnvVars does not list", k)
	}
	for _, k := range config.EnvVars {
		require.Contains(t, read, k, "EnvVars lists %s, which Load never reads", k)
	}
}

// Every variable the package reads is documented for operators in both places.
func TestEnvVars_Documented(t *testing.T) {
	t.Parallel()
	for _, doc := range []string{"../docs/configuration.md", "../.env.example"} {
		data, err := os.ReadFile(doc)
		require.NoError(t, err)
		for _, name := range config.EnvVars {
			re := regexp.MustCompile(`(^|[^A-Z0-9_])` + name + `([^A-Z0-9_]|$)`)
			require.True(t, re.Match(data), "%s is not documented in %s", name, doc)
		}
	}
}

func TestConfig_Validate(t *testing.T) {
	t.Parallel()
	base := config.Default()
	require.NoError(t, base.Validate())
	tests := []struct {
		name string
		edit config.Config
		want string
	}{
		{"Concurrency", withField(base, "Concurrency", 0), "PI_CONCURRENCY"},
		{"WeeklyCapNegative", withField(base, "WeeklyCap", -1), "PI_WEEKLY_CAP"},
		{"EmptyWorkerName", withField(base, "WorkerName", ""), "PI_WORKER_NAME"},
		{"BadURL", withField(base, "ValkeyURL", "localhost"), "VALKEY_URL"},
		{"NaNCPUs", withField(base, "JobCPUs", math.NaN()), "PI_JOB_CPUS"},
		{"TinyMemory", withField(base, "JobMemory", int64(1)), "PI_JOB_MEMORY"},
		{"ZeroTimeout", withField(base, "JobTimeout", time.Duration(0)), "PI_JOB_TIMEOUT"},
		{"RelativeLogs", withField(base, "LogsDir", "logs"), "PI_LOGS_DIR"},
		{"BadProfileName", withField(base, "SecretProfiles", map[string]string{"a,b": "/x"}), "PI_SECRET_PROFILES"},
		{"RelativeCheck", withField(base, "WaitProfiles", map[string]string{"jira": "check"}), "PI_WAIT_PROFILES"},
		{"IntervalBelowFloor", withField(base, "WaitInterval", 10*time.Second), "PI_WAIT_INTERVAL_MS"},
		{"ZeroSlots", withField(base, "WaitCheckSlots", 0), "PI_WAIT_CHECK_SLOTS"},
		{"ZeroResolveTimeout", withField(base, "SecretResolveTimeout", time.Duration(0)), "PI_SECRET_RESOLVE_TIMEOUT_MS"},
		{"ZeroCheckTimeout", withField(base, "WaitCheckTimeout", time.Duration(0)), "PI_WAIT_CHECK_TIMEOUT_MS"},
		{"ZeroRetention", withField(base, "LogRetentionDays", 0), "PI_LOG_RETENTION_DAYS"},
		{"ZeroDailyCap", withField(base, "DailyCap", 0), "PI_DAILY_CAP"},
		{"BadImage", withField(base, "JobImage", "UPPER"), "PI_JOB_IMAGE"},
		{"TriggersDir", withField(base, "TriggersFile", "/etc/"), "PI_TRIGGERS_FILE"},
		{"WaitMax", withField(base, "WaitMax", time.Second), "PI_WAIT_MAX_MS"},
		{"ZeroAfterMax", withField(base, "WaitAfterMax", time.Duration(0)), "PI_WAIT_AFTER_MAX_MS"},
		{"Password", withField(base, "ValkeyPassword", "a\x00b"), "VALKEY_PASSWORD"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.edit.Validate()
			var ce *config.ConfigError
			require.ErrorAs(t, err, &ce)
			require.Equal(t, tt.want, ce.Var)
		})
	}
}

// withField returns c with one field replaced (by name), so the table holds data only.
func withField(c config.Config, name string, v any) config.Config {
	switch name {
	case "Concurrency":
		c.Concurrency = v.(int)
	case "WeeklyCap":
		c.WeeklyCap = v.(int)
	case "WorkerName":
		c.WorkerName = v.(string)
	case "ValkeyURL":
		c.ValkeyURL = v.(string)
	case "ValkeyPassword":
		c.ValkeyPassword = v.(string)
	case "JobCPUs":
		c.JobCPUs = v.(float64)
	case "JobMemory":
		c.JobMemory = v.(int64)
	case "JobTimeout":
		c.JobTimeout = v.(time.Duration)
	case "LogsDir":
		c.LogsDir = v.(string)
	case "SecretProfiles":
		c.SecretProfiles = v.(map[string]string)
	case "WaitProfiles":
		c.WaitProfiles = v.(map[string]string)
	case "WaitInterval":
		c.WaitInterval = v.(time.Duration)
	case "WaitCheckSlots":
		c.WaitCheckSlots = v.(int)
	case "SecretResolveTimeout":
		c.SecretResolveTimeout = v.(time.Duration)
	case "WaitCheckTimeout":
		c.WaitCheckTimeout = v.(time.Duration)
	case "LogRetentionDays":
		c.LogRetentionDays = v.(int)
	case "DailyCap":
		c.DailyCap = v.(int)
	case "JobImage":
		c.JobImage = v.(string)
	case "TriggersFile":
		c.TriggersFile = v.(string)
	case "WaitMax":
		c.WaitMax = v.(time.Duration)
	case "WaitAfterMax":
		c.WaitAfterMax = v.(time.Duration)
	default:
		panic(name)
	}
	return c
}

func TestConfigErrors_Unwrap(t *testing.T) {
	t.Parallel()
	_, err := config.Load(envOf(map[string]string{"PI_CONCURRENCY": "x", "PI_DAILY_CAP": "y"}))
	var errs config.ConfigErrors
	require.True(t, errors.As(err, &errs))
	require.Len(t, errs, 2)
	require.True(t, slices.ContainsFunc(errs.Unwrap(), func(e error) bool { return errors.Is(err, e) }))
}

func ExampleLoad() {
	env := map[string]string{"PI_WORKER_NAME": "mini1", "PI_CONCURRENCY": "2", "PI_JOB_MEMORY": "512m"}
	cfg, err := config.Load(func(k string) string { return env[k] })
	fmt.Println(err, cfg.WorkerName, cfg.WorkerNameDeclared, cfg.Concurrency, cfg.JobMemory)

	bad := map[string]string{"PI_CONCURRENCY": "3.0", "PI_WAIT_INTERVAL_MS": "10000"}
	_, err = config.Load(func(k string) string { return bad[k] })
	var errs config.ConfigErrors
	if errors.As(err, &errs) {
		for _, e := range errs {
			fmt.Println(e)
		}
	}
	// Output:
	// <nil> mini1 true 2 536870912
	// PI_CONCURRENCY="3.0": must be a whole number written in plain digits
	// PI_WAIT_INTERVAL_MS="10000": must be at least the floor of 30000 (milliseconds); a faster re-check only spends wait-check slots
}
