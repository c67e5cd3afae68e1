package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/pidispatch/pidispatch/dispatch"
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

// MaxRequestBytes bounds a model call's request body, which the gateway
// reads whole to learn the model and estimate the call.
const MaxRequestBytes = 32 << 20

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
	if cfg.RateLimitWait < 0 {
		return nil, fmt.Errorf("%w: RateLimitWait must not be negative", ErrConfig)
	}
	if cfg.RateLimitWait == 0 {
		cfg.RateLimitWait = DefaultRateLimitWait
	}
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
	g := &Gateway{cfg: cfg, upstreams: map[string]*url.URL{}, log: cfg.Logger.With("host", cfg.Host)}
	all := map[string]string{}
	for p, u := range knownUpstreams {
		all[p] = u
	}
	for p, u := range cfg.Upstreams {
		if !jobs.ValidProvider(p) {
			return nil, fmt.Errorf("%w: Upstreams: provider %q must be 1 to %d lowercase letters, digits and dashes", ErrConfig, p, jobs.MaxProviderBytes)
		}
		all[p] = u
	}
	for p, raw := range all {
		u, err := baseURL(raw)
		if err != nil {
			return nil, fmt.Errorf("%w: Upstreams[%q]: %w", ErrConfig, p, err)
		}
		g.upstreams[p] = u
	}
	if cfg.Fallback != "" {
		u, err := baseURL(cfg.Fallback)
		if err != nil {
			return nil, fmt.Errorf("%w: Fallback: %w", ErrConfig, err)
		}
		g.fallback = u
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
func (g *Gateway) Job(j dispatch.GatewayJob) dispatch.GatewaySession { return g.Session(j) }

// Session is Job with its concrete type.
func (g *Gateway) Session(j dispatch.GatewayJob) *Session {
	keys := make(map[string]string, len(j.Keys))
	for p, k := range j.Keys {
		keys[p] = k
	}
	j.Keys = keys
	ctx, cancel := context.WithCancel(context.Background())
	return &Session{g: g, job: j, ctx: ctx, cancel: cancel, unpriced: map[string]bool{},
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

// rewrite points the request at the provider and puts the job's key in
// place of whatever the container sent.
func rewrite(r *httputil.ProxyRequest) {
	c := callOf(r.In.Context())
	out := *c.base
	out.Path = strings.TrimRight(c.base.Path, "/") + "/" + c.rest
	out.RawPath = ""
	out.RawQuery = r.In.URL.RawQuery
	r.Out.URL = &out
	r.Out.Host = ""
	h := r.Out.Header
	h.Del("x-api-key")
	h.Del("Authorization")
	// The meter reads the body: let the transport ask for (and undo) the
	// compression, rather than pass an encoded body it cannot read.
	h.Del("Accept-Encoding")
	if c.provider == "anthropic" {
		h.Set("x-api-key", c.key)
	} else {
		h.Set("Authorization", "Bearer "+c.key)
	}
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
	c.finish(false)
	switch {
	case c.s.ctx.Err() != nil:
		writeError(w, shapeOf(c.provider), failClosed, "pidispatch: the job's model session is closed")
		return
	case r.Context().Err() != nil:
		return // the container went away
	}
	c.s.log.Warn("model_upstream_failed", "provider", c.provider, "model", c.model, "err", err)
	writeError(w, shapeOf(c.provider), failUpstream, "pidispatch: the provider could not be reached")
}
