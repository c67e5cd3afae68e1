package config

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/dispatch/policy"
	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/internal/check"
	"github.com/pidispatch/pidispatch/jobs"
)

// Defaults of the configuration (docs/configuration.md).
const (
	DefaultValkeyURL            = "redis://127.0.0.1:6379"
	DefaultConcurrency          = 3
	DefaultDailyCap             = 25
	DefaultJobImage             = "pi-job:latest"
	DefaultJobNetwork           = "bridge"
	DefaultJobMemory            = int64(4) << 30 // 4g
	DefaultJobCPUs              = 2.0
	DefaultJobTimeout           = 30 * time.Minute
	DefaultShutdownGrace        = 25 * time.Second
	DefaultLogRetentionDays     = 30
	DefaultSecretResolveTimeout = 10 * time.Second
	DefaultWaitCheckTimeout     = 10 * time.Second
	DefaultWaitCheckSlots       = 1
	DefaultWaitInterval         = 60 * time.Second
	DefaultWaitMax              = 24 * time.Hour
	DefaultWaitAfterMax         = jobs.MaxWaitAfter // 30 days
	DefaultBullMQLayout         = 6
)

// Bounds of the configuration. A value outside them is a config error, never clamped:
// an operator who typed 10 seconds for the wait interval must learn that the floor is 30.
const (
	MaxConcurrency        = 256
	MaxCap                = policy.MaxCap
	MinJobMemory          = int64(6) << 20 // Docker refuses a memory limit below 6 MiB
	MaxJobMemory          = int64(1) << 40 // 1 TiB
	MinJobCPUs            = 0.01           // Docker's granularity
	MaxJobCPUs            = 1024.0
	MinJobTimeout         = time.Second
	MaxJobTimeout         = 24 * time.Hour
	MinShutdownGrace      = time.Second
	MaxShutdownGrace      = time.Hour
	MaxLogRetentionDays   = 3650
	MaxProcessTimeout     = 10 * time.Minute // resolver and wait-check timeouts
	MaxWaitCheckSlots     = 64
	MinWaitInterval       = 30 * time.Second
	MaxWaitInterval       = 24 * time.Hour
	MaxWaitMax            = 30 * 24 * time.Hour
	MinWaitAfterMax       = time.Second // the shortest `after` a job may name
	maxValkeyPasswordSize = 512
)

// EnvVars lists every environment variable Load reads. docs/configuration.md and
// .env.example document each of them (a test fails when one is missing).
var EnvVars = []string{
	"VALKEY_URL",
	"VALKEY_PASSWORD",
	"PI_WORKER_NAME",
	"PI_BULLMQ_LAYOUT",
	"PI_CONCURRENCY",
	"PI_DAILY_CAP",
	"PI_WEEKLY_CAP",
	"PI_JOB_IMAGE",
	"PI_JOB_MEMORY",
	"PI_JOB_CPUS",
	"PI_JOB_TIMEOUT",
	"PI_SHUTDOWN_GRACE",
	"PI_CONTAINER_USER",
	"PI_JOB_NETWORK",
	"PI_MODEL_UPSTREAM",
	"PI_LOGS_DIR",
	"PI_LOG_RETENTION_DAYS",
	"PI_TRIGGERS_FILE",
	"PI_SCOPED_LIMITS_FILE",
	"PI_PAUSE_WINDOWS_FILE",
	"PI_SECRET_PROFILES",
	"PI_SECRET_RESOLVE_TIMEOUT_MS",
	"PI_WAIT_PROFILES",
	"PI_WAIT_CHECK_TIMEOUT_MS",
	"PI_WAIT_CHECK_SLOTS",
	"PI_WAIT_INTERVAL_MS",
	"PI_WAIT_MAX_MS",
	"PI_WAIT_AFTER_MAX_MS",
	"PI_FLEET_KEY_FILE",
	"PI_UNSIGNED_QUEUES",
	"PI_JOB_OUTPUT_MAX",
	// Only for the default of PI_LOGS_DIR, in this order.
	"XDG_STATE_HOME",
	"HOME",
	"TMPDIR",
}

