package config

import (
	"fmt"
	"net"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/internal/check"
	"github.com/pidispatch/pidispatch/jobs"
)

// Spend, gateway and metrics settings. Money amounts are held in
// micro-dollars (jobs.ParseUSD), so sums are exact.
const (
	// MaxUSD is the largest dollar amount a cap may hold.
	MaxUSD = jobs.MaxUSD
	// MaxJobTokens bounds PI_MAX_TOKENS.
	MaxJobTokens = 1_000_000_000
	// DefaultRateLimitWait is how long a running job's model call waits for a
	// provider's rate limit to reset before it fails with the provider's error.
	DefaultRateLimitWait = 60 * time.Second
	// MaxRateLimitWait bounds PI_RATE_LIMIT_WAIT_MS.
	MaxRateLimitWait = 10 * time.Minute
	// DefaultMetricsPort is the port of PI_METRICS_ADDR when it names none.
	DefaultMetricsPort = "9464"
	// DefaultGatewayCalls, MaxGatewayCalls: PI_GATEWAY_MAX_CALLS.
	DefaultGatewayCalls = 4
	MaxGatewayCalls     = 64
	// MaxGatewayBody bounds PI_GATEWAY_MAX_BODY_BYTES (and is its default).
	MaxGatewayBody = 32 << 20
	// MaxGatewayHeldBytes bounds PI_GATEWAY_MAX_CALLS × PI_GATEWAY_MAX_BODY_BYTES.
	MaxGatewayHeldBytes = 128 << 20
	// DefaultGatewayConns, MaxGatewayConns: PI_GATEWAY_MAX_CONNS.
	DefaultGatewayConns = 32
	MaxGatewayConns     = 150
	// MaxAllowedModels bounds PI_ALLOWED_MODELS.
	MaxAllowedModels = 16
)

// ProviderKeyVars names the worker's environment variable holding each
// provider's API key. The gateway injects the key into the job's model calls;
// it never enters a container. A secrets profile may print the same names
// to give one job its own key.
var ProviderKeyVars = dispatch.ProviderKeyVars

// spendEnvVars are the variables of this file, in EnvVars order.
var spendEnvVars = []string{
	"PI_MONTHLY_CAP",
	"PI_SOFT_HOLD_PCT",
	"PI_MAX_COST_USD",
	"PI_MAX_TOKENS",
	"PI_DAILY_COST_USD",
	"PI_WEEKLY_COST_USD",
	"PI_MONTHLY_COST_USD",
	"PI_PREDICT_ADMISSION",
	"PI_PREDICT_MIN_RUNS",
	"PI_GATEWAY",
	"PI_PROVIDER_URLS",
	"PI_DEFAULT_PROVIDER",
	"PI_DEFAULT_MODEL",
	"PI_PRICING_FILE",
	"PI_RATE_LIMIT_WAIT_MS",
	"PI_GATEWAY_MAX_CALLS",
	"PI_GATEWAY_MAX_BODY_BYTES",
	"PI_GATEWAY_MAX_CONNS",
	"PI_ALLOWED_MODELS",
	"PI_METRICS_ADDR",
	"ANTHROPIC_API_KEY",
	"OPENAI_API_KEY",
	"OPENROUTER_API_KEY",
}

func init() {
	// After the job variables, before the files: the order errors are reported in.
	i := 0
	for i < len(EnvVars) && EnvVars[i] != "PI_LOGS_DIR" {
		i++
	}
	EnvVars = append(EnvVars[:i:i], append(append([]string(nil), spendEnvVars...), EnvVars[i:]...)...)
}

// Spend holds the money settings of Config: the Worker's own
// (dispatch.Spend: the per-job caps and the dollar windows) and the count
// windows' extras.
type Spend struct {
	// MonthlyCap bounds container starts per UTC month; 0 disables the window.
	// PI_MONTHLY_CAP, 1..1000000, unset by default.
	MonthlyCap int
	// SoftHoldPct, when not 0, refuses new starts (soft-hold) once a count
	// window is past this share of its cap. PI_SOFT_HOLD_PCT, 1..99.
	SoftHoldPct int
	// Spend holds PI_MAX_COST_USD, PI_MAX_TOKENS and the dollar windows.
	dispatch.Spend
}

