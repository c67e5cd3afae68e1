package check

import (
	"strings"
	"testing"
)

func TestValkeyURL(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{
		"redis://127.0.0.1:6379", "redis://v", "rediss://:pw@v:6390/1", "redis://v:6379/0?dial_timeout=3s",
		"unix:///run/valkey/valkey.sock?db=2", "unix://:pw@/tmp/v.sock", "redis://s:26379/0?master_name=m&addr=s2:26379",
	} {
		if rule := ValkeyURL(ok); rule != "" {
			t.Errorf("%s refused: %s", ok, rule)
		}
	}
	for raw, want := range map[string]string{
		"http://v:6379":             "redis://, rediss:// or unix://",
		"redis://:6379":             "needs a host",
		"redis://v:0":               "port must be",
		"redis://v:65536":           "port must be",
		"redis://v:6379/a":          "database number",
		"redis://v:6379/01":         "database number",
		"redis://:p#w@v:6379":       "fragment",
		"unix://host/run/v.sock":    "absolute path, with no host",
		"unix:///run/valkey/":       "absolute path, with no host",
		"127.0.0.1:6379":            "redis://, rediss:// or unix://",
		"redis://:s3cret@v:badport": "redis://, rediss:// or unix://",
	} {
		rule := ValkeyURL(raw)
		if !strings.Contains(rule, want) || strings.Contains(rule, "s3cret") || strings.Contains(rule, "p#w") {
			t.Errorf("%s: rule %q, want it to say %q and not repeat a password", raw, rule, want)
		}
	}
}

func TestPlainInt(t *testing.T) {
	t.Parallel()
	for s, want := range map[string]int64{"0": 0, "7": 7, "1000000": 1_000_000, "99999999999999999999": 1 << 53} {
		if n, rule := PlainInt(s); rule != "" || n != want {
			t.Errorf("%q: %d %q, want %d", s, n, rule, want)
		}
	}
	for _, s := range []string{"", "+3", " 3", "3.0", "3abc", "1e3", "03", "-1"} {
		if _, rule := PlainInt(s); rule == "" {
			t.Errorf("%q accepted", s)
		}
	}
}

func TestRedactURL(t *testing.T) {
	t.Parallel()
	for give, want := range map[string]string{
		"redis://:hunter2@v:6379/0":   "redis://xxxxx@v:6379/0",
		"rediss://u:p#a/ss@v:6380":    "rediss://xxxxx@v:6380",
		"redis://v:6379":              "redis://v:6379",
		"unix://:pw@/run/valkey.sock": "unix://xxxxx@/run/valkey.sock",
	} {
		if got := RedactURL(give); got != want {
			t.Errorf("RedactURL(%q) = %q, want %q", give, got, want)
		}
	}
}
