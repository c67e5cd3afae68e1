package config_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pidispatch/pidispatch/config"
	"github.com/pidispatch/pidispatch/dispatch"
)

// The Worker's defaults are written twice (dispatch.DefaultConfig for a
// program that builds the Worker in code); they must agree.
func TestWorker_DefaultsMatchDispatch(t *testing.T) {
	t.Parallel()
	c := config.Default()
	got, err := c.Worker()
	require.NoError(t, err)
	want := dispatch.DefaultConfig()
	want.LogsDir = c.LogsDir
	require.Equal(t, want, got)
}

// Every setting the Worker reads comes across, typed.
func TestWorker_CarriesTheSettings(t *testing.T) {
	t.Parallel()
	c, err := config.Load(mapEnv(map[string]string{
		"PI_WORKER_NAME": "box-1", "PI_CONCURRENCY": "7", "PI_JOB_TIMEOUT": "45m",
		"PI_TRIGGERS_FILE": "/etc/pi/triggers.json", "PI_MAX_COST_USD": "2.5", "PI_MAX_TOKENS": "1000",
		"PI_DAILY_COST_USD": "10", "PI_GATEWAY": "off", "ANTHROPIC_API_KEY": "sk-test",
		"PI_WAIT_PROFILES": "ticket:/usr/local/bin/ticket", "PI_LOGS_DIR": "/var/lib/pi/runs",
	}))
	require.NoError(t, err)
	w, err := c.Worker()
	require.NoError(t, err)
	require.Equal(t, "box-1", w.WorkerName)
	require.True(t, w.WorkerNameDeclared)
	require.Equal(t, 7, w.Concurrency)
	require.Equal(t, "45m0s", w.JobTimeout.String())
	require.True(t, w.Cron, "a triggers file asks for a cron gate")
	require.Equal(t, dispatch.Spend{MaxCostMicros: 2_500_000, MaxTokens: 1000, DailyCostMicros: 10_000_000}, w.Spend)
	require.True(t, w.Gateway.Off)
	require.Equal(t, map[string]string{"anthropic": "sk-test"}, w.Gateway.ProviderKeys)
	require.Equal(t, map[string]string{"ticket": "/usr/local/bin/ticket"}, w.WaitProfiles)
	require.Equal(t, "/var/lib/pi/runs", w.LogsDir)
	require.NoError(t, w.Validate())
}

// Worker reads the policy files; one that is missing, does not parse or
// cannot be enforced is a ConfigError naming its variable.
func TestWorker_ReadsThePolicyFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(body), 0o600))
		return p
	}
	c := config.Default()
	c.ScopedLimitsFile = write("limits.json", `{"version":1,"limits":[{"scope":"acme/web","concurrent":2}]}`)
	c.PauseWindowsFile = write("pause.json", `{"windows":[{"scope":"*","from":"01:00","to":"02:00"}]}`)
	w, err := c.Worker()
	require.NoError(t, err)
	require.Equal(t, 1, w.ScopedLimits.Len())
	require.Equal(t, 1, w.PauseWindows.Len())
	row, ok := w.ScopedLimits.Lookup("acme/web")
	require.True(t, ok)
	require.Equal(t, 2, row.Concurrent)

	for _, tc := range []struct {
		name, variable, rule string
		change               func(*config.Config)
	}{
		{"pause windows do not parse", "PI_PAUSE_WINDOWS_FILE", "windows[0].to", func(c *config.Config) {
			c.PauseWindowsFile = write("bad-pause.json", `{"windows":[{"scope":"*","from":"01:00","to":"01:00"}]}`)
		}},
		{"limits file missing", "PI_SCOPED_LIMITS_FILE", "no such file", func(c *config.Config) {
			c.ScopedLimitsFile = filepath.Join(dir, "absent.json")
		}},
		{"dollar row without a job cap", "PI_SCOPED_LIMITS_FILE", "needs PI_MAX_COST_USD", func(c *config.Config) {
			c.ScopedLimitsFile = write("dollars.json", `{"version":1,"limits":[{"scope":"acme/web","dailyCostUsd":"5"}]}`)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := config.Default()
			tc.change(&c)
			_, err := c.Worker()
			var ce *config.ConfigError
			require.True(t, errors.As(err, &ce), "%v", err)
			require.Equal(t, tc.variable, ce.Var)
			require.True(t, strings.Contains(ce.Rule, tc.rule), "%q lacks %q", ce.Rule, tc.rule)
		})
	}

	// With the job cap the dollar row is accepted.
	c = config.Default()
	c.ScopedLimitsFile = filepath.Join(dir, "dollars.json")
	c.Spend.MaxCostMicros = 1_000_000
	w, err = c.Worker()
	require.NoError(t, err)
	require.True(t, w.ScopedLimits.Rows()[0].HasDollars())
}

// An invalid configuration never reaches the Worker.
func TestWorker_RefusesAnInvalidConfig(t *testing.T) {
	t.Parallel()
	c := config.Default()
	c.Concurrency = 0
	_, err := c.Worker()
	var errs config.ConfigErrors
	require.True(t, errors.As(err, &errs), "%v", err)
	require.Equal(t, "PI_CONCURRENCY", errs[0].Var)
}

func mapEnv(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

// Predicted admission: auto by default, off by the setting, and a bad value
// is an error that names the variable and its rule.
func TestWorker_PredictAdmission(t *testing.T) {
	t.Parallel()
	c, err := config.Load(mapEnv(map[string]string{"PI_PREDICT_ADMISSION": "off", "PI_PREDICT_MIN_RUNS": "50"}))
	require.NoError(t, err)
	require.True(t, c.Spend.PredictOff)
	require.Equal(t, 50, c.Spend.PredictMinRuns)
	require.False(t, config.Default().Spend.PredictOff, "on (auto) by default")
	for k, v := range map[string]string{"PI_PREDICT_ADMISSION": "on", "PI_PREDICT_MIN_RUNS": "-1"} {
		_, err := config.Load(mapEnv(map[string]string{k: v}))
		var ce config.ConfigErrors
		require.ErrorAs(t, err, &ce, "%s=%s", k, v)
		require.Contains(t, err.Error(), k)
	}
}
