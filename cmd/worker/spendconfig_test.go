package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Spend settings the worker cannot enforce refuse boot (exit 2), naming the
// variable and the rule; a malformed pricing file names its line.
func TestSpendSettingsRefuseBoot(t *testing.T) {
	t.Parallel()
	pricing := filepath.Join(t.TempDir(), "pricing.txt")
	if err := os.WriteFile(pricing, []byte("# provider model input output cacheRead cacheWrite\nanthropic claude-x 3 15 0.3 3.75\nopenai gpt-x 1.25 ten 0 0\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		env  map[string]string
		want []string
	}{
		{map[string]string{"PI_MAX_COST_USD": "-1"}, []string{"PI_MAX_COST_USD", "dollar amount"}},
		{map[string]string{"PI_MAX_COST_USD": "1.0000001"}, []string{"PI_MAX_COST_USD", "6 decimals"}},
		{map[string]string{"PI_DAILY_COST_USD": "50"}, []string{"PI_DAILY_COST_USD", "needs PI_MAX_COST_USD"}},
		{map[string]string{"PI_SOFT_HOLD_PCT": "100"}, []string{"PI_SOFT_HOLD_PCT", "between 1 and 99"}},
		{map[string]string{"PI_MONTHLY_CAP": "0"}, []string{"PI_MONTHLY_CAP", "unset it"}},
		{map[string]string{"PI_GATEWAY": "yes"}, []string{"PI_GATEWAY", `"on" or "off"`}},
		{map[string]string{"PI_PROVIDER_URLS": "anthropic=ftp://x"}, []string{"PI_PROVIDER_URLS", "http://"}},
		{map[string]string{"PI_METRICS_ADDR": "nope"}, []string{"PI_METRICS_ADDR", "host:port"}},
		{map[string]string{"ANTHROPIC_API_KEY": "sk-never-echoed", "PI_MAX_TOKENS": "0"}, []string{"PI_MAX_TOKENS"}},
		{map[string]string{"PI_PRICING_FILE": pricing}, []string{"PI_PRICING_FILE", "line 3"}},
	} {
		env := map[string]string{"VALKEY_URL": "redis://127.0.0.1:1/0", "PI_UNSIGNED_QUEUES": "*", "PI_LOGS_DIR": t.TempDir()}
		for k, v := range tc.env {
			env[k] = v
		}
		var stderr bytes.Buffer
		code := run(context.Background(), nil, func(k string) string { return env[k] }, io.Discard, &stderr)
		for _, want := range tc.want {
			if code != exitConfig || !strings.Contains(stderr.String(), want) {
				t.Errorf("%v: exit %d, stderr %q; want exit 2 saying %q", tc.env, code, stderr.String(), want)
			}
		}
		if strings.Contains(stderr.String(), "sk-never-echoed") {
			t.Errorf("a provider key was printed: %s", stderr.String())
		}
	}
}