// Config is the worker's configuration as the environment gives it: every
// setting of the worker's process, the Valkey URL and the policy file paths
// included. Load builds it from the environment; a program may build it in
// code from Default and call Validate. Fields hold parsed, typed values; the
// env syntax is Load's business. Worker turns it into the Worker's own
// dispatch.Config.
type Config struct {
	// ValkeyURL is a redis://, rediss:// or unix:// URL; a password may sit in it.
	// VALKEY_URL, defaults to redis://127.0.0.1:6379.
	ValkeyURL string
	// ValkeyPassword is used when ValkeyURL carries no password. VALKEY_PASSWORD.
	ValkeyPassword string
	// Settings are the Worker's own settings, each from its variable
	// (dispatch.Settings names them): PI_WORKER_NAME, PI_CONCURRENCY, the
	// job container's bounds, the folders, the profiles, the holds.
	dispatch.Settings
	// BullMQLayout is the BullMQ major (6 or 5) whose key layout this host
	// records on a queue nobody has declared yet; a queue whose meta names a
	// BullMQ version keeps following that one (docs/queue.md). Set 5 while
	// the fleet's Node clients run BullMQ 5. PI_BULLMQ_LAYOUT, defaults to 6.
	BullMQLayout int
	// DailyCap bounds container starts per UTC day, fleet-wide.
	// PI_DAILY_CAP, 1..1000000, defaults to 25.
	DailyCap int
	// WeeklyCap bounds container starts per ISO week; 0 disables the window.
	// PI_WEEKLY_CAP, 1..1000000, unset by default.
	WeeklyCap int
	// FleetKeyFile is the fleet's signing key (fleet.Key), never
	// stored in Valkey: with it, this host signs its registry row and the
	// jobs it enqueues, ignores unsigned rows when routing and refuses
	// unsigned jobs (job-unsigned). PI_FLEET_KEY_FILE; unset: no signing.
	FleetKeyFile string
	// JobOutputMax bounds the job output a host keeps on disk (its tail is
	// kept). PI_JOB_OUTPUT_MAX, 64k..1g, defaults to 16m.
	JobOutputMax int64
	// TriggersFile holds the cron triggers; empty disables cron and the host abstains
	// from cron agreement. PI_TRIGGERS_FILE.
	TriggersFile string
	// ScopedLimitsFile holds per-scope limits; empty means none. PI_SCOPED_LIMITS_FILE.
	ScopedLimitsFile string
	// PauseWindowsFile holds pause windows; empty means none. PI_PAUSE_WINDOWS_FILE.
	PauseWindowsFile string
	// FlowsDir is a folder of the operator's flows, one <name>.md each,
	// adding to or overriding the built-ins; Flows reads it (flows.go).
	// PI_FLOWS_DIR, an absolute clean path; unset: the built-in flows only.
	FlowsDir string
	// EventMaxComments is how many of the thread's last comments a forge
	// job's event carries (0: none). PI_EVENT_MAX_COMMENTS, 0..100,
	// defaults to 20.
	EventMaxComments int
	// SessionStore is where threads' agent sessions are kept between their
	// jobs: SessionStoreLogs or SessionStoreValkey (sessions.go).
	// PI_SESSION_STORE; empty is logs, the default.
	SessionStore string
	// Spend holds the dollar and token caps and the monthly window.
	Spend Spend
	// Gateway holds the model gateway's settings and the metrics address.
	Gateway Gateway
	// Report holds the transcript, notification and tracing settings
	// (report.go).
	Report Report
}

// ConfigError reports one variable that broke one rule. Value is the value
// as given, except that a password (VALKEY_PASSWORD, or the userinfo of
// VALKEY_URL) is redacted. It is the Worker's own error type, so an error
// NewWorker or the Worker's boot reports about a setting is one too.
type ConfigError = dispatch.ConfigError

// ConfigErrors is every problem Load or Validate found, in EnvVars order, so an
// operator fixes a broken .env in one pass. errors.As(err, &*ConfigError) finds the
// first; range over the ConfigErrors for all of them.
type ConfigErrors []*ConfigError

func (e ConfigErrors) Error() string {
	parts := make([]string, len(e))
	for i, ce := range e {
		parts[i] = ce.Error()
	}
	return "invalid configuration: " + strings.Join(parts, "; ")
}

// Unwrap exposes each *ConfigError to errors.Is and errors.As.
func (e ConfigErrors) Unwrap() []error {
	out := make([]error, len(e))
	for i, ce := range e {
		out[i] = ce
	}
	return out
}

// Default is the configuration of an empty environment: every documented
// default, the sanitized hostname as WorkerName (undeclared), LogsDir under the
// user's state folder.
func Default() Config {
	return defaultConfig(defaultLogsDir(os.Getenv))
}

