package gateway

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/internal/jobrule"
	"github.com/pidispatch/pidispatch/jobs"
)

// knownUpstreams are the providers whose base URL the gateway knows without
// configuration.
var knownUpstreams = map[string]string{
	"anthropic":  "https://api.anthropic.com",
	"openai":     "https://api.openai.com/v1",
	"openrouter": "https://openrouter.ai/api/v1",
}

// DefaultRateLimitWait is Config.RateLimitWait's default.
const DefaultRateLimitWait = 60 * time.Second

// Defaults of Config's bounds on a job.
const (
	// DefaultMaxBodyBytes bounds a model call's request body, which the
	// gateway reads whole to learn the model and bound the call.
	DefaultMaxBodyBytes = 32 << 20
	// DefaultMaxCalls bounds a job's concurrent calls: with the body limit,
	// what one job can make the gateway hold at once (4 × 32 MiB).
	DefaultMaxCalls = 4
	// DefaultBodyTimeout bounds the reading of a request body.
	DefaultBodyTimeout = 60 * time.Second
	// DefaultDrainTimeout bounds how long the gateway goes on reading an
	// answer the container hung up on, to learn its usage.
	DefaultDrainTimeout = 2 * time.Minute
)

// copyBuffer is the proxy's copy buffer: large, so a fast stream moves in
// few reads and writes.
const copyBuffer = 256 << 10

// RateLimits is the fleet-wide record of rate-limited providers the gateway
// reads and writes; dispatch.RateLimits satisfies it.
type RateLimits interface {
	// Suspend records that provider is limited until until.
	Suspend(ctx context.Context, provider string, until time.Time, why string) error
	// SuspendedUntil is the provider's reset time; zero when not suspended.
	SuspendedUntil(ctx context.Context, provider string) (time.Time, error)
}

// Config is a Gateway's settings. New applies the defaults to a copy.
type Config struct {
	// Upstreams are base URLs by provider name. They override the known
	// ones: anthropic https://api.anthropic.com, openai
	// https://api.openai.com/v1, openrouter https://openrouter.ai/api/v1.
	Upstreams map[string]string
	// Fallback is the base URL of every provider neither in Upstreams nor
	// known (PI_MODEL_UPSTREAM); empty: such a provider is refused.
	Fallback string
	// Pricing prices the calls; nil: DefaultPricing().
	Pricing *Pricing
	// RateLimits is where 429/529 resets are recorded and read; nil: none.
	RateLimits RateLimits
	// RateLimitWait is how long a call waits for a suspended provider's
	// reset before it is answered 429 itself; default 60s.
	RateLimitWait time.Duration
	// Transport reaches the providers; nil: a clone of
	// http.DefaultTransport with large buffers.
	Transport http.RoundTripper
	// Logger gets one line per call; nil: discarded.
	Logger *slog.Logger
	// Host is the worker's name, on every log line.
	Host string
	// Now is the clock; nil: time.Now.
	Now func() time.Time
	// OnCall, when set, is called once per settled model call, from the
	// call's goroutine: it must be safe for concurrent use and not block.
	OnCall func(CallEvent)
	// MaxCalls bounds a job's concurrent calls; beyond it a call is
	// answered 429. 0: DefaultMaxCalls.
	MaxCalls int
	// MaxBodyBytes bounds a request body; a larger one is answered 413.
	// 0: DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// BodyTimeout bounds reading a request body; 0: DefaultBodyTimeout.
	BodyTimeout time.Duration
	// DrainTimeout bounds how long an answer the container hung up on is
	// still read for its usage; past it the call is charged its
	// reservation. 0: DefaultDrainTimeout.
	DrainTimeout time.Duration
	// AllowedModels, when not empty, are the provider/model patterns a job
	// may call ("*" matches any run of characters, "/" included); a call
	// for any other model is refused before it is forwarded.
	AllowedModels []string
}

// Gateway makes one Session per job. Safe for concurrent use.
type Gateway struct {
	cfg       Config
	upstreams map[string]*url.URL
	fallback  *url.URL
	proxy     *httputil.ReverseProxy
	log       *slog.Logger
}

var _ dispatch.ModelGateway = (*Gateway)(nil)

// ErrConfig is a Config New refuses.
var ErrConfig = errors.New("gateway config")

