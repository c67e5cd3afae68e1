package config

import (
	"fmt"
	"io"
	"os"

	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/dispatch/policy"
)

// Worker checks c and returns the Worker's configuration: the same
// settings, typed, with the policy files (PI_SCOPED_LIMITS_FILE,
// PI_PAUSE_WINDOWS_FILE) and the flows (PI_FLOWS_DIR) read and parsed, so
// NewWorker opens no file. A
// file that does not parse, or a scope row the settings cannot enforce, is
// a *ConfigError naming its variable.
func (c Config) Worker() (dispatch.Config, error) {
	if err := c.Validate(); err != nil {
		return dispatch.Config{}, err
	}
	w := dispatch.Config{Settings: c.Settings, Cron: c.TriggersFile != "", Spend: c.Spend.Spend, Gateway: c.Gateway.Gateway}
	fl, err := c.Flows()
	if err != nil {
		return dispatch.Config{}, err
	}
	w.Flows = fl
	if c.ScopedLimitsFile != "" {
		l, err := LoadScopedLimits(c.ScopedLimitsFile)
		if err != nil {
			return dispatch.Config{}, &ConfigError{Var: "PI_SCOPED_LIMITS_FILE", Value: c.ScopedLimitsFile, Rule: err.Error()}
		}
		for _, row := range l.Rows() {
			if row.HasDollars() && c.Spend.MaxCostMicros == 0 {
				return dispatch.Config{}, &ConfigError{Var: "PI_SCOPED_LIMITS_FILE", Value: c.ScopedLimitsFile,
					Rule: "the row of " + row.Scope + " sets a dollar window, which needs PI_MAX_COST_USD: each job reserves its per-job cap in it"}
			}
		}
		w.ScopedLimits = l
	}
	if c.PauseWindowsFile != "" {
		p, err := LoadPauseWindows(c.PauseWindowsFile)
		if err != nil {
			return dispatch.Config{}, &ConfigError{Var: "PI_PAUSE_WINDOWS_FILE", Value: c.PauseWindowsFile, Rule: err.Error()}
		}
		w.PauseWindows = p
	}
	return w, nil
}

// LoadPauseWindows reads and parses a pause-windows file (at most
// policy.MaxFileBytes).
func LoadPauseWindows(path string) (policy.PauseWindows, error) {
	data, err := readPolicyFile(path)
	if err != nil {
		return policy.PauseWindows{}, err
	}
	w, err := policy.ParsePauseWindows(data)
	if err != nil {
		return policy.PauseWindows{}, fmt.Errorf("%s: %w", path, err)
	}
	return w, nil
}

// LoadScopedLimits reads and parses a scoped-limits file (at most
// policy.MaxFileBytes).
func LoadScopedLimits(path string) (policy.ScopedLimits, error) {
	data, err := readPolicyFile(path)
	if err != nil {
		return policy.ScopedLimits{}, err
	}
	l, err := policy.ParseScopedLimits(data)
	if err != nil {
		return policy.ScopedLimits{}, fmt.Errorf("%s: %w", path, err)
	}
	return l, nil
}

// readPolicyFile reads at most policy.MaxFileBytes of a policy file; a
// larger file is an error rather than a truncated read.
func readPolicyFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, policy.MaxFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if len(data) > policy.MaxFileBytes {
		return nil, fmt.Errorf("%s: larger than %d bytes", path, policy.MaxFileBytes)
	}
	return data, nil
}