func defaultConfig(logsDir string) Config {
	return Config{
		ValkeyURL:        DefaultValkeyURL,
		BullMQLayout:     DefaultBullMQLayout,
		DailyCap:         DefaultDailyCap,
		EventMaxComments: DefaultEventMaxComments,
		Settings: dispatch.Settings{
			WorkerName:           fleet.DefaultName(),
			Concurrency:          DefaultConcurrency,
			JobImage:             DefaultJobImage,
			JobMemory:            DefaultJobMemory,
			JobCPUs:              DefaultJobCPUs,
			JobTimeout:           DefaultJobTimeout,
			ShutdownGrace:        DefaultShutdownGrace,
			JobNetwork:           DefaultJobNetwork,
			LogsDir:              logsDir,
			LogRetentionDays:     DefaultLogRetentionDays,
			SecretResolveTimeout: DefaultSecretResolveTimeout,
			WaitCheckTimeout:     DefaultWaitCheckTimeout,
			WaitCheckSlots:       DefaultWaitCheckSlots,
			WaitInterval:         DefaultWaitInterval,
			WaitMax:              DefaultWaitMax,
			WaitAfterMax:         DefaultWaitAfterMax,
		},
		Gateway:      defaultGateway(),
		JobOutputMax: DefaultJobOutputMax,
	}
}

// defaultLogsDir is the XDG state folder's pidispatch/runs: records are kept
// for PI_LOG_RETENTION_DAYS, so they must outlive a reboot, which may empty
// /tmp. Only without XDG_STATE_HOME and HOME (a root unit without User=, say)
// is it <tmp>/pi-dispatch/logs. A relative value of any of them is ignored: it
// would move with the worker's working directory.
func defaultLogsDir(getenv func(string) string) string {
	if d := absEnvDir(getenv("XDG_STATE_HOME")); d != "" {
		return filepath.Join(d, "pidispatch", "runs")
	}
	if d := absEnvDir(getenv("HOME")); d != "" {
		return filepath.Join(d, ".local", "state", "pidispatch", "runs")
	}
	tmpdir := absEnvDir(getenv("TMPDIR"))
	if tmpdir == "" {
		tmpdir = "/tmp"
	}
	return filepath.Join(tmpdir, "pi-dispatch", "logs")
}

// absEnvDir is dir when it is a usable absolute path, else "".
func absEnvDir(dir string) string {
	if dir == "" || !filepath.IsAbs(dir) || strings.ContainsRune(dir, 0) {
		return ""
	}
	return dir
}

// Load builds the configuration from getenv (os.Getenv in production; tests pass
// a map lookup). Every variable is parsed strictly: integers are plain decimal digits
// (no sign, spaces, leading zeros, fraction or suffix), durations carry a unit, paths
// are absolute where the rule says so. An empty value means unset, so "PI_WEEKLY_CAP="
// in an env file disables the window. A declared PI_WORKER_NAME is refused when
// invalid, never altered.
//
// The error, when not nil, is a ConfigErrors holding every problem found, and the
// Config is then the zero value: a half-valid configuration is never handed out.
func Load(getenv func(string) string) (Config, error) {
	c := defaultConfig(defaultLogsDir(getenv))
	r := &envReader{getenv: getenv, raw: map[string]string{}, bad: map[string]bool{}}
	r.readValkey(&c)
	r.readJob(&c)
	r.readFiles(&c)
	r.readProfiles(&c)
	r.readSpend(&c)
	r.readReport(&c)
	r.readTrust(&c)
	r.readFolders(&c)
	r.readFlows(&c)
	r.readSessions(&c)

	// An explicit 0 for the weekly cap is refused: unset is how the window is disabled,
	// and a cap of 0 reads like "no starts allowed".
	if v, ok := r.raw["PI_WEEKLY_CAP"]; ok && !r.bad["PI_WEEKLY_CAP"] && c.WeeklyCap == 0 {
		r.fail("PI_WEEKLY_CAP", v, fmt.Sprintf("must be between 1 and %d (unset it to disable the weekly cap)", MaxCap))
	}
	errs := r.errs
	for _, ce := range c.problems(r.raw) {
		if !r.bad[ce.Var] {
			errs = append(errs, ce)
		}
	}
	if len(errs) > 0 {
		errs.Sort()
		return Config{}, errs
	}
	if err := c.loadFleetKey(); err != nil {
		return Config{}, err
	}
	return c, nil
}