// New checks cfg and builds the gateway.
func New(cfg Config) (*Gateway, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	g := &Gateway{cfg: cfg, upstreams: map[string]*url.URL{}, log: cfg.Logger.With("host", cfg.Host)}
	if err := g.parseUpstreams(); err != nil {
		return nil, err
	}
	g.proxy = &httputil.ReverseProxy{
		Rewrite:        rewrite,
		Transport:      cfg.Transport,
		FlushInterval:  -1,
		BufferPool:     bufferPool{},
		ModifyResponse: g.modifyResponse,
		ErrorHandler:   g.upstreamFailed,
		ErrorLog:       slog.NewLogLogger(g.log.Handler(), slog.LevelWarn),
	}
	return g, nil
}

// check refuses the settings New cannot apply: negative bounds, a model pattern without its provider.
func (cfg Config) check() error {
	if cfg.RateLimitWait < 0 {
		return fmt.Errorf("%w: RateLimitWait must not be negative", ErrConfig)
	}
	if cfg.MaxCalls < 0 || cfg.MaxBodyBytes < 0 || cfg.BodyTimeout < 0 || cfg.DrainTimeout < 0 {
		return fmt.Errorf("%w: MaxCalls, MaxBodyBytes, BodyTimeout and DrainTimeout must not be negative", ErrConfig)
	}
	for _, p := range cfg.AllowedModels {
		if provider, model, ok := strings.Cut(p, "/"); !ok || provider == "" || model == "" {
			return fmt.Errorf("%w: AllowedModels: %q must be provider/model", ErrConfig, p)
		}
	}
	return nil
}

// withDefaults fills the settings cfg leaves zero, so the gateway never checks for them.
func (cfg Config) withDefaults() Config {
	cfg.RateLimitWait = cmp.Or(cfg.RateLimitWait, DefaultRateLimitWait)
	cfg.MaxCalls = cmp.Or(cfg.MaxCalls, DefaultMaxCalls)
	cfg.MaxBodyBytes = cmp.Or(cfg.MaxBodyBytes, DefaultMaxBodyBytes)
	cfg.BodyTimeout = cmp.Or(cfg.BodyTimeout, DefaultBodyTimeout)
	cfg.DrainTimeout = cmp.Or(cfg.DrainTimeout, DefaultDrainTimeout)
	if cfg.Pricing == nil {
		cfg.Pricing = DefaultPricing()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Transport == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.ReadBufferSize, t.WriteBufferSize = copyBuffer, 64<<10
		cfg.Transport = t
	}
	return cfg
}

// parseUpstreams reads the base URLs, the known ones overridden by Upstreams, and the fallback's.
func (g *Gateway) parseUpstreams() error {
	all := map[string]string{}
	for p, u := range knownUpstreams {
		all[p] = u
	}
	for p, u := range g.cfg.Upstreams {
		if !jobs.ValidProvider(p) {
			return fmt.Errorf("%w: Upstreams: provider %q must be 1 to %d lowercase letters, digits and dashes", ErrConfig, p, jobs.MaxProviderBytes)
		}
		all[p] = u
	}
	for p, raw := range all {
		u, err := baseURL(raw)
		if err != nil {
			return fmt.Errorf("%w: Upstreams[%q]: %w", ErrConfig, p, err)
		}
		g.upstreams[p] = u
	}
	if g.cfg.Fallback != "" {
		u, err := baseURL(g.cfg.Fallback)
		if err != nil {
			return fmt.Errorf("%w: Fallback: %w", ErrConfig, err)
		}
		g.fallback = u
	}
	return nil
}

func baseURL(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" {
		return nil, fmt.Errorf("%q must be an http:// or https:// base URL without a query", raw)
	}
	return u, nil
}

// upstream is provider's base URL; nil when the gateway has none.
func (g *Gateway) upstream(provider string) *url.URL {
	if u, ok := g.upstreams[provider]; ok {
		return u
	}
	return g.fallback
}

// Job is the session that serves one job's calls.
func (g *Gateway) Job(ctx context.Context, j dispatch.GatewayJob) dispatch.GatewaySession {
	return g.Session(ctx, j)
}

// Session is Job with its concrete type.
func (g *Gateway) Session(ctx context.Context, j dispatch.GatewayJob) *Session {
	keys := make(map[string]string, len(j.Keys))
	for p, k := range j.Keys {
		keys[p] = k
	}
	j.Keys = keys
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	return &Session{g: g, job: j, ctx: ctx, cancel: cancel, unpriced: map[string]bool{}, slots: make(chan struct{}, g.cfg.MaxCalls),
		log: g.log.With("job", j.JobID, "attempt", j.Attempt)}
}

type bufferPool struct{}

var buffers = sync.Pool{New: func() any { b := make([]byte, copyBuffer); return &b }}

