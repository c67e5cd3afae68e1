package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"math"
	"net"
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
	slots  chan struct{} // one per call in flight, MaxCalls deep

	mu         sync.Mutex
	calls      int
	refused    int
	tokens     Usage
	micros     int64
	estimated  bool
	unpriced   map[string]bool
	models     []jobs.ModelSpend // by provider and shown model, first called first, at most maxModels
	capHit     jobs.Reason
	overshoot  int64
	heldMicros int64 // reservations of the calls in flight
	heldTokens int64
	rlWarned   bool
	open       int // calls admitted and not settled
}

var _ dispatch.GatewaySession = (*Session)(nil)

// call is one forwarded model call.
type call struct {
	s        *Session
	provider string
	model    string
	// shown is model as logs, records and events may name it (shownModel).
	shown    string
	key      string
	base     *url.URL
	rest     string
	reqBytes int
	// reserved is true when the call holds a worst-case reservation
	// (heldMicros, heldTokens): the job has a cap.
	reserved   bool
	heldMicros int64
	heldTokens int64
	inBound    int64
	outBound   int64
	status     int
	notSent    bool // the upstream could not be dialled
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
	base, ok := s.route(w, provider, rest, shape)
	if !ok || !s.takeSlot(w, provider, shape) {
		return
	}
	defer func() { <-s.slots }()
	body, ok := s.readBody(w, r, shape)
	if !ok {
		return
	}
	c := &call{s: s, provider: provider, key: s.job.Keys[provider], base: base, rest: rest, reqBytes: len(body)}
	c.start = s.g.cfg.Now()
	info, ok := s.checkRequest(w, c, body)
	if !ok || s.refuseAtCap(w, c) || !s.rateGate(w, r, c) {
		return
	}
	send, ok := s.admit(w, c, body, info)
	if !ok {
		return
	}
	defer c.finish(false) // settles a call the proxy ended without a response
	s.forward(w, r, c, send)
}

// route is the provider's base URL; it answers (and reports false) a call the session cannot forward.
func (s *Session) route(w http.ResponseWriter, provider, rest, shape string) (*url.URL, bool) {
	base := s.g.upstream(provider)
	switch {
	case provider == "" || base == nil:
		writeError(w, shape, failUnknown, "pidispatch: no upstream for provider "+quote(provider)+" (the path starts with the provider: /anthropic/v1/messages)")
	case strings.Contains("/"+rest+"/", "/../"):
		writeError(w, shape, failUnknown, "pidispatch: a model path must not hold a .. segment")
	case s.job.Keys[provider] == "":
		writeError(w, shape, failNoKey, "pidispatch: this host holds no key for provider "+quote(provider))
	case s.ctx.Err() != nil:
		writeError(w, shape, failClosed, "pidispatch: the job's model session is closed")
	default:
		return base, true
	}
	return nil, false
}

// takeSlot takes one of the job's MaxCalls slots, or answers 429 (and reports false): the caller gives it back.
func (s *Session) takeSlot(w http.ResponseWriter, provider, shape string) bool {
	select {
	case s.slots <- struct{}{}:
		return true
	default:
	}
	s.mu.Lock()
	s.refused++
	s.mu.Unlock()
	s.log.Info("model_call_refused", "provider", provider, "reason", "too-many-calls", "maxCalls", cap(s.slots))
	w.Header().Set("retry-after", "1")
	writeError(w, shape, failTooMany, "pidispatch: at most "+strconv.Itoa(cap(s.slots))+" model calls of a job run at once; retry when one ends")
	return false
}

// checkRequest reads the call's model, refusing a body it must read and cannot, or a model the host does not allow.
func (s *Session) checkRequest(w http.ResponseWriter, c *call, body []byte) (reqInfo, bool) {
	var info reqInfo
	if len(body) > 0 {
		var err error
		if info, err = parseRequest(body); err != nil && (s.capped() || len(s.g.cfg.AllowedModels) > 0) {
			s.refuseCall(w, c, "bad-request", failBadRequest, "pidispatch: "+err.Error())
			return info, false
		}
		c.model = info.model
		c.shown = s.g.shownModel(c.provider, c.model)
	}
	if len(body) > 0 && !s.g.modelAllowed(c.provider, c.model) {
		s.refuseCall(w, c, "model-not-allowed", failModelNotAllowed, "pidispatch: model "+quote(c.provider+"/"+c.shown)+" is not allowed on this host (PI_ALLOWED_MODELS)")
		return info, false
	}
	return info, true
}

