package dispatch

import (
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/pidispatch/pidispatch/agent/flows"
	"github.com/pidispatch/pidispatch/dispatch/policy"
	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/internal/check"
	"github.com/pidispatch/pidispatch/internal/hostfolder"
	"github.com/pidispatch/pidispatch/jobs"
)

// Bounds the budgets share with the configuration.
const (
	// DefaultDailyCap is PI_DAILY_CAP's default, the daily window of a
	// budget built without one.
	DefaultDailyCap = 25
	// MaxCap bounds a count cap; MaxUSD is the largest dollar amount a cap
	// may hold.
	MaxCap = policy.MaxCap
	MaxUSD = jobs.MaxUSD
)

// ProviderKeyVars names the variable holding each provider's API key: the
// worker's own (package config reads them) and the names a secrets profile
// may print to give one job its own key. A key never enters a container.
var ProviderKeyVars = map[string]string{
	"anthropic":  "ANTHROPIC_API_KEY",
	"openai":     "OPENAI_API_KEY",
	"openrouter": "OPENROUTER_API_KEY",
}

// ScopeLimit is one row of scoped-limits.json (package policy); the
// Budgeter reserves against it.
type ScopeLimit = policy.ScopeLimit

// Settings are the Worker's plain settings, each set one to one by an
// environment variable of package config (named in each field's doc, with
// its bounds and default), whose Config embeds them; an embedding program
// sets them in code, from DefaultConfig.
type Settings struct {
	// WorkerName is this host's name on every log line, record and registry row.
	// PI_WORKER_NAME; defaults to fleet.DefaultName().
	WorkerName string
	// WorkerNameDeclared is true when PI_WORKER_NAME was set (non-empty): it turns
	// on the host queue, fleet leases, the run mirror and routing.
	WorkerNameDeclared bool
	// Concurrency is how many jobs run at once on this machine across its queues.
	// PI_CONCURRENCY, 1..256, defaults to 3.
	Concurrency int
	// JobImage is the default job image, never pulled. PI_JOB_IMAGE, defaults to
	// pi-job:latest.
	JobImage string
	// JobImages are the images job data may name besides JobImage; any other
	// is refused image-not-allowed. PI_JOB_IMAGES, comma-separated.
	JobImages []string
	// JobMemory is each job container's memory limit in bytes. PI_JOB_MEMORY
	// ("4g", "512m", "1024k", "1t" or plain bytes), 6 MiB..1 TiB, defaults to 4g.
	JobMemory int64
	// JobCPUs is each job container's CPU limit. PI_JOB_CPUS (a decimal such as
	// "2" or "0.5"), 0.01..1024, defaults to 2.
	JobCPUs float64
	// JobTimeout stops a job running longer (5 s grace, then kill). PI_JOB_TIMEOUT,
	// Go duration syntax ("30m", "1h30m"; a bare number is refused), 1s..24h,
	// defaults to 30m.
	JobTimeout time.Duration
	// ShutdownGrace is how long running jobs may finish once the worker is
	// asked to stop; then their containers are stopped, recorded
	// worker-shutdown and retried without using an attempt.
	// PI_SHUTDOWN_GRACE, Go duration 1s..1h, defaults to 25s. A service
	// manager's stop timeout must be longer (pi-dispatch service adds 35 s).
	ShutdownGrace time.Duration
	// ContainerUser is who a job's process runs as. PI_CONTAINER_USER:
	// "owner" (the default, also when empty) runs a folder job as the uid:gid
	// that owns its folder on this host, and a forge job as the image's USER;
	// "image" runs every job as the image's USER; "root" (0:0) or "UID:GID"
	// runs every job as that user. See docs/container-contract.md.
	ContainerUser string
	// ContainerUserExplicit is true when PI_CONTAINER_USER was set. Only then
	// may a folder owned by root run (as the user it names): under the owner
	// rule such a folder would run its job as root.
	ContainerUserExplicit bool
	// FolderRoots are the folders a folder job may work in: its folder, all
	// symlinks resolved, must be a directory inside one of them. Empty
	// refuses every folder job (folder-not-allowed). PI_FOLDER_ROOTS,
	// colon-separated absolute paths.
	FolderRoots []string
	// SecretNetworkProfiles names the secrets profiles whose jobs may join
	// JobNetwork; a job of any other profile runs with no network, whatever
	// its data asks. PI_SECRET_NETWORK_PROFILES, comma-separated names
	// declared in PI_SECRET_PROFILES.
	SecretNetworkProfiles []string
	// JobNetwork is the network a job that asks for one ("network": true) joins;
	// every other job runs with no network (Docker's "none"). PI_JOB_NETWORK, a
	// Docker network name, defaults to bridge; "host" and "container:..." are refused.
	JobNetwork string
	// ModelUpstream, when set, gives every job a model endpoint with no network:
	// a Unix socket mounted at /run/pidispatch/model.sock whose connections the
	// worker forwards to this URL (a model provider or a gateway). PI_MODEL_UPSTREAM,
	// an http:// or https:// URL without credentials; unset by default.
	ModelUpstream string
	// LogsDir holds the run records. PI_LOGS_DIR, an absolute clean path, defaults to
	// a per-user folder that survives a reboot: $XDG_STATE_HOME/pidispatch/runs,
	// else $HOME/.local/state/pidispatch/runs (each only when absolute); with
	// neither, $TMPDIR/pi-dispatch/logs ($TMPDIR when absolute, else /tmp).
	LogsDir string
	// LogRetentionDays is the age at which records are pruned.
	// PI_LOG_RETENTION_DAYS, 1..3650, defaults to 30.
	LogRetentionDays int
	// FleetKey is the fleet's signing key: with it, this host signs its
	// registry row and the jobs it enqueues and ignores unsigned rows when
	// routing. Package config reads it from PI_FLEET_KEY_FILE; the zero Key
	// signs nothing. With or without it, a job the key did not sign is
	// refused job-unsigned unless its queue is in UnsignedQueues.
	FleetKey fleet.Key
	// UnsignedQueues are the queues whose unsigned jobs this host runs: the
	// explicit allowance for a producer that cannot sign (a Node BullMQ
	// client), or, with no key, the opt-in to run jobs anyone who can write
	// to Valkey can queue. fleet.EveryQueue ("*") names every queue.
	// PI_UNSIGNED_QUEUES, comma-separated; none by default.
	UnsignedQueues []string
	// SecretProfiles maps a profile name to the absolute path of its resolver.
	// PI_SECRET_PROFILES ("name:/abs/resolver,...").
	SecretProfiles map[string]string
	// SecretResolveTimeout bounds one resolver run.
	// PI_SECRET_RESOLVE_TIMEOUT_MS, 1..600000, defaults to 10 s.
	SecretResolveTimeout time.Duration
	// WaitProfiles maps a wait profile name to the absolute path of its check.
	// PI_WAIT_PROFILES ("name:/abs/check,...").
	WaitProfiles map[string]string
	// WaitCheckTimeout bounds one check run. PI_WAIT_CHECK_TIMEOUT_MS, 1..600000,
	// defaults to 10 s.
	WaitCheckTimeout time.Duration
	// WaitCheckSlots is how many checks run at once (fleet-wide when the name is
	// declared). PI_WAIT_CHECK_SLOTS, 1..64, defaults to 1.
	WaitCheckSlots int
	// WaitInterval is the re-check interval of a held job. PI_WAIT_INTERVAL_MS,
	// 30000..86400000, defaults to 60 s. Below the floor is refused, not clamped.
	WaitInterval time.Duration
	// WaitMax is how long a job may be held before it is refused wait-timeout.
	// PI_WAIT_MAX_MS, at least PI_WAIT_INTERVAL_MS and at most 30 days, defaults to 24 h.
	// It counts from the hold's start, or from its latest `after` instant when later.
	WaitMax time.Duration
	// WaitAfterMax caps an `after` condition: a job whose `after` ends more than this
	// past the hold's start is refused wait-timeout at once (it could only end past
	// the cap). PI_WAIT_AFTER_MAX_MS, 1000..2592000000, defaults to 30 days.
	WaitAfterMax time.Duration
}

