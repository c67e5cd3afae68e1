package operator

import (
	"github.com/pidispatch/pidispatch/config"
	"github.com/pidispatch/pidispatch/gateway"
)

// spend checks what the model gateway needs on this host: a key for the
// default provider (the gateway adds it to every call; without one each call
// is refused), and a price for the default model (without one its dollars
// cannot be counted, and a dollar cap refuses its calls).
func (d *doctor) spend() {
	g := d.cfg.Gateway
	if g.Off {
		d.ok("gateway", "model gateway off (PI_GATEWAY=off): jobs get no model socket, and spend is not metered")
		return
	}
	keyVar := config.ProviderKeyVars[g.DefaultProvider]
	switch {
	case g.ProviderKeys[g.DefaultProvider] != "":
		d.ok("gateway-key", "the host holds a key for %s (%s)", g.DefaultProvider, keyVar)
	case keyVar == "":
		d.warn("gateway-key", "set PI_DEFAULT_PROVIDER to anthropic, openai or openrouter",
			"the gateway holds keys for anthropic, openai and openrouter only, not %s (PI_DEFAULT_PROVIDER)", g.DefaultProvider)
	default:
		// A warning, not a failure: a job's secrets profile may print the key,
		// and a fleet of non-agent images needs none.
		d.warn("gateway-key", "set "+keyVar+" in the worker's environment (.env), or print it from the jobs' secrets profile; it stays on this host, never in a container",
			"no %s on this host: a model call to %s is refused unless the job's secrets profile prints the key", keyVar, g.DefaultProvider)
	}
	pricing, err := gateway.LoadPricing(g.PricingFile)
	switch {
	case err != nil:
		d.fail("pricing", "fix the line named, or unset PI_PRICING_FILE; the worker refuses to boot with it (exit 2)", "%v", err)
	case !pricing.Covers(g.DefaultProvider, g.DefaultModel):
		d.warn("pricing", "add a line for "+g.DefaultProvider+" "+g.DefaultModel+" to the pricing file (PI_PRICING_FILE, docs/spend.md#pricing)",
			"the pricing table has no price for %s/%s: its calls are counted but not priced, and a dollar cap refuses them", g.DefaultProvider, g.DefaultModel)
	default:
		d.ok("pricing", "the pricing table prices %s/%s", g.DefaultProvider, g.DefaultModel)
	}
}