// Gateway holds the model gateway's settings of Config: the Worker's own
// (dispatch.Gateway) and the gateway's.
type Gateway struct {
	// Gateway holds PI_GATEWAY, the provider keys, PI_DEFAULT_PROVIDER and
	// PI_GATEWAY_MAX_CONNS.
	dispatch.Gateway
	// ProviderURLs overrides a provider's base URL (a self-hosted or test
	// endpoint). PI_PROVIDER_URLS ("anthropic=https://...,openai=http://...").
	// PI_MODEL_UPSTREAM, when set, is the base URL of every provider not
	// named here.
	ProviderURLs map[string]string
	// DefaultModel is what a job that names no model runs: doctor's checks
	// use it. PI_DEFAULT_MODEL (claude-sonnet-4-5).
	DefaultModel string
	// PricingFile adds to and overrides the built-in pricing table.
	// PI_PRICING_FILE, an absolute path; unset by default.
	PricingFile string
	// RateLimitWait is how long a running job's call waits for a provider's
	// rate limit to reset. PI_RATE_LIMIT_WAIT_MS, 0..600000, defaults to 60 s.
	RateLimitWait time.Duration
	// MaxCalls bounds each job's concurrent model calls; past it a call is
	// answered 429, which the agent waits out. PI_GATEWAY_MAX_CALLS,
	// 1..MaxGatewayCalls, defaults to 4.
	MaxCalls int
	// MaxBodyBytes bounds a model call's request body, which the gateway
	// holds whole while it bounds the call. PI_GATEWAY_MAX_BODY_BYTES,
	// 4096..33554432 (32 MiB, the default). MaxCalls × MaxBodyBytes is at
	// most MaxGatewayHeldBytes: what one job can make the worker hold.
	MaxBodyBytes int64
	// AllowedModels, when set, are the provider/model patterns a job may
	// call ("*" matches any run of characters); the gateway refuses any
	// other model before forwarding. PI_ALLOWED_MODELS, comma-separated, at
	// most 16, no spaces.
	AllowedModels []string
	// MetricsAddr, when set, serves Prometheus metrics, /healthz and /readyz.
	// PI_METRICS_ADDR: host:port, :port (loopback) or a bare port (loopback).
	MetricsAddr string
}

func defaultGateway() Gateway {
	return Gateway{Gateway: dispatch.Gateway{DefaultProvider: "anthropic", MaxConns: DefaultGatewayConns},
		DefaultModel: "claude-sonnet-4-5", RateLimitWait: DefaultRateLimitWait, MaxCalls: DefaultGatewayCalls, MaxBodyBytes: MaxGatewayBody}
}

func (r *envReader) readSpend(c *Config) {
	r.envInt("PI_MONTHLY_CAP", &c.Spend.MonthlyCap)
	r.envInt("PI_SOFT_HOLD_PCT", &c.Spend.SoftHoldPct)
	parseEnv(r, "PI_MAX_COST_USD", parseUSDVar, &c.Spend.MaxCostMicros)
	parseEnv(r, "PI_MAX_TOKENS", parseTokens, &c.Spend.MaxTokens)
	parseEnv(r, "PI_DAILY_COST_USD", parseUSDVar, &c.Spend.DailyCostMicros)
	parseEnv(r, "PI_WEEKLY_COST_USD", parseUSDVar, &c.Spend.WeeklyCostMicros)
	parseEnv(r, "PI_MONTHLY_COST_USD", parseUSDVar, &c.Spend.MonthlyCostMicros)
	parseEnv(r, "PI_PREDICT_ADMISSION", parseAutoOff, &c.Spend.PredictOff)
	r.envInt("PI_PREDICT_MIN_RUNS", &c.Spend.PredictMinRuns)
	parseEnv(r, "PI_GATEWAY", parseOnOff, &c.Gateway.Off)
	parseEnv(r, "PI_PROVIDER_URLS", parseProviderURLs, &c.Gateway.ProviderURLs)
	r.envText("PI_DEFAULT_PROVIDER", &c.Gateway.DefaultProvider)
	r.envText("PI_DEFAULT_MODEL", &c.Gateway.DefaultModel)
	r.envText("PI_PRICING_FILE", &c.Gateway.PricingFile)
	r.envMillis("PI_RATE_LIMIT_WAIT_MS", &c.Gateway.RateLimitWait)
	r.envInt("PI_GATEWAY_MAX_CALLS", &c.Gateway.MaxCalls)
	var body int
	if _, set := r.lookupEnv("PI_GATEWAY_MAX_BODY_BYTES"); set {
		r.envInt("PI_GATEWAY_MAX_BODY_BYTES", &body)
		c.Gateway.MaxBodyBytes = int64(body)
	}
	r.envInt("PI_GATEWAY_MAX_CONNS", &c.Gateway.MaxConns)
	parseEnv(r, "PI_ALLOWED_MODELS", parseAllowedModels, &c.Gateway.AllowedModels)
	parseEnv(r, "PI_METRICS_ADDR", parseMetricsAddr, &c.Gateway.MetricsAddr)
	for provider, v := range map[string]string{
		"anthropic":  r.secret("ANTHROPIC_API_KEY"),
		"openai":     r.secret("OPENAI_API_KEY"),
		"openrouter": r.secret("OPENROUTER_API_KEY"),
	} {
		if v != "" {
			if c.Gateway.ProviderKeys == nil {
				c.Gateway.ProviderKeys = map[string]string{}
			}
			c.Gateway.ProviderKeys[provider] = v
		}
	}
	if v, ok := r.raw["PI_MONTHLY_CAP"]; ok && !r.bad["PI_MONTHLY_CAP"] && c.Spend.MonthlyCap == 0 {
		r.fail("PI_MONTHLY_CAP", v, fmt.Sprintf("must be between 1 and %d (unset it to disable the monthly cap)", MaxCap))
	}
}