// envReader reads Load's variables: raw keeps the text of each one
// set, bad names each one whose syntax failed (its range is then not
// checked again).
type envReader struct {
	getenv func(string) string
	raw    map[string]string
	errs   ConfigErrors
	bad    map[string]bool
}

func (r *envReader) fail(name, value, rule string) {
	r.errs = append(r.errs, newConfigError(name, value, rule))
	r.bad[name] = true
}

// lookupEnv is the variable's value, ok=false when unset or empty.
func (r *envReader) lookupEnv(name string) (string, bool) {
	v := r.getenv(name)
	if v == "" {
		return "", false
	}
	r.raw[name] = v
	return v, true
}

// envText sets dst to the variable's value when it is set.
func (r *envReader) envText(name string, dst *string) {
	if v, ok := r.lookupEnv(name); ok {
		*dst = v
	}
}

// parseEnv sets dst to the variable's value parsed by parse, when it is set;
// a rule parse names is the variable's error.
func parseEnv[T any](r *envReader, name string, parse func(string) (T, string), dst *T) {
	if v, ok := r.lookupEnv(name); ok {
		if x, rule := parse(v); rule != "" {
			r.fail(name, v, rule)
		} else {
			*dst = x
		}
	}
}

func (r *envReader) envInt(name string, dst *int) {
	if v, ok := r.lookupEnv(name); ok {
		n, rule := check.PlainInt(v)
		if rule != "" {
			r.fail(name, v, rule)
			return
		}
		// Past every bound: problems() reports the range with the value as typed.
		*dst = int(min(n, math.MaxInt32))
	}
}

func (r *envReader) envMillis(name string, dst *time.Duration) {
	if v, ok := r.lookupEnv(name); ok {
		n, rule := check.PlainInt(v)
		if rule != "" {
			r.fail(name, v, rule+" (milliseconds)")
			return
		}
		// Past every bound, and small enough not to overflow as nanoseconds.
		*dst = time.Duration(min(n, 1<<40)) * time.Millisecond
	}
}

func (r *envReader) readValkey(c *Config) {
	r.envText("VALKEY_URL", &c.ValkeyURL)
	r.envText("VALKEY_PASSWORD", &c.ValkeyPassword)
	if v, ok := r.lookupEnv("PI_WORKER_NAME"); ok {
		c.WorkerName = v
		c.WorkerNameDeclared = true
	}
	parseEnv(r, "PI_BULLMQ_LAYOUT", parseBullMQLayout, &c.BullMQLayout)
}

// bullMQLayoutRule is PI_BULLMQ_LAYOUT's rule.
const bullMQLayoutRule = "must be 6 or 5: the BullMQ major version the fleet's Node clients run (6 when there are none)"

func parseBullMQLayout(s string) (int, string) {
	switch s {
	case "6":
		return 6, ""
	case "5":
		return 5, ""
	}
	return 0, bullMQLayoutRule
}

func (r *envReader) readJob(c *Config) {
	r.envInt("PI_CONCURRENCY", &c.Concurrency)
	r.envInt("PI_DAILY_CAP", &c.DailyCap)
	r.envInt("PI_WEEKLY_CAP", &c.WeeklyCap)
	r.envText("PI_JOB_IMAGE", &c.JobImage)
	parseEnv(r, "PI_JOB_MEMORY", parseMemory, &c.JobMemory)
	parseEnv(r, "PI_JOB_CPUS", parseCPUs, &c.JobCPUs)
	parseEnv(r, "PI_JOB_TIMEOUT", check.Duration, &c.JobTimeout)
	parseEnv(r, "PI_SHUTDOWN_GRACE", check.Duration, &c.ShutdownGrace)
	r.envText("PI_CONTAINER_USER", &c.ContainerUser)
	r.envText("PI_JOB_NETWORK", &c.JobNetwork)
	r.envText("PI_MODEL_UPSTREAM", &c.ModelUpstream)
}

func (r *envReader) readFiles(c *Config) {
	r.envText("PI_LOGS_DIR", &c.LogsDir)
	r.envInt("PI_LOG_RETENTION_DAYS", &c.LogRetentionDays)
	r.envText("PI_TRIGGERS_FILE", &c.TriggersFile)
	r.envText("PI_SCOPED_LIMITS_FILE", &c.ScopedLimitsFile)
	r.envText("PI_PAUSE_WINDOWS_FILE", &c.PauseWindowsFile)
}

