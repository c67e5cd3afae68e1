package stack

import (
	"log/slog"
	"time"

	"github.com/pidispatch/pidispatch/config"
	"github.com/pidispatch/pidispatch/gateway"
)

// newGateway builds the model gateway of cfg: the pricing table (a
// malformed PI_PRICING_FILE refuses boot, naming its line), the provider
// URLs, and the fleet's rate-limit record. Nil when PI_GATEWAY=off.
func newGateway(cfg config.Config, limits gateway.RateLimits, logger *slog.Logger, now func() time.Time, onCall func(gateway.CallEvent)) (*gateway.Gateway, error) {
	if cfg.Gateway.Off {
		return nil, nil
	}
	pricing, err := gateway.LoadPricing(cfg.Gateway.PricingFile)
	if err != nil {
		return nil, &config.ConfigError{Var: "PI_PRICING_FILE", Value: cfg.Gateway.PricingFile, Rule: err.Error()}
	}
	wait := cfg.Gateway.RateLimitWait
	if wait == 0 {
		wait = time.Nanosecond // PI_RATE_LIMIT_WAIT_MS=0: no wait (the gateway's zero is its default)
	}
	// PI_MODEL_UPSTREAM is every provider's base URL, the known ones too;
	// PI_PROVIDER_URLS names the exceptions.
	upstreams := map[string]string{}
	if cfg.ModelUpstream != "" {
		for provider := range config.ProviderKeyVars {
			upstreams[provider] = cfg.ModelUpstream
		}
	}
	for provider, u := range cfg.Gateway.ProviderURLs {
		upstreams[provider] = u
	}
	g, err := gateway.New(gateway.Config{
		Upstreams:     upstreams,
		Fallback:      cfg.ModelUpstream,
		Pricing:       pricing,
		RateLimits:    limits,
		RateLimitWait: wait,
		Logger:        logger,
		Host:          cfg.WorkerName,
		Now:           now,
		OnCall:        onCall,
		MaxCalls:      cfg.Gateway.MaxCalls,
		MaxBodyBytes:  cfg.Gateway.MaxBodyBytes,
		AllowedModels: cfg.Gateway.AllowedModels,
	})
	if err != nil {
		return nil, &config.ConfigError{Var: "PI_PROVIDER_URLS", Value: "", Rule: err.Error()}
	}
	return g, nil
}