// secret is a key's value; raw records only that it was set.
func (r *envReader) secret(name string) string {
	v := r.getenv(name)
	if v != "" {
		r.raw[name] = "[redacted]"
	}
	return v
}

func parseUSDVar(s string) (int64, string) {
	m, err := jobs.ParseUSD(s)
	if err != nil || m <= 0 || m > MaxUSD*1_000_000 {
		return 0, fmt.Sprintf("must be a dollar amount above 0 and at most %d, with up to 6 decimals (\"2.50\")", MaxUSD)
	}
	return m, ""
}

func parseTokens(s string) (int64, string) {
	n, rule := check.PlainInt(s)
	if rule == "" && (n < 1 || n > MaxJobTokens) {
		rule = fmt.Sprintf("must be between 1 and %d", MaxJobTokens)
	}
	return n, rule
}

func parseOnOff(s string) (off bool, rule string) {
	switch s {
	case "on":
		return false, ""
	case "off":
		return true, ""
	}
	return false, `must be "on" or "off"`
}

// parseAutoOff reads PI_PREDICT_ADMISSION: "auto" (the default) or "off".
func parseAutoOff(s string) (off bool, rule string) {
	switch s {
	case "auto":
		return false, ""
	case "off":
		return true, ""
	}
	return false, `must be "auto" or "off"`
}

// parseProviderURLs reads "name=url,name=url".
func parseProviderURLs(s string) (map[string]string, string) {
	out := map[string]string{}
	for _, part := range strings.Split(s, ",") {
		name, u, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok || !jobs.ValidProvider(name) {
			return nil, `must be a comma-separated list of provider=URL ("anthropic=https://api.anthropic.com")`
		}
		if rule := modelUpstreamRule(u); rule != "" || u == "" {
			return nil, "the URL of " + name + " " + firstNonEmpty(rule, "must be set")
		}
		if _, dup := out[name]; dup {
			return nil, "names " + name + " twice"
		}
		out[name] = u
	}
	return out, ""
}

// parseAllowedModels reads "provider/model,provider/model*".
func parseAllowedModels(s string) ([]string, string) {
	const rule = "must be a comma-separated list of at most 16 provider/model patterns without spaces (\"anthropic/claude-sonnet-4-5,openai/gpt-5*\")"
	parts := strings.Split(s, ",")
	if len(parts) > MaxAllowedModels {
		return nil, rule
	}
	for _, p := range parts {
		provider, model, ok := strings.Cut(p, "/")
		if !ok || !jobs.ValidProvider(provider) || model == "" || tokenRule(model) != "" {
			return nil, rule
		}
	}
	return parts, ""
}

