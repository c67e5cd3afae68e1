package main

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/pidispatch/pidispatch/config"
	"github.com/pidispatch/pidispatch/internal/envfile"
)

// commentedAssignment is a template line that enables a setting once its
// "# " is removed.
var commentedAssignment = regexp.MustCompile(`^#\s*([A-Z][A-Z0-9_]*=.*)$`)

// enableAll uncomments every commented assignment of an env template, as an
// operator enabling each setting would.
func enableAll(template string) string {
	lines := strings.Split(template, "\n")
	for i, line := range lines {
		if m := commentedAssignment.FindStringSubmatch(line); m != nil {
			lines[i] = m[1]
		}
	}
	return strings.Join(lines, "\n")
}

// The env templates parse the way systemd's EnvironmentFile reads them, as
// written and with every commented setting enabled, and no value carries a
// comment: systemd would keep a trailing "# ..." as part of it.
// fromTheOS are variables the worker reads that the operating system or the
// service manager sets, never the env file.
var fromTheOS = map[string]bool{"TMPDIR": true, "HOME": true, "XDG_STATE_HOME": true}

func TestEnvTemplatesParseAsSystemdReadsThem(t *testing.T) {
	repo, err := os.ReadFile("../../.env.example")
	if err != nil {
		t.Fatal(err)
	}
	for name, text := range map[string]string{
		".env.example":         string(repo),
		"env.example":          envExample,
		"init's .env":          scaffoldEnv(envExample, "/srv/projects"),
		".env.example enabled": enableAll(string(repo)),
		"init's .env enabled":  enableAll(scaffoldEnv(envExample, "/srv/projects")),
	} {
		entries, err := envfile.Parse(strings.NewReader(text), name)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		seen := map[string]bool{}
		for _, en := range entries {
			seen[en.Key] = true
			if strings.Contains(en.Value, "#") {
				t.Errorf("%s:%d: %s=%q carries a comment", name, en.Line, en.Key, en.Value)
			}
		}
		if strings.HasSuffix(name, "enabled") {
			for _, v := range config.EnvVars {
				if !fromTheOS[v] && !seen[v] {
					t.Errorf("%s: no assignment of %s once every setting is enabled", name, v)
				}
			}
		}
	}
}