// forward sends the admitted call upstream with send as its body, through the proxy that meters the answer.
func (s *Session) forward(w http.ResponseWriter, r *http.Request, c *call, send net.Buffers) {
	ctx, end := s.callContext(r)
	defer end()
	r = r.WithContext(context.WithValue(ctx, callKey{}, c))
	r.Body, r.ContentLength, r.TransferEncoding = http.NoBody, 0, nil
	if n := buffersLen(send); n > 0 {
		r.Body, r.ContentLength = io.NopCloser(&send), n
	}
	s.g.proxy.ServeHTTP(w, r)
}

// callContext is the upstream call's context, which outlives the container's connection; end releases it.
func (s *Session) callContext(r *http.Request) (ctx context.Context, end func()) {
	// When the container hangs up mid-answer, the gateway reads the rest
	// (for at most DrainTimeout) to learn what the provider billed. Close
	// ends it.
	ctx, cancel := context.WithCancel(context.WithoutCancel(r.Context()))
	stopOnClose := context.AfterFunc(s.ctx, cancel)
	var dmu sync.Mutex
	var drain *time.Timer
	stopOnHangUp := context.AfterFunc(r.Context(), func() {
		dmu.Lock()
		drain = time.AfterFunc(s.g.cfg.DrainTimeout, cancel)
		dmu.Unlock()
	})
	return ctx, func() {
		dmu.Lock()
		if drain != nil {
			drain.Stop()
		}
		dmu.Unlock()
		stopOnHangUp()
		stopOnClose()
		cancel()
	}
}

func buffersLen(b net.Buffers) int64 {
	n := 0
	for _, p := range b {
		n += len(p)
	}
	return int64(n)
}

// readBody reads the request body whole, within MaxBodyBytes and
// BodyTimeout; it answers (and reports false) when it cannot.
func (s *Session) readBody(w http.ResponseWriter, r *http.Request, shape string) ([]byte, bool) {
	limit := s.g.cfg.MaxBodyBytes
	if r.ContentLength > limit {
		writeError(w, shape, failTooLarge, "pidispatch: a model request is limited to "+itoa(limit)+" bytes")
		return nil, false
	}
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Now().Add(s.g.cfg.BodyTimeout))
	defer func() { _ = rc.SetReadDeadline(time.Time{}) }()
	buf := bytes.NewBuffer(make([]byte, 0, max(r.ContentLength, 0)+1))
	if _, err := buf.ReadFrom(io.LimitReader(r.Body, limit+1)); err != nil {
		return nil, false // the container went away, or took too long
	}
	if int64(buf.Len()) > limit {
		writeError(w, shape, failTooLarge, "pidispatch: a model request is limited to "+itoa(limit)+" bytes")
		return nil, false
	}
	return buf.Bytes(), true
}

func quote(s string) string { b, _ := json.Marshal(s); return string(b) }

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// capped reports whether the job has a dollar or token cap.
func (s *Session) capped() bool { return s.job.MaxMicros > 0 || s.job.MaxTokens > 0 }

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

// refuseCall answers one call the gateway will not forward (the job goes
// on: the agent may send another).
func (s *Session) refuseCall(w http.ResponseWriter, c *call, reason string, f failure, msg string) {
	s.mu.Lock()
	s.refused++
	s.mu.Unlock()
	s.log.Info("model_call_refused", "provider", c.provider, "model", c.shown, "reason", reason)
	writeError(w, shapeOf(c.provider), f, msg)
}