func firstNonEmpty(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// parseMetricsAddr reads host:port, :port or port; no host means loopback.
func parseMetricsAddr(s string) (string, string) {
	const rule = "must be host:port, :port or a port (no host listens on 127.0.0.1 only)"
	if _, err := strconv.Atoi(s); err == nil {
		s = ":" + s
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil || strings.ContainsFunc(s, unicode.IsSpace) {
		return "", rule
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return "", rule
	}
	if host == "" {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port), ""
}

// spendProblems checks the typed money and gateway fields.
func (c Config) spendProblems(p *problemList) {
	s, g := c.Spend, c.Gateway
	if s.MonthlyCap != 0 {
		p.intRange("PI_MONTHLY_CAP", s.MonthlyCap, 1, MaxCap)
	}
	if s.SoftHoldPct != 0 {
		p.intRange("PI_SOFT_HOLD_PCT", s.SoftHoldPct, 1, 99)
	}
	for _, v := range []struct {
		name string
		m    int64
	}{{"PI_MAX_COST_USD", s.MaxCostMicros}, {"PI_DAILY_COST_USD", s.DailyCostMicros}, {"PI_WEEKLY_COST_USD", s.WeeklyCostMicros}, {"PI_MONTHLY_COST_USD", s.MonthlyCostMicros}} {
		if v.m < 0 || v.m > MaxUSD*1_000_000 {
			p.add(v.name, jobs.FormatUSD(v.m), fmt.Sprintf("must be above 0 and at most %d dollars", MaxUSD))
		}
	}
	if s.PredictMinRuns != 0 {
		p.intRange("PI_PREDICT_MIN_RUNS", s.PredictMinRuns, 1, 100_000)
	}
	if s.MaxTokens < 0 || s.MaxTokens > MaxJobTokens {
		p.add("PI_MAX_TOKENS", strconv.FormatInt(s.MaxTokens, 10), fmt.Sprintf("must be between 1 and %d", MaxJobTokens))
	}
	if s.DollarWindows() && s.MaxCostMicros == 0 {
		for _, name := range []string{"PI_DAILY_COST_USD", "PI_WEEKLY_COST_USD", "PI_MONTHLY_COST_USD"} {
			if _, set := p.raw[name]; set || p.raw == nil {
				p.add(name, p.raw[name], "needs PI_MAX_COST_USD: each job reserves its per-job cap in the window")
				break
			}
		}
	}
	if !jobs.ValidProvider(g.DefaultProvider) {
		p.add("PI_DEFAULT_PROVIDER", g.DefaultProvider, "must be a provider name (lowercase letters, digits, dashes)")
	}
	if rule := tokenRule(g.DefaultModel); rule != "" {
		p.add("PI_DEFAULT_MODEL", g.DefaultModel, rule)
	}
	if rule := filePathRule(g.PricingFile); rule != "" {
		p.add("PI_PRICING_FILE", g.PricingFile, rule)
	}
	p.durRange("PI_RATE_LIMIT_WAIT_MS", g.RateLimitWait, 0, MaxRateLimitWait, true)
	p.intRange("PI_GATEWAY_MAX_CALLS", g.MaxCalls, 1, MaxGatewayCalls)
	p.intRange("PI_GATEWAY_MAX_BODY_BYTES", int(g.MaxBodyBytes), 4096, MaxGatewayBody)
	p.intRange("PI_GATEWAY_MAX_CONNS", g.MaxConns, 1, MaxGatewayConns)
	inRange := g.MaxCalls >= 1 && g.MaxCalls <= MaxGatewayCalls && g.MaxBodyBytes >= 4096 && g.MaxBodyBytes <= MaxGatewayBody
	if inRange && int64(g.MaxCalls)*g.MaxBodyBytes > MaxGatewayHeldBytes {
		p.add("PI_GATEWAY_MAX_CALLS", strconv.Itoa(g.MaxCalls), fmt.Sprintf("times PI_GATEWAY_MAX_BODY_BYTES (%d) must be at most %d (128 MiB): what one job can make the worker hold", g.MaxBodyBytes, MaxGatewayHeldBytes))
	}
	for name, u := range g.ProviderURLs {
		if !jobs.ValidProvider(name) || modelUpstreamRule(u) != "" || u == "" {
			p.add("PI_PROVIDER_URLS", formatProviderURLs(g.ProviderURLs), "must map provider names to http:// or https:// URLs without credentials")
			break
		}
	}
}

func tokenRule(s string) string {
	if s == "" || len(s) > 128 || strings.ContainsFunc(s, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) {
		return "must be a model name of 1 to 128 characters without spaces"
	}
	return ""
}

func formatProviderURLs(m map[string]string) string {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	sort.Strings(names)
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = n + "=" + RedactURL(m[n])
	}
	return strings.Join(parts, ",")
}