func (r *envReader) readProfiles(c *Config) {
	parseEnv(r, "PI_SECRET_PROFILES", parseProfiles, &c.SecretProfiles)
	r.envMillis("PI_SECRET_RESOLVE_TIMEOUT_MS", &c.SecretResolveTimeout)
	parseEnv(r, "PI_WAIT_PROFILES", parseProfiles, &c.WaitProfiles)
	r.envMillis("PI_WAIT_CHECK_TIMEOUT_MS", &c.WaitCheckTimeout)
	r.envInt("PI_WAIT_CHECK_SLOTS", &c.WaitCheckSlots)
	r.envMillis("PI_WAIT_INTERVAL_MS", &c.WaitInterval)
	r.envMillis("PI_WAIT_MAX_MS", &c.WaitMax)
	r.envMillis("PI_WAIT_AFTER_MAX_MS", &c.WaitAfterMax)
}

// Validate checks a configuration built in code with the rules Load applies
// to the environment. The error, when not nil, is a ConfigErrors.
func (c Config) Validate() error {
	if errs := c.problems(nil); len(errs) > 0 {
		return errs
	}
	return nil
}

// problems checks the typed fields. raw holds the env text of each variable that was
// set, so an error repeats what the operator typed rather than a reformatted value.
func (c Config) problems(raw map[string]string) ConfigErrors {
	p := &problemList{raw: raw}
	c.valkeyProblems(p)
	c.jobProblems(p)
	c.fileProblems(p)
	c.waitProblems(p)
	c.spendProblems(p)
	c.reportProblems(p)
	c.trustProblems(p)
	c.folderProblems(p)
	c.flowProblems(p)
	c.sessionProblems(p)
	return p.errs
}

// problemList collects problems() findings; raw is problems' raw.
type problemList struct {
	raw  map[string]string
	errs ConfigErrors
}

// add reports name, repeating its env text when it was set, else typed.
func (p *problemList) add(name, typed, rule string) {
	v, ok := p.raw[name]
	if !ok {
		v = typed
	}
	p.errs = append(p.errs, newConfigError(name, v, rule))
}

func (p *problemList) intRange(name string, n, lo, hi int) {
	if n < lo || n > hi {
		p.add(name, strconv.Itoa(n), fmt.Sprintf("must be between %d and %d", lo, hi))
	}
}

// durRange checks d against [lo, hi], stated in milliseconds when ms.
func (p *problemList) durRange(name string, d, lo, hi time.Duration, ms bool) {
	if d >= lo && d <= hi {
		return
	}
	if ms {
		p.add(name, strconv.FormatInt(d.Milliseconds(), 10), fmt.Sprintf("must be between %d and %d (milliseconds)", lo.Milliseconds(), hi.Milliseconds()))
		return
	}
	p.add(name, d.String(), fmt.Sprintf("must be between %s and %s", lo, hi))
}

func (c Config) valkeyProblems(p *problemList) {
	if rule := check.ValkeyURL(c.ValkeyURL); rule != "" {
		p.add("VALKEY_URL", c.ValkeyURL, rule)
	}
	if len(c.ValkeyPassword) > maxValkeyPasswordSize || strings.ContainsFunc(c.ValkeyPassword, unicode.IsControl) || !utf8.ValidString(c.ValkeyPassword) {
		p.add("VALKEY_PASSWORD", c.ValkeyPassword, fmt.Sprintf("must be valid UTF-8 without control characters, at most %d bytes", maxValkeyPasswordSize))
	}
	if err := fleet.ValidateName(c.WorkerName); err != nil {
		rule := err.Error()
		var ne *fleet.NameError
		if errors.As(err, &ne) {
			rule = ne.Rule.Error() + " (^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$, not ending in .json or .log)"
		}
		p.add("PI_WORKER_NAME", c.WorkerName, rule)
	}
	if c.BullMQLayout != 6 && c.BullMQLayout != 5 {
		p.add("PI_BULLMQ_LAYOUT", strconv.Itoa(c.BullMQLayout), bullMQLayoutRule)
	}
}

