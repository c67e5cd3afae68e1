package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/jobs"
)

// Session serves one job's model calls and keeps its spend. Safe for
// concurrent use.
type Session struct {
	g      *Gateway
	job    dispatch.GatewayJob
	ctx    context.Context // ended by Close
	cancel context.CancelFunc
	log    *slog.Logger

	mu         sync.Mutex
	calls      int
	refused    int
	tokens     Usage
	micros     int64
	estimated  bool
	unpriced   map[string]bool
	capHit     string
	prev       Usage // the last settled call's usage
	heldMicros int64 // estimates of the calls in flight
	heldTokens int64
	rlWarned   bool
}

var _ dispatch.GatewaySession = (*Session)(nil)

// call is one forwarded model call.
type call struct {
	s          *Session
	provider   string
	model      string
	key        string
	base       *url.URL
	rest       string
	reqBytes   int
	heldMicros int64
	heldTokens int64
	status     int
	meter      meter
	once       sync.Once
	start      time.Time // when the call reached the gateway (hook.go)
}

// ServeHTTP forwards one call: /<provider>/<rest> to the provider's base
// URL + /<rest>, with the job's key, if the job's caps and the provider's
// rate limit allow it.
func (s *Session) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	provider, rest, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
	shape := shapeOf(provider)
	base := s.g.upstream(provider)
	switch {
	case provider == "" || base == nil:
		writeError(w, shape, failUnknown, "pidispatch: no upstream for provider "+quote(provider)+" (the path starts with the provider: /anthropic/v1/messages)")
		return
	case strings.Contains("/"+rest+"/", "/../"):
		writeError(w, shape, failUnknown, "pidispatch: a model path must not hold a .. segment")
		return
	case s.job.Keys[provider] == "":
		writeError(w, shape, failNoKey, "pidispatch: this host holds no key for provider "+quote(provider))
		return
	case s.ctx.Err() != nil:
		writeError(w, shape, failClosed, "pidispatch: the job's model session is closed")
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, MaxRequestBytes+1))
	if err != nil {
		return // the container went away
	}
	if len(body) > MaxRequestBytes {
		writeError(w, shape, failTooLarge, "pidispatch: a model request is limited to 32 MiB")
		return
	}
	c := &call{s: s, provider: provider, model: requestModel(body), key: s.job.Keys[provider], base: base, rest: rest, reqBytes: len(body)}
	c.start = s.g.cfg.Now()
	if s.refuseAtCap(w, c) || !s.rateGate(w, r, c) || s.admit(w, c) {
		return
	}
	defer c.finish(false) // settles a call the proxy ended without a response
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	defer context.AfterFunc(s.ctx, cancel)()
	r = r.WithContext(context.WithValue(ctx, callKey{}, c))
	r.Body, r.ContentLength, r.TransferEncoding = http.NoBody, 0, nil
	if len(body) > 0 {
		r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
	}
	s.g.proxy.ServeHTTP(w, r)
}

func quote(s string) string { b, _ := json.Marshal(s); return string(b) }

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// requestModel is the request's "model", if it is JSON with one.
func requestModel(body []byte) string {
	var v struct {
		Model string `json:"model"`
	}
	if json.Unmarshal(body, &v) != nil {
		return ""
	}
	return v.Model
}

// refuseAtCap answers a call after a cap was hit: every later call is
// refused too.
func (s *Session) refuseAtCap(w http.ResponseWriter, c *call) bool {
	s.mu.Lock()
	hit := s.capHit
	if hit == "" {
		s.mu.Unlock()
		return false
	}
	s.refused++
	msg := s.capMessage(hit, c)
	s.mu.Unlock()
	s.refuse(w, c, hit, msg)
	return true
}

// estimate is the next call's expected usage (see the package doc): the
// larger of its request bytes/4 and the last call's whole input, and the
// last call's output.
func (s *Session) estimate(reqBytes int) Usage {
	in := max(int64(reqBytes)/4, s.prev.Input+s.prev.CacheRead+s.prev.CacheWrite)
	return Usage{Input: in, Output: s.prev.Output}
}

