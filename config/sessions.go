package config

import "slices"

// Where the worker keeps each thread's agent session between the thread's
// jobs (docs/configuration.md, PI_SESSION_STORE).
const (
	// SessionStoreLogs keeps sessions in the logs folder only: a resume
	// job continues its thread's session on the host that kept it.
	SessionStoreLogs = "logs"
	// SessionStoreValkey also stores each session, redacted, bounded and
	// signed with the fleet key, in Valkey, so a resume job on any host of
	// the fleet continues it.
	SessionStoreValkey = "valkey"
)

// sessionsEnvVars are the variables of this file, in EnvVars order.
var sessionsEnvVars = []string{"PI_SESSION_STORE"}

func init() {
	// After the logs folder's retention, which the stored sessions follow.
	i := slices.Index(EnvVars, "PI_LOG_RETENTION_DAYS") + 1
	EnvVars = append(EnvVars[:i:i], append(append([]string(nil), sessionsEnvVars...), EnvVars[i:]...)...)
}

// sessionStoreRule is PI_SESSION_STORE's rule.
const sessionStoreRule = "must be logs (this host's logs folder) or valkey (also the fleet's Valkey, so a resume job on any host continues the session)"

// readSessions reads the variables of this file.
func (r *envReader) readSessions(c *Config) {
	r.envText("PI_SESSION_STORE", &c.SessionStore)
}

// sessionProblems checks the settings of this file.
func (c Config) sessionProblems(p *problemList) {
	switch c.SessionStore {
	case "", SessionStoreLogs, SessionStoreValkey:
	default:
		p.add("PI_SESSION_STORE", c.SessionStore, sessionStoreRule)
	}
}