// admit reserves the call's worst case against the job's caps (see the
// package doc): its input bound, and its output bound lowered to what the
// caps afford. It returns the body to forward, or answers and reports
// false when the call cannot be afforded.
func (s *Session) admit(w http.ResponseWriter, c *call, body []byte, info reqInfo) (net.Buffers, bool) {
	if !s.capped() || len(body) == 0 {
		s.admitUncapped(c, body, info)
		return net.Buffers{body}, true
	}
	if info.unbounded != "" {
		s.refuseCall(w, c, "unbounded", failBadRequest, "pidispatch: a job with a spending cap cannot use "+info.unbounded+
			": the provider adds input the request does not carry, so its cost cannot be bounded")
		return nil, false
	}
	price, priced := s.g.cfg.Pricing.lookup(c.provider, c.model)
	bound := Price{Input: max(price.Input, price.CacheRead, price.CacheWrite), Output: price.Output}
	in := info.inputBound(len(body))
	info.readBound(body)
	free := strings.HasSuffix(c.rest, "count_tokens")

	s.mu.Lock()
	out, hit := s.plan(bound, priced, in, info, free, s.heldMicros, s.heldTokens)
	if hit != "" && (s.heldMicros > 0 || s.heldTokens > 0) {
		if _, alone := s.plan(bound, priced, in, info, free, 0, 0); alone == "" {
			// It fits once the calls in flight settle: not the job's cap.
			s.refused++
			s.mu.Unlock()
			s.log.Info("model_call_refused", "provider", c.provider, "model", c.shown, "reason", "calls-in-flight")
			w.Header().Set("retry-after", "1")
			writeError(w, shapeOf(c.provider), failTooMany, "pidispatch: the job's calls in flight hold what is left of its cap; retry when one ends")
			return nil, false
		}
	}
	want := info.out
	if hit != "" {
		s.capHit = hit
		s.refused++
		msg := s.capMessage(hit, c)
		s.mu.Unlock()
		s.refuse(w, c, hit, msg)
		return nil, false
	}
	c.reserved, c.inBound, c.outBound = true, in, out*info.n
	c.heldTokens = in + c.outBound
	if s.job.MaxMicros > 0 {
		c.heldMicros = bound.cost(Usage{Input: in, Output: c.outBound})
	}
	s.calls++
	s.open++
	s.heldMicros += c.heldMicros
	s.heldTokens += c.heldTokens
	s.mu.Unlock()
	if out != want && !free {
		s.log.Info("model_call_bounded", "provider", c.provider, "model", c.shown, "asked", want, "bound", out)
		return withBound(body, info, boundField(c.provider, c.rest), out), true
	}
	return net.Buffers{body}, true
}