func (c Config) jobProblems(p *problemList) {
	p.intRange("PI_CONCURRENCY", c.Concurrency, 1, MaxConcurrency)
	p.intRange("PI_DAILY_CAP", c.DailyCap, 1, MaxCap)
	if c.WeeklyCap != 0 {
		p.intRange("PI_WEEKLY_CAP", c.WeeklyCap, 1, MaxCap)
	}
	if !jobs.ValidImageRef(c.JobImage) {
		p.add("PI_JOB_IMAGE", c.JobImage, "must be an image reference ([registry/]name[:tag][@digest], lowercase name)")
	}
	if c.JobMemory < MinJobMemory || c.JobMemory > MaxJobMemory {
		p.add("PI_JOB_MEMORY", strconv.FormatInt(c.JobMemory, 10), "must be between 6m and 1t")
	}
	if !(c.JobCPUs >= MinJobCPUs && c.JobCPUs <= MaxJobCPUs) { // NaN fails too
		p.add("PI_JOB_CPUS", strconv.FormatFloat(c.JobCPUs, 'g', -1, 64), fmt.Sprintf("must be between %g and %g", MinJobCPUs, MaxJobCPUs))
	}
	p.durRange("PI_JOB_TIMEOUT", c.JobTimeout, MinJobTimeout, MaxJobTimeout, false)
	p.durRange("PI_SHUTDOWN_GRACE", c.ShutdownGrace, MinShutdownGrace, MaxShutdownGrace, false)
	if rule := dispatch.ContainerUserRule(c.ContainerUser); rule != "" {
		p.add("PI_CONTAINER_USER", c.ContainerUser, rule)
	}
	if rule := jobNetworkRule(c.JobNetwork); rule != "" {
		p.add("PI_JOB_NETWORK", c.JobNetwork, rule)
	}
	if rule := modelUpstreamRule(c.ModelUpstream); rule != "" {
		p.add("PI_MODEL_UPSTREAM", c.ModelUpstream, rule)
	}
}

func (c Config) fileProblems(p *problemList) {
	if rule := check.AbsClean(c.LogsDir); rule != "" {
		p.add("PI_LOGS_DIR", c.LogsDir, rule)
	}
	p.intRange("PI_LOG_RETENTION_DAYS", c.LogRetentionDays, 1, MaxLogRetentionDays)
	for _, f := range []struct{ name, value string }{
		{"PI_TRIGGERS_FILE", c.TriggersFile},
		{"PI_SCOPED_LIMITS_FILE", c.ScopedLimitsFile},
		{"PI_PAUSE_WINDOWS_FILE", c.PauseWindowsFile},
	} {
		if rule := filePathRule(f.value); rule != "" {
			p.add(f.name, f.value, rule)
		}
	}
}

// waitProblems checks the secrets and wait profiles and the wait tunables.
func (c Config) waitProblems(p *problemList) {
	for _, pr := range []struct {
		name string
		m    map[string]string
	}{{"PI_SECRET_PROFILES", c.SecretProfiles}, {"PI_WAIT_PROFILES", c.WaitProfiles}} {
		if rule := profilesRule(pr.m); rule != "" {
			p.add(pr.name, formatProfiles(pr.m), rule)
		}
	}
	p.durRange("PI_SECRET_RESOLVE_TIMEOUT_MS", c.SecretResolveTimeout, time.Millisecond, MaxProcessTimeout, true)
	p.durRange("PI_WAIT_CHECK_TIMEOUT_MS", c.WaitCheckTimeout, time.Millisecond, MaxProcessTimeout, true)
	p.intRange("PI_WAIT_CHECK_SLOTS", c.WaitCheckSlots, 1, MaxWaitCheckSlots)
	if c.WaitInterval < MinWaitInterval {
		p.add("PI_WAIT_INTERVAL_MS", strconv.FormatInt(c.WaitInterval.Milliseconds(), 10), fmt.Sprintf("must be at least the floor of %d (milliseconds); a faster re-check only spends wait-check slots", MinWaitInterval.Milliseconds()))
	} else {
		p.durRange("PI_WAIT_INTERVAL_MS", c.WaitInterval, MinWaitInterval, MaxWaitInterval, true)
	}
	if c.WaitMax < c.WaitInterval && c.WaitInterval >= MinWaitInterval && c.WaitInterval <= MaxWaitInterval {
		p.add("PI_WAIT_MAX_MS", strconv.FormatInt(c.WaitMax.Milliseconds(), 10), fmt.Sprintf("must be at least PI_WAIT_INTERVAL_MS (%d)", c.WaitInterval.Milliseconds()))
	} else {
		p.durRange("PI_WAIT_MAX_MS", c.WaitMax, time.Millisecond, MaxWaitMax, true)
	}
	p.durRange("PI_WAIT_AFTER_MAX_MS", c.WaitAfterMax, MinWaitAfterMax, jobs.MaxWaitAfter, true)
}