// admit checks the call's estimate against the caps and holds it while the
// call runs; it answers (and reports true) when a cap refuses.
func (s *Session) admit(w http.ResponseWriter, c *call) (refused bool) {
	s.mu.Lock()
	est := s.estimate(c.reqBytes)
	var hit string
	if s.job.MaxMicros > 0 {
		price, ok := s.g.cfg.Pricing.lookup(c.provider, c.model)
		c.heldMicros = price.cost(est)
		if !ok || s.micros+s.heldMicros+c.heldMicros > s.job.MaxMicros {
			hit = jobs.ReasonCostCap
		}
	}
	c.heldTokens = est.Total()
	if hit == "" && s.job.MaxTokens > 0 && s.tokens.Total()+s.heldTokens+c.heldTokens > s.job.MaxTokens {
		hit = jobs.ReasonTokenCap
	}
	if hit != "" {
		s.capHit = hit
		s.refused++
		msg := s.capMessage(hit, c)
		s.mu.Unlock()
		s.refuse(w, c, hit, msg)
		return true
	}
	s.calls++
	s.heldMicros += c.heldMicros
	s.heldTokens += c.heldTokens
	s.mu.Unlock()
	return false
}

// capMessage is the refusal's text; s.mu is held.
func (s *Session) capMessage(hit string, c *call) string {
	switch {
	case hit == jobs.ReasonTokenCap:
		return "pidispatch: job token cap of " + itoa(s.job.MaxTokens) + " tokens reached (used " + itoa(s.tokens.Total()) + ")"
	case !s.g.cfg.Pricing.Covers(c.provider, c.model):
		return "pidispatch: job cost cap of $" + jobs.FormatUSD(s.job.MaxMicros) + " cannot be checked: model " +
			quote(c.provider+"/"+c.model) + " has no price (add it to the pricing file)"
	default:
		return "pidispatch: job cost cap of $" + jobs.FormatUSD(s.job.MaxMicros) + " reached (spent $" + jobs.FormatUSD(s.micros) + ")"
	}
}

func (s *Session) refuse(w http.ResponseWriter, c *call, hit, msg string) {
	s.log.Info("model_call_refused", "provider", c.provider, "model", c.model, "reason", hit)
	f := failCostCap
	if hit == jobs.ReasonTokenCap {
		f = failTokenCap
	}
	writeError(w, shapeOf(c.provider), f, msg)
}

// finish settles the call once: its usage (or, for a successful call that
// reported none, the estimate from its bytes) is added to the job's spend.
func (c *call) finish(answered bool) {
	c.once.Do(func() {
		if answered {
			c.meter.finish()
		}
		c.s.settle(c, answered)
	})
}

func (s *Session) settle(c *call, answered bool) {
	m := &c.meter
	model := c.model
	if model == "" {
		model = m.model
	}
	u, ok := m.usage, c.status >= 200 && c.status < 300
	estimated := answered && ok && !m.saw
	if estimated {
		u = Usage{Input: int64(c.reqBytes) / 4, Output: m.bytes / 4}
	}
	micros, priced := s.g.cfg.Pricing.Price(c.provider, model, u)
	s.mu.Lock()
	s.heldMicros -= c.heldMicros
	s.heldTokens -= c.heldTokens
	s.tokens = Usage{s.tokens.Input + u.Input, s.tokens.Output + u.Output, s.tokens.CacheRead + u.CacheRead, s.tokens.CacheWrite + u.CacheWrite}
	s.micros += micros
	s.estimated = s.estimated || estimated
	if !priced && (ok || u.Total() > 0) {
		s.unpriced[c.provider+"/"+model] = true
	}
	if u.Total() > 0 {
		s.prev = u
	}
	s.mu.Unlock()
	s.log.Info("model_call", "provider", c.provider, "model", model, "status", c.status, "input", u.Input, "output", u.Output,
		"cacheRead", u.CacheRead, "cacheWrite", u.CacheWrite, "micros", micros, "priced", priced, "estimated", estimated)
	s.callDone(c, model, u, micros, priced, estimated)
}

// Spend is what the job spent so far.
func (s *Session) Spend() jobs.Spend {
	s.mu.Lock()
	defer s.mu.Unlock()
	sp := jobs.Spend{
		Dollars: jobs.USD(s.micros), Micros: s.micros, Basis: jobs.BasisMetered,
		Calls: s.calls, Refused: s.refused, CapHit: s.capHit,
		Tokens: jobs.SpendTokens{Input: s.tokens.Input, Output: s.tokens.Output, CacheRead: s.tokens.CacheRead, CacheWrite: s.tokens.CacheWrite},
	}
	if s.estimated {
		sp.Basis = jobs.BasisEstimated
	}
	for k := range s.unpriced {
		sp.Unpriced = append(sp.Unpriced, k)
	}
	slices.Sort(sp.Unpriced)
	return sp
}

// Close ends the calls in flight, a call waiting for a rate limit among
// them, and refuses later ones; Spend stays readable.
func (s *Session) Close() { s.cancel() }
