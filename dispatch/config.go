package dispatch

import (
	"fmt"
	"log/slog"
	"slices"
	"time"

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

// Config is what the Worker needs to know, typed and file-free: it names no
// environment variable and no file the Worker must open, and the policy
// files come parsed. Package config builds it from the environment
// (config.Config.Worker); an embedding program may build it in code from
// DefaultConfig. NewWorker checks it with Validate.
type Config struct {
	// WorkerName is this host's name on every log line, record and registry row.
	WorkerName string
	// WorkerNameDeclared turns on the host queue, fleet leases, the run
	// mirror and routing.
	WorkerNameDeclared bool
	// Concurrency is how many jobs run at once on this machine across its queues.
	Concurrency int
	// JobImage is the default job image, never pulled; JobImages are the
	// others job data may name.
	JobImage  string
	JobImages []string
	// JobMemory (bytes), JobCPUs and JobTimeout bound each job container.
	JobMemory  int64
	JobCPUs    float64
	JobTimeout time.Duration
	// ShutdownGrace is how long running jobs may finish once Run's context ends.
	ShutdownGrace time.Duration
	// ContainerUser is who a job's process runs as: "owner" (or ""),
	// "image", "root" or "UID:GID" (docs/container-contract.md).
	// ContainerUserExplicit: the operator chose it, so a folder owned by
	// root may run as the user it names.
	ContainerUser         string
	ContainerUserExplicit bool
	// FolderRoots are the folders a folder job may work in; none refuses
	// every folder job.
	FolderRoots []string
	// SecretNetworkProfiles names the secrets profiles whose jobs may join
	// JobNetwork.
	SecretNetworkProfiles []string
	// JobNetwork is the network a job that asks for one joins.
	JobNetwork string
	// ModelUpstream, when set, is where a job's model socket forwards
	// without a gateway.
	ModelUpstream string
	// LogsDir holds the run records (absolute); LogRetentionDays is the age
	// at which they are pruned.
	LogsDir          string
	LogRetentionDays int
	// FleetKey signs this host's rows and the jobs it enqueues; with it,
	// unsigned jobs are refused except on UnsignedQueues.
	FleetKey       fleet.Key
	UnsignedQueues []string
	// Cron is true when the host serves a triggers file: NewWorker then
	// needs Deps.Cron.
	Cron bool
	// SecretProfiles and WaitProfiles map a profile name to the absolute
	// path of its resolver or check; the timeouts bound one run of each.
	SecretProfiles       map[string]string
	SecretResolveTimeout time.Duration
	WaitProfiles         map[string]string
	WaitCheckTimeout     time.Duration
	// WaitCheckSlots is how many checks run at once; WaitInterval is the
	// re-check interval of a held job, WaitMax how long it may be held,
	// WaitAfterMax the furthest `after` a job may name.
	WaitCheckSlots int
	WaitInterval   time.Duration
	WaitMax        time.Duration
	WaitAfterMax   time.Duration
	// Spend holds each job's caps and the fleet's dollar windows.
	Spend Spend
	// Gateway holds what the Worker needs of the model gateway's settings.
	Gateway Gateway
	// ScopedLimits and PauseWindows are the parsed policy files; their zero
	// values have no rows.
	ScopedLimits policy.ScopedLimits
	PauseWindows policy.PauseWindows
}

// Spend holds the money settings the Worker applies. Amounts are
// micro-dollars (jobs.ParseUSD).
type Spend struct {
	// MaxCostMicros and MaxTokens are each job's caps; 0 is none.
	MaxCostMicros int64
	MaxTokens     int64
	// DailyCostMicros, WeeklyCostMicros and MonthlyCostMicros are the
	// fleet-wide dollar windows; each needs MaxCostMicros.
	DailyCostMicros, WeeklyCostMicros, MonthlyCostMicros int64
}

// DollarWindows reports whether any fleet-wide dollar window is set.
func (s Spend) DollarWindows() bool {
	return s.DailyCostMicros > 0 || s.WeeklyCostMicros > 0 || s.MonthlyCostMicros > 0
}

// Gateway holds the model gateway settings the Worker reads.
type Gateway struct {
	// Off: jobs get no model socket from the gateway.
	Off bool
	// ProviderKeys are the keys the worker holds, by provider. Never logged.
	ProviderKeys map[string]string
	// DefaultProvider is what a job that names none runs.
	DefaultProvider string
	// MaxConns bounds the connections a job holds open on its model socket.
	MaxConns int
}

// DefaultConfig is the Worker's configuration with the documented defaults
// (docs/configuration.md), the same as config.Default().Worker() except
// LogsDir, which it leaves for the caller to set.
func DefaultConfig() Config {
	return Config{
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
		Gateway:              Gateway{DefaultProvider: "anthropic", MaxConns: 32},
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
func (c Config) ImageAllowed(image string) bool {
	return image == "" || image == c.JobImage || slices.Contains(c.JobImages, image)
}

// SecretNetworkAllowed reports whether a job of secrets profile may join a
// network: only a profile SecretNetworkProfiles names may, since a job
// holding secrets and a network can send them anywhere.
func (c Config) SecretNetworkAllowed(profile string) bool {
	return profile == "" || slices.Contains(c.SecretNetworkProfiles, profile)
}

// ContainerUserRule is the rule a ContainerUser value breaks, or "": "",
// "owner", "image", "root" or UID:GID in numbers.
func ContainerUserRule(v string) string {
	return hostfolder.UserRule(v)
}