func (bufferPool) Get() []byte { return *buffers.Get().(*[]byte) }
func (bufferPool) Put(b []byte) {
	if cap(b) == copyBuffer {
		buffers.Put(&b)
	}
}

type callKey struct{}

func callOf(ctx context.Context) *call {
	c, _ := ctx.Value(callKey{}).(*call)
	return c
}

// shownModel is model as a log line, a record, a span or a transcript may
// name it. The job chooses the name it sends, so it may carry a secret its
// profile gave it: only a model the host's own configuration names exactly
// (the price table, or an AllowedModels entry without a wildcard) is
// shown as it is; any other is "model-" and the first 12 hex digits of its
// SHA-256, enough to tell two apart and never the name.
func (g *Gateway) shownModel(provider, model string) string {
	if model == "" {
		return ""
	}
	if jobrule.ShownName(model) {
		if g.cfg.Pricing != nil {
			if _, ok := g.cfg.Pricing.prices[provider+"/"+model]; ok {
				return model
			}
		}
		if slices.Contains(g.cfg.AllowedModels, provider+"/"+model) {
			return model
		}
	}
	sum := sha256.Sum256([]byte(model))
	return "model-" + hex.EncodeToString(sum[:6])
}

// modelAllowed reports whether AllowedModels lets a job call model.
func (g *Gateway) modelAllowed(provider, model string) bool {
	if len(g.cfg.AllowedModels) == 0 {
		return true
	}
	for _, p := range g.cfg.AllowedModels {
		if glob(p, provider+"/"+model) {
			return true
		}
	}
	return false
}

// glob matches s against pattern, whose "*" matches any run of characters.
func glob(pattern, s string) bool {
	first, rest, star := strings.Cut(pattern, "*")
	if !star {
		return pattern == s
	}
	if !strings.HasPrefix(s, first) {
		return false
	}
	s = s[len(first):]
	for i := 0; i <= len(s); i++ {
		if glob(rest, s[i:]) {
			return true
		}
	}
	return false
}

// forwardHeaders are the only request headers a job's call carries to its
// provider: what the APIs need to read the request, by provider ("" for
// every provider). Every other header (a credential of any name or case
// among them) stays behind.
var forwardHeaders = map[string][]string{
	"":           {"Content-Type", "Accept", "User-Agent"},
	"anthropic":  {"Anthropic-Version", "Anthropic-Beta"},
	"openai":     {"Openai-Beta"},
	"openrouter": {"Http-Referer", "X-Title"},
}

// rewrite points the request at the provider, forwards only the headers
// the provider needs, and adds the job's key.
func rewrite(r *httputil.ProxyRequest) {
	c := callOf(r.In.Context())
	out := *c.base
	out.Path = strings.TrimRight(c.base.Path, "/") + "/" + c.rest
	out.RawPath = ""
	out.RawQuery = r.In.URL.RawQuery
	r.Out.URL = &out
	r.Out.Host = ""
	// The meter reads the body: no Accept-Encoding, so the transport asks
	// for (and undoes) the compression rather than pass an encoded body.
	h := make(http.Header, 4)
	for _, p := range []string{"", c.provider} {
		for _, name := range forwardHeaders[p] {
			if v := r.In.Header.Values(name); len(v) > 0 {
				h[name] = slices.Clone(v)
			}
		}
	}
	if c.provider == "anthropic" {
		h.Set("x-api-key", c.key)
	} else {
		h.Set("Authorization", "Bearer "+c.key)
	}
	r.Out.Header = h
}

func (g *Gateway) modifyResponse(resp *http.Response) error {
	c := callOf(resp.Request.Context())
	c.status = resp.StatusCode
	if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == 529 {
		c.s.noteRateLimit(resp, c.provider)
	}
	c.meter.sse = strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream")
	resp.Body = &meterBody{rc: resp.Body, c: c, length: resp.ContentLength}
	return nil
}

func (g *Gateway) upstreamFailed(w http.ResponseWriter, r *http.Request, err error) {
	c := callOf(r.Context())
	var op *net.OpError
	c.notSent = errors.As(err, &op) && op.Op == "dial"
	c.finish(false)
	switch {
	case c.s.ctx.Err() != nil:
		writeError(w, shapeOf(c.provider), failClosed, "pidispatch: the job's model session is closed")
		return
	case r.Context().Err() != nil:
		return // the container went away
	}
	c.s.log.Warn("model_upstream_failed", "provider", c.provider, "model", c.shown, "err", err)
	writeError(w, shapeOf(c.provider), failUpstream, "pidispatch: the provider could not be reached")
}
