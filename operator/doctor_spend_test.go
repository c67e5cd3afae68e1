package operator_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pidispatch/pidispatch/config"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/operator"
)

// findCheck finds the named check.
func findCheck(checks []operator.Check, name string) *operator.Check {
	for i := range checks {
		if checks[i].Name == name {
			return &checks[i]
		}
	}
	return nil
}

func TestDoctorChecksTheGatewaysKeyAndPrices(t *testing.T) {
	db := livetest.Valkey(t)
	docker := &fakeDoctorDocker{present: true, digest: doctorDigestA}
	run := func(edit func(c *config.Config)) []operator.Check {
		cfg := doctorConfig(t, "doc-spend")
		edit(&cfg)
		return operator.Doctor(context.Background(), cfg, operator.DoctorDeps{Valkey: db.Client, Docker: docker, TZ: "UTC"})
	}

	checks := run(func(c *config.Config) {})
	if k, p := findCheck(checks, "gateway-key"), findCheck(checks, "pricing"); k == nil || k.Status != operator.CheckOK || p == nil || p.Status != operator.CheckOK {
		t.Fatalf("a host with a key and the default model priced: %+v", checks)
	}
	if strings.Contains(allText(checks), "sk-doctor-test") {
		t.Fatal("doctor printed the key")
	}

	checks = run(func(c *config.Config) { c.Gateway.ProviderKeys = nil })
	if k := findCheck(checks, "gateway-key"); k == nil || k.Status != operator.CheckWarn || !strings.Contains(k.Fix, "ANTHROPIC_API_KEY") {
		t.Fatalf("no key: %+v", k)
	}

	checks = run(func(c *config.Config) { c.Gateway.DefaultModel = "claude-nonesuch-9" })
	if p := findCheck(checks, "pricing"); p == nil || p.Status != operator.CheckWarn || !strings.Contains(p.Detail, "claude-nonesuch-9") {
		t.Fatalf("unpriced default model: %+v", p)
	}

	bad := filepath.Join(t.TempDir(), "pricing.txt")
	if err := os.WriteFile(bad, []byte("# ok\nanthropic claude-x 1 2 3\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	checks = run(func(c *config.Config) { c.Gateway.PricingFile = bad })
	if p := findCheck(checks, "pricing"); p == nil || p.Status != operator.CheckFail || !strings.Contains(p.Detail, "line 2") {
		t.Fatalf("malformed pricing file: %+v", p)
	}

	checks = run(func(c *config.Config) { c.Gateway.Off = true })
	if g := findCheck(checks, "gateway"); g == nil || g.Status != operator.CheckOK || findCheck(checks, "gateway-key") != nil {
		t.Fatalf("gateway off: %+v", checks)
	}
}

// allText is every check's text, to search for what must not be printed.
func allText(checks []operator.Check) string {
	var b strings.Builder
	for _, c := range checks {
		b.WriteString(c.Detail + " " + c.Fix + "\n")
	}
	return b.String()
}