// newConfigError builds a ConfigError with secrets redacted from Value.
func newConfigError(name, value, rule string) *ConfigError {
	switch name {
	case "VALKEY_PASSWORD":
		value = "[redacted]"
	case "VALKEY_URL", "PI_MODEL_UPSTREAM":
		value = RedactURL(value)
	case "ANTHROPIC_API_KEY", "OPENAI_API_KEY", "OPENROUTER_API_KEY":
		value = "[redacted]"
	case "PI_PROVIDER_URLS":
		if m, rule := parseProviderURLs(value); rule == "" {
			value = formatProviderURLs(m)
		}
	}
	return &ConfigError{Var: name, Value: value, Rule: rule}
}

// Sort orders errs as EnvVars lists the variables, so every report of the
// same config reads the same.
func (errs ConfigErrors) Sort() {
	slices.SortStableFunc(errs, func(a, b *ConfigError) int {
		return slices.Index(EnvVars, a.Var) - slices.Index(EnvVars, b.Var)
	})
}

// parseMemory reads "4g", "512m", "1024k", "1t" (any case) or plain bytes.
func parseMemory(s string) (int64, string) {
	const rule = `must be a size such as "4g", "512m", "1024k" or plain bytes`
	if s == "" {
		return 0, rule
	}
	digits, mult := s, int64(1)
	switch s[len(s)-1] {
	case 'k', 'K':
		mult = 1 << 10
	case 'm', 'M':
		mult = 1 << 20
	case 'g', 'G':
		mult = 1 << 30
	case 't', 'T':
		mult = 1 << 40
	}
	if mult != 1 {
		digits = s[:len(s)-1]
	}
	n, rule2 := check.PlainInt(digits)
	if rule2 != "" {
		return 0, rule
	}
	if n > MaxJobMemory/mult {
		return 0, "must be between 6m and 1t"
	}
	return n * mult, ""
}

func cpusSyntax(s string) bool {
	dot := strings.IndexByte(s, '.')
	intPart, frac := s, ""
	if dot >= 0 {
		intPart, frac = s[:dot], s[dot+1:]
		if frac == "" || len(frac) > 9 {
			return false
		}
	}
	if intPart == "" {
		return false
	}
	for _, part := range []string{intPart, frac} {
		for i := 0; i < len(part); i++ {
			if part[i] < '0' || part[i] > '9' {
				return false
			}
		}
	}
	return true
}

// parseCPUs reads a plain decimal ("2", "0.5", at most 9 decimals).
func parseCPUs(s string) (float64, string) {
	if !cpusSyntax(s) {
		return 0, `must be a decimal number such as "2" or "0.5"`
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, `must be a decimal number such as "2" or "0.5"`
	}
	return f, ""
}

// parseProfiles reads "name:/abs/path,name2:/abs/path2". Each entry splits at its
// first colon; names are [A-Za-z0-9._-]+; paths are absolute and clean (a comma in a
// path cannot be expressed); a name declared twice is refused.
func parseProfiles(s string) (map[string]string, string) {
	m := map[string]string{}
	for i, entry := range strings.Split(s, ",") {
		name, p, ok := strings.Cut(entry, ":")
		switch {
		case entry == "":
			return nil, fmt.Sprintf("entry %d is empty (write name:/abs/path,name2:/abs/path2)", i+1)
		case !ok:
			return nil, fmt.Sprintf("entry %d (%s) must be name:/absolute/path", i+1, check.Quote(entry))
		case !check.Name(name):
			return nil, fmt.Sprintf("entry %d: name %s must match %s", i+1, check.Quote(name), check.NameSyntax)
		}
		if rule := check.AbsClean(p); rule != "" {
			return nil, fmt.Sprintf("entry %d (%s): path %s", i+1, name, rule)
		}
		if _, dup := m[name]; dup {
			return nil, fmt.Sprintf("profile %s is declared twice", name)
		}
		m[name] = p
	}
	return m, ""
}