// Config is what the Worker needs to know, typed and file-free: it names no
// environment variable and no file the Worker must open, and the policy
// files come parsed. Package config builds it from the environment
// (config.Config.Worker); an embedding program may build it in code from
// DefaultConfig. NewWorker checks it with Validate.
type Config struct {
	Settings
	// Cron is true when the host serves a triggers file: NewWorker then
	// needs Deps.Cron.
	Cron bool
	// Spend holds each job's caps and the fleet's dollar windows.
	Spend Spend
	// Gateway holds what the Worker needs of the model gateway's settings.
	Gateway Gateway
	// ScopedLimits and PauseWindows are the parsed policy files; their zero
	// values have no rows.
	ScopedLimits policy.ScopedLimits
	PauseWindows policy.PauseWindows
	// Flows are the flows a job may name, each a prompt template the
	// Worker renders into the job's /job/prompt.md (package agent/flows);
	// an empty catalog: the built-ins. A job naming another flow is refused
	// invalid-job.
	Flows flows.Catalog
}

// Spend holds the money settings the Worker applies. Amounts are
// micro-dollars (jobs.ParseUSD).
type Spend struct {
	// MaxCostMicros is each job's dollar cap in micro-dollars: the gateway
	// refuses a model call that would cross it (cost-cap). A job's own
	// maxCostUsd may only lower it. PI_MAX_COST_USD, a decimal of dollars
	// with up to 6 decimals, above 0 and at most 1000000; unset (0, none) by
	// default.
	MaxCostMicros int64
	// MaxTokens is each job's token cap (cost-cap's sibling, token-cap).
	// PI_MAX_TOKENS, 1..1000000000, unset (0, none) by default.
	MaxTokens int64
	// DailyCostMicros, WeeklyCostMicros and MonthlyCostMicros are the
	// fleet-wide dollar windows (UTC day, ISO week, month): a job reserves
	// MaxCostMicros in each at start and settles to its real spend at the end.
	// PI_DAILY_COST_USD, PI_WEEKLY_COST_USD, PI_MONTHLY_COST_USD; each needs
	// PI_MAX_COST_USD.
	DailyCostMicros, WeeklyCostMicros, MonthlyCostMicros int64
	// PredictOff turns predicted admission off: no job waits on what runs
	// like it cost (PI_PREDICT_ADMISSION=off; "auto", the default, predicts
	// once a trigger has PredictMinRuns runs).
	PredictOff bool
	// PredictMinRuns is how many runs a basis of history needs before it
	// predicts. PI_PREDICT_MIN_RUNS, 1..100000; 0 is the default, 20.
	PredictMinRuns int
}

