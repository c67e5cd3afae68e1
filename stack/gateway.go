package stack

import (
	"log/slog"
	"time"

	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/gateway"
)

// newGateway builds the model gateway of cfg: the pricing table (a
// malformed PI_PRICING_FILE refuses boot, naming its line), the provider
// URLs, and the fleet's rate-limit record. Nil when PI_GATEWAY=off.
func newGateway(cfg dispatch.Config, limits gateway.RateLimits, logger *slog.Logger) (*gateway.Gateway, error) {
	if cfg.Gateway.Off {
		return nil, nil
	}
	pricing, err := gateway.LoadPricing(cfg.Gateway.PricingFile)
	if err != nil {
		return nil, &dispatch.ConfigError{Var: "PI_PRICING_FILE", Value: cfg.Gateway.PricingFile, Rule: err.Error()}
	}
	wait := cfg.Gateway.RateLimitWait
	if wait == 0 {
		wait = time.Nanosecond // PI_RATE_LIMIT_WAIT_MS=0: no wait (the gateway's zero is its default)
	}
	g, err := gateway.New(gateway.Config{
		Upstreams:     cfg.Gateway.ProviderURLs,
		Fallback:      cfg.ModelUpstream,
		Pricing:       pricing,
		RateLimits:    limits,
		RateLimitWait: wait,
		Logger:        logger,
		Host:          cfg.WorkerName,
	})
	if err != nil {
		return nil, &dispatch.ConfigError{Var: "PI_PROVIDER_URLS", Value: "", Rule: err.Error()}
	}
	return g, nil
}