func profilesRule(m map[string]string) string {
	for _, name := range sortedKeys(m) {
		if !check.Name(name) {
			return fmt.Sprintf("name %s must match %s", check.Quote(name), check.NameSyntax)
		}
		if rule := check.AbsClean(m[name]); rule != "" {
			return fmt.Sprintf("profile %s: path %s", name, rule)
		}
	}
	return ""
}

func formatProfiles(m map[string]string) string {
	parts := make([]string, 0, len(m))
	for _, name := range sortedKeys(m) {
		parts = append(parts, name+":"+m[name])
	}
	return strings.Join(parts, ",")
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// filePathRule accepts "" (unset) or a path without NUL, at most 4096 bytes, naming a
// file rather than a directory. Relative paths resolve against the worker's cwd.
func filePathRule(p string) string {
	switch {
	case p == "":
		return ""
	case len(p) > check.MaxPathLen:
		return fmt.Sprintf("longer than %d bytes", check.MaxPathLen)
	case strings.ContainsRune(p, 0) || !utf8.ValidString(p):
		return "must be valid UTF-8 without NUL"
	case strings.HasSuffix(p, "/"):
		return "must name a file, not a directory"
	}
	return ""
}

// RedactURL returns s with everything between "://" and the last '@' (the
// userinfo: user and password) replaced by "xxxxx", for error messages and
// logs, even when a password with an unescaped '#' or '/' confuses a URL
// parser.
func RedactURL(s string) string { return check.RedactURL(s) }

// String summarizes the configuration for logs with the password and the URL's
// userinfo redacted, so printing a Config never leaks them.
func (c Config) String() string {
	pw := ""
	if c.ValkeyPassword != "" {
		pw = " valkeyPassword=[redacted]"
	}
	return fmt.Sprintf("valkeyURL=%s%s worker=%s declared=%t concurrency=%d dailyCap=%d weeklyCap=%d image=%s memory=%d cpus=%g timeout=%s logsDir=%s",
		RedactURL(c.ValkeyURL), pw, c.WorkerName, c.WorkerNameDeclared, c.Concurrency, c.DailyCap, c.WeeklyCap,
		c.JobImage, c.JobMemory, c.JobCPUs, c.JobTimeout, c.LogsDir)
}

// LogValue renders the configuration for slog with secrets redacted.
func (c Config) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("valkeyURL", RedactURL(c.ValkeyURL)),
		slog.Bool("valkeyPassword", c.ValkeyPassword != ""),
		slog.String("worker", c.WorkerName),
		slog.Bool("declared", c.WorkerNameDeclared),
		slog.Int("concurrency", c.Concurrency),
		slog.Int("dailyCap", c.DailyCap),
		slog.Int("weeklyCap", c.WeeklyCap),
		slog.String("image", c.JobImage),
		slog.Int64("memory", c.JobMemory),
		slog.Float64("cpus", c.JobCPUs),
		slog.Duration("timeout", c.JobTimeout),
		slog.String("logsDir", c.LogsDir),
		slog.String("jobNetwork", c.JobNetwork),
		slog.String("modelUpstream", c.ModelUpstream),
		slog.Any("secretProfiles", sortedKeys(c.SecretProfiles)),
		slog.Any("waitProfiles", sortedKeys(c.WaitProfiles)),
		slog.Bool("gateway", !c.Gateway.Off),
		slog.Any("providerKeys", sortedKeys(c.Gateway.ProviderKeys)),
		slog.String("maxCostUsd", jobs.FormatUSD(c.Spend.MaxCostMicros)),
	)
}

// jobNetworkRule is the rule a granted network name breaks, or "".
func jobNetworkRule(n string) string {
	switch l := strings.ToLower(n); {
	case n == "":
		return "must name a Docker network"
	case l == "host" || strings.Contains(l, ":"):
		return "must not share the host's or another container's network (host, container:...)"
	case len(n) > 256 || strings.ContainsFunc(n, unicode.IsControl) || !utf8.ValidString(n):
		return "must be a Docker network name of at most 256 bytes"
	}
	return ""
}

// modelUpstreamRule is the rule a model upstream URL breaks, or "".
func modelUpstreamRule(raw string) string {
	if raw == "" {
		return ""
	}
	u, err := url.Parse(raw)
	switch {
	case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
		return "must be an http:// or https:// URL with a host"
	case u.User != nil:
		return "must not carry credentials (give jobs their keys through a secrets profile)"
	case u.RawQuery != "" || u.Fragment != "":
		return "must not have a query or fragment"
	}
	return ""
}