// DollarWindows reports whether any fleet-wide dollar window is set.
func (s Spend) DollarWindows() bool {
	return s.DailyCostMicros > 0 || s.WeeklyCostMicros > 0 || s.MonthlyCostMicros > 0
}

// Gateway holds the model gateway settings the Worker reads.
type Gateway struct {
	// Off turns the gateway off: jobs get no model socket from it.
	// PI_GATEWAY, "on" (the default) or "off".
	Off bool
	// ProviderKeys are the keys the worker holds, by provider
	// (ProviderKeyVars). Never logged.
	ProviderKeys map[string]string
	// DefaultProvider is what a job that names none runs: the rate-limit
	// gate and doctor's checks use it. PI_DEFAULT_PROVIDER (anthropic).
	DefaultProvider string
	// MaxConns bounds the connections a job holds open on its model socket.
	// PI_GATEWAY_MAX_CONNS, 1..MaxGatewayConns, defaults to 32.
	MaxConns int
}

// DefaultConfig is the Worker's configuration with the documented defaults
// (docs/configuration.md), the same as config.Default().Worker() except
// LogsDir, which it leaves for the caller to set.
func DefaultConfig() Config {
	return Config{
		Settings: Settings{
			WorkerName:           fleet.DefaultName(),
			Concurrency:          3,
			JobImage:             "pi-job:latest",
			JobMemory:            int64(4) << 30,
			JobCPUs:              2,
			JobTimeout:           30 * time.Minute,
			ShutdownGrace:        25 * time.Second,
			JobNetwork:           "bridge",
			LogRetentionDays:     30,
			SecretResolveTimeout: 10 * time.Second,
			WaitCheckTimeout:     10 * time.Second,
			WaitCheckSlots:       1,
			WaitInterval:         time.Minute,
			WaitMax:              24 * time.Hour,
			WaitAfterMax:         30 * 24 * time.Hour,
		},
		Gateway: Gateway{DefaultProvider: "anthropic", MaxConns: 32},
		Flows:   flows.Builtin(),
	}
}

