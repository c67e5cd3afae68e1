package dispatch

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
)

// Stand-ins that satisfy the interfaces; NewWorker never calls them.
type (
	stubQueue   struct{ JobQueue }
	stubSource  struct{ JobSource }
	stubRuntime struct{ Runtime }
	stubBudget  struct{ Budgeter }
	stubHolds   struct{ HoldStore }
	stubCron    struct{ CronGate }
	stubSecrets struct{ SecretResolver }
	stubSockets struct{ ModelSockets }
)

// NewWorker refuses Deps that would leave every job of a kind deferred or
// refused for ever, naming the missing part and what asked for it.
func TestNewWorkerRefusesWhatCannotWork(t *testing.T) {
	full := func() Deps {
		return Deps{Stores: Stores{Queues: []JobQueue{stubQueue{}}, Source: stubSource{}, Budget: stubBudget{}, Holds: stubHolds{}},
			Runtime: stubRuntime{}, Cron: stubCron{}, Secrets: stubSecrets{}, ModelSockets: stubSockets{}}
	}
	secrets := DefaultConfig()
	secrets.SecretProfiles = map[string]string{"ci": "/usr/local/bin/ci-secrets"}
	upstream := DefaultConfig()
	upstream.ModelUpstream = "http://127.0.0.1:8080"
	waiting := DefaultConfig()
	waiting.WaitProfiles = map[string]string{"ticket": "/usr/local/bin/ticket-done"}
	cron := DefaultConfig()
	cron.Cron = true
	tests := []struct {
		name   string
		cfg    Config
		change func(*Deps)
		want   []string // in the error; nil: accepted
	}{
		{"everything", waiting, func(*Deps) {}, nil},
		{"no queues", DefaultConfig(), func(d *Deps) { d.Queues = nil }, []string{"Deps.Queues"}},
		{"no source", DefaultConfig(), func(d *Deps) { d.Source = nil }, []string{"Deps.Source"}},
		{"no runtime", DefaultConfig(), func(d *Deps) { d.Runtime = nil }, []string{"Deps.Runtime"}},
		{"no budget", DefaultConfig(), func(d *Deps) { d.Budget = nil }, []string{"Deps.Budget"}},
		{"wait profiles without holds", waiting, func(d *Deps) { d.Holds = nil }, []string{"Deps.Holds", "PI_WAIT_PROFILES", "NewHolds"}},
		{"no wait profiles, no holds", DefaultConfig(), func(d *Deps) { d.Holds = nil }, nil},
		{"triggers without a cron gate", cron, func(d *Deps) { d.Cron = nil }, []string{"Deps.Cron", "PI_TRIGGERS_FILE", "cron-not-agreed"}},
		{"no triggers, no cron gate", DefaultConfig(), func(d *Deps) { d.Cron = nil }, nil},
		{"secrets profiles without a resolver", secrets, func(d *Deps) { d.Secrets = nil }, []string{"Deps.Secrets", "PI_SECRET_PROFILES", "secretprofile"}},
		{"no secrets profiles, no resolver", DefaultConfig(), func(d *Deps) { d.Secrets = nil }, nil},
		{"an upstream without model sockets", upstream, func(d *Deps) { d.ModelSockets = nil }, []string{"Deps.ModelSockets", "PI_MODEL_UPSTREAM", "gateway/socket"}},
		{"no model endpoint, no model sockets", DefaultConfig(), func(d *Deps) { d.ModelSockets = nil }, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			deps := full()
			tc.change(&deps)
			cfg := tc.cfg
			cfg.LogsDir = t.TempDir()
			_, err := NewWorker(cfg, deps, Tuning{})
			if tc.want == nil {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var mp *MissingPartError
			if !errors.Is(err, ErrMissingPart) || !errors.As(err, &mp) {
				t.Fatalf("err %v; want a *MissingPartError", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not name %q", err, w)
				}
			}
		})
	}
}

// Printing or logging a Config never shows a provider key.
func TestConfigNeverPrintsProviderKeys(t *testing.T) {
	t.Parallel()
	c := DefaultConfig()
	c.Gateway.ProviderKeys = map[string]string{"anthropic": "sk-secret-1"}
	var sb strings.Builder
	slog.New(slog.NewTextHandler(&sb, nil)).Info("boot", "config", c)
	for _, out := range []string{fmt.Sprint(c), fmt.Sprintf("%+v", c), fmt.Sprintf("%#v", c), sb.String()} {
		if strings.Contains(out, "sk-secret-1") || !strings.Contains(out, "providerKeys=1") {
			t.Errorf("%q shows the key or hides that there is one", out)
		}
	}
}