// admitUncapped admits a call of a job without caps. Nothing is enforced,
// but a call whose worst case the request bounds still holds it: a call cut
// mid-answer (the job stopped, its worker stopping) then settles at that
// worst case, never at less than the provider billed.
func (s *Session) admitUncapped(c *call, body []byte, info reqInfo) {
	var in, out, micros int64
	if len(body) > 0 && info.unbounded == "" {
		info.readBound(body)
		if price, priced := s.g.cfg.Pricing.lookup(c.provider, c.model); priced && info.out >= 0 {
			bound := Price{Input: max(price.Input, price.CacheRead, price.CacheWrite), Output: price.Output}
			in, out = info.inputBound(len(body)), info.out*info.n
			micros = bound.cost(Usage{Input: in, Output: out})
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	s.open++
	if micros > 0 {
		c.reserved, c.inBound, c.outBound, c.heldMicros, c.heldTokens = true, in, out, micros, in+out
		s.heldMicros += micros
		s.heldTokens += c.heldTokens
	}
}

// plan is the output bound the caps afford the call with heldMicros and
// heldTokens in flight, or the cap that refuses it; s.mu is held.
func (s *Session) plan(bound Price, priced bool, in int64, info reqInfo, free bool, heldMicros, heldTokens int64) (out int64, hit jobs.Reason) {
	afford := int64(math.MaxInt64)
	if s.job.MaxMicros > 0 {
		left := s.job.MaxMicros - s.micros - heldMicros
		inCost := bound.cost(Usage{Input: in}) + 1
		switch {
		case !priced || inCost > left:
			return 0, jobs.ReasonCostCap
		case bound.Output > 0:
			afford = (left-inCost)/bound.Output*1_000_000 + (left-inCost)%bound.Output*1_000_000/bound.Output
		}
	}
	tokLeft := s.job.MaxTokens - s.tokens.Total() - heldTokens - in
	if s.job.MaxTokens > 0 {
		if tokLeft < 0 {
			return 0, jobs.ReasonTokenCap
		}
		afford = min(afford, tokLeft)
	}
	afford /= info.n
	want := info.out
	switch {
	case free:
		return 0, ""
	case want < 0:
		out = min(afford, DefaultOutputTokens)
	default:
		out = min(want, afford)
	}
	least := int64(MinOutputTokens)
	if want >= 0 {
		least = min(least, want)
	}
	if out < least {
		if s.job.MaxTokens > 0 && tokLeft/info.n < least {
			return 0, jobs.ReasonTokenCap
		}
		return 0, jobs.ReasonCostCap
	}
	return out, ""
}

// capMessage is the refusal's text; s.mu is held.
func (s *Session) capMessage(hit jobs.Reason, c *call) string {
	switch {
	case hit == jobs.ReasonTokenCap:
		return "pidispatch: job token cap of " + itoa(s.job.MaxTokens) + " tokens reached (used " + itoa(s.tokens.Total()) + ")"
	case !s.g.cfg.Pricing.Covers(c.provider, c.model):
		return "pidispatch: job cost cap of $" + jobs.FormatUSD(s.job.MaxMicros) + " cannot be checked: model " +
			quote(c.provider+"/"+c.shown) + " has no price (add it to the pricing file)"
	default:
		return "pidispatch: job cost cap of $" + jobs.FormatUSD(s.job.MaxMicros) + " reached (spent $" + jobs.FormatUSD(s.micros) + ")"
	}
}

func (s *Session) refuse(w http.ResponseWriter, c *call, hit jobs.Reason, msg string) {
	s.log.Info("model_call_refused", "provider", c.provider, "model", c.shown, "reason", hit)
	f := failCostCap
	if hit == jobs.ReasonTokenCap {
		f = failTokenCap
	}
	writeError(w, shapeOf(c.provider), f, msg)
}

// finish settles the call once: its usage (or, when that is unknown, its
// reservation) is added to the job's spend.
func (c *call) finish(answered bool) {
	c.once.Do(func() {
		if answered {
			c.meter.finish()
		}
		c.s.settle(c, answered)
	})
}

// settle replaces the call's reservation with what it cost. A call the
// provider answered with usage is metered. A successful answer without its
// closing usage (cut by a hang-up past DrainTimeout, or by Close), or a
// call sent and never answered, is charged its whole reservation, or
// without a cap the estimate of its bytes: a record never states less than
// the provider billed.
func (s *Session) settle(c *call, answered bool) {
	m := &c.meter
	model := c.model
	if model == "" {
		model = m.model
	}
	shown := s.g.shownModel(c.provider, model)
	ok := c.status >= 200 && c.status < 300
	u, known := m.usage, m.final
	price, priced := s.g.cfg.Pricing.lookup(c.provider, model)
	estimated := false
	var micros int64
	switch {
	case known || c.notSent || c.status >= 300:
		micros = price.cost(u)
	case c.reserved:
		u = Usage{Input: max(u.Input, c.inBound), Output: max(u.Output, c.outBound), CacheRead: u.CacheRead, CacheWrite: u.CacheWrite}
		micros, estimated = max(price.cost(u), c.heldMicros), true
	case ok && answered:
		u = Usage{Input: max(u.Input, int64(c.reqBytes)/4), Output: max(u.Output, m.bytes/4), CacheRead: u.CacheRead, CacheWrite: u.CacheWrite}
		micros, estimated = price.cost(u), true
	default:
		micros = price.cost(u)
	}
	if !priced {
		micros = 0
	}
	s.mu.Lock()
	s.open--
	s.heldMicros -= c.heldMicros
	s.heldTokens -= c.heldTokens
	s.tokens = Usage{s.tokens.Input + u.Input, s.tokens.Output + u.Output, s.tokens.CacheRead + u.CacheRead, s.tokens.CacheWrite + u.CacheWrite}
	s.micros += micros
	s.estimated = s.estimated || estimated
	if !priced && (ok || u.Total() > 0) {
		s.unpriced[c.provider+"/"+shown] = true
	}
	s.addModel(c.provider, shown, u, micros, !priced)
	over := c.reserved && (s.job.MaxMicros > 0 && micros > c.heldMicros || s.job.MaxTokens > 0 && u.Total() > c.heldTokens)
	if over {
		// The provider billed past the bound: stop the job's calls now.
		s.overshoot += max(micros-c.heldMicros, 0)
		s.capHit = jobs.ReasonCostCap
		if s.job.MaxMicros == 0 || micros <= c.heldMicros {
			s.capHit = jobs.ReasonTokenCap
		}
	}
	s.mu.Unlock()
	if over {
		s.log.Warn("model_call_overshoot", "provider", c.provider, "model", shown, "reservedMicros", c.heldMicros, "micros", micros,
			"reservedTokens", c.heldTokens, "tokens", u.Total())
	}
	s.log.Info("model_call", "provider", c.provider, "model", model, "status", c.status, "input", u.Input, "output", u.Output,
		"cacheRead", u.CacheRead, "cacheWrite", u.CacheWrite, "micros", micros, "priced", priced, "estimated", estimated)
	s.callDone(c, shown, u, micros, priced, estimated)
}

// maxModels bounds Spend.Models (as jobs.Record does): a job that calls
// more models keeps the first ones split; the totals still hold every call.
const maxModels = 16

// addModel adds one settled call to its provider and model's share, by the
// model's shown name (never the name as the job wrote it); s.mu is held.
func (s *Session) addModel(provider, shown string, u Usage, micros int64, unpriced bool) {
	i := slices.IndexFunc(s.models, func(m jobs.ModelSpend) bool { return m.Provider == provider && m.Model == shown })
	if i < 0 {
		if len(s.models) >= maxModels {
			return
		}
		s.models = append(s.models, jobs.ModelSpend{Provider: provider, Model: shown})
		i = len(s.models) - 1
	}
	m := &s.models[i]
	m.Calls++
	m.Micros += micros
	m.Tokens = jobs.SpendTokens{Input: m.Tokens.Input + u.Input, Output: m.Tokens.Output + u.Output,
		CacheRead: m.Tokens.CacheRead + u.CacheRead, CacheWrite: m.Tokens.CacheWrite + u.CacheWrite}
	m.Unpriced = m.Unpriced || unpriced
}

// inFlight is the number of calls admitted and not yet settled.
func (s *Session) inFlight() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.open
}

// Spend is what the job spent so far.
func (s *Session) Spend() jobs.Spend {
	s.mu.Lock()
	defer s.mu.Unlock()
	// A call in flight counts at its reservation until it settles.
	micros := s.micros + s.heldMicros
	sp := jobs.Spend{
		Dollars: jobs.USD(micros), Micros: micros, Basis: jobs.BasisMetered,
		Calls: s.calls, Refused: s.refused, CapHit: s.capHit, OvershootMicros: s.overshoot,
		Tokens: jobs.SpendTokens{Input: s.tokens.Input, Output: s.tokens.Output, CacheRead: s.tokens.CacheRead, CacheWrite: s.tokens.CacheWrite},
	}
	if s.estimated {
		sp.Basis = jobs.BasisEstimated
	}
	for k := range s.unpriced {
		sp.Unpriced = append(sp.Unpriced, k)
	}
	slices.Sort(sp.Unpriced)
	sp.Models = slices.Clone(s.models)
	return sp
}

// closeWait bounds how long Close waits for the calls it ended to settle.
const closeWait = 5 * time.Second

// Close ends the calls in flight, a call waiting for a rate limit among
// them, and refuses later ones. It waits (briefly) for the calls it ended
// to settle, each charged its reservation when its usage is unknown;
// Spend stays readable, a call still unsettled counted at its reservation.
func (s *Session) Close() {
	s.cancel()
	for deadline := time.Now().Add(closeWait); s.inFlight() > 0 && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
}