// ConfigError reports one setting that broke one rule: Var names the
// environment variable (package config) or, for a Config built in code,
// the field. Value is the value as given, a password redacted.
type ConfigError struct {
	Var   string
	Value string
	Rule  string
}

func (e *ConfigError) Error() string {
	return e.Var + "=" + check.Quote(e.Value) + ": " + e.Rule
}

// Validate checks what the Worker relies on; the bounds of each setting
// are package config's. The error, when not nil, is a *ConfigError naming
// the field.
func (c Config) Validate() error {
	bad := func(field, value, rule string) error {
		return &ConfigError{Var: "Config." + field, Value: value, Rule: rule}
	}
	switch {
	case fleet.ValidateName(c.WorkerName) != nil:
		return bad("WorkerName", c.WorkerName, fleet.ValidateName(c.WorkerName).Error())
	case c.Concurrency < 1:
		return bad("Concurrency", fmt.Sprint(c.Concurrency), "must be at least 1")
	case check.AbsClean(c.LogsDir) != "":
		return bad("LogsDir", c.LogsDir, check.AbsClean(c.LogsDir))
	case c.JobTimeout <= 0 || c.ShutdownGrace < 0:
		return bad("JobTimeout", c.JobTimeout.String(), "must be above 0")
	case c.WaitCheckSlots < 1:
		return bad("WaitCheckSlots", fmt.Sprint(c.WaitCheckSlots), "must be at least 1")
	case c.LogRetentionDays < 1:
		return bad("LogRetentionDays", fmt.Sprint(c.LogRetentionDays), "must be at least 1")
	}
	for _, row := range c.ScopedLimits.Rows() {
		if row.HasDollars() && c.Spend.MaxCostMicros == 0 {
			return bad("ScopedLimits", row.Scope, "the row of "+row.Scope+" sets a dollar window, which needs Spend.MaxCostMicros: each job reserves its per-job cap in it")
		}
	}
	return nil
}

// String summarizes the configuration for logs; the provider keys are
// never shown, so printing a Config (%v, %+v) never leaks them.
func (c Config) String() string {
	return fmt.Sprintf("worker=%s declared=%t concurrency=%d image=%s memory=%d cpus=%g timeout=%s logsDir=%s providerKeys=%d",
		c.WorkerName, c.WorkerNameDeclared, c.Concurrency, c.JobImage, c.JobMemory, c.JobCPUs, c.JobTimeout, c.LogsDir, len(c.Gateway.ProviderKeys))
}

// GoString is String, for %#v.
func (c Config) GoString() string { return "dispatch.Config{" + c.String() + "}" }

// LogValue renders the configuration for slog as String does.
func (c Config) LogValue() slog.Value { return slog.StringValue(c.String()) }

// ImageAllowed reports whether job data may name image on this host: the
// default image and the ones JobImages lists.
func (c Settings) ImageAllowed(image string) bool {
	return image == "" || image == c.JobImage || slices.Contains(c.JobImages, image)
}

// SecretNetworkAllowed reports whether a job of secrets profile may join a
// network: only a profile SecretNetworkProfiles names may, since a job
// holding secrets and a network can send them anywhere.
func (c Settings) SecretNetworkAllowed(profile string) bool {
	return profile == "" || slices.Contains(c.SecretNetworkProfiles, profile)
}

// ContainerUserRule is the rule a ContainerUser value breaks, or "": "",
// "owner", "image", "root" or UID:GID in numbers.
func ContainerUserRule(v string) string {
	return hostfolder.UserRule(v)
}
