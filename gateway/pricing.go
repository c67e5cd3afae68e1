package gateway

import (
	"bufio"
	"bytes"
	_ "embed"
	"fmt"
	"io"
	"math/bits"
	"os"
	"strings"

	"github.com/pidispatch/pidispatch/jobs"
)

//go:embed pricing.txt
var defaultPricing []byte

// AnyModel, as a pricing line's model, prices every model of its provider
// that no line of its own names.
const AnyModel = "*"

// Usage is one model call's tokens, in the gateway's terms: Input excludes
// the cached tokens, which are CacheRead (read from the provider's prompt
// cache) and CacheWrite (written to it).
type Usage struct {
	Input, Output, CacheRead, CacheWrite int64
}

// Total is every token of the call.
func (u Usage) Total() int64 { return u.Input + u.Output + u.CacheRead + u.CacheWrite }

// Price is one model's prices, in micro-dollars per million tokens (which
// is the same number as pico-dollars per token).
type Price struct {
	Input, Output, CacheRead, CacheWrite int64
}

// Pricing is a table of model prices by provider and model. A nil or empty
// table prices nothing. It is read-only once built, so safe to share.
type Pricing struct {
	prices map[string]Price // "provider/model"
}

// DefaultPricing is the built-in table (gateway/pricing.txt): the models
// the pi coding agent knows for anthropic, openai and openrouter.
func DefaultPricing() *Pricing {
	p, err := ParsePricing(bytes.NewReader(defaultPricing))
	if err != nil {
		panic("gateway: the built-in pricing.txt is invalid: " + err.Error())
	}
	return p
}

// LoadPricing is the built-in table with the file at path merged over it;
// the built-in table alone when path is empty.
func LoadPricing(path string) (*Pricing, error) {
	if path == "" {
		return DefaultPricing(), nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("pricing file: %w", err)
	}
	defer f.Close()
	over, err := ParsePricing(f)
	if err != nil {
		return nil, fmt.Errorf("pricing file %s: %w", path, err)
	}
	return DefaultPricing().Merge(over), nil
}

// ParsePricing reads the pricing line format (see the package doc): one
// model a line, "provider model input output cacheRead cacheWrite" in
// dollars per million tokens, "#" comments and blank lines ignored. An
// error names the line and the rule it breaks.
func ParsePricing(r io.Reader) (*Pricing, error) {
	p := &Pricing{prices: map[string]Price{}}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line, _, _ := strings.Cut(sc.Text(), "#")
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		key, price, err := parsePriceLine(fields)
		if err != nil {
			return nil, fmt.Errorf("pricing line %d: %w", n, err)
		}
		if _, dup := p.prices[key]; dup {
			return nil, fmt.Errorf("pricing line %d: %s is priced twice", n, key)
		}
		p.prices[key] = price
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("pricing: %w", err)
	}
	return p, nil
}

func parsePriceLine(fields []string) (string, Price, error) {
	if len(fields) != 6 {
		return "", Price{}, fmt.Errorf("want 6 fields (provider model input output cacheRead cacheWrite), got %d", len(fields))
	}
	provider, model := fields[0], fields[1]
	if strings.Contains(provider, "/") {
		return "", Price{}, fmt.Errorf("provider %q must not contain /", provider)
	}
	var v [4]int64
	names := [4]string{"input", "output", "cacheRead", "cacheWrite"}
	for i, s := range fields[2:] {
		m, err := jobs.ParseUSD(s)
		if err != nil {
			return "", Price{}, fmt.Errorf("%s price %q: dollars per million tokens, plain digits with up to 6 decimals (\"3\", \"0.075\")", names[i], s)
		}
		v[i] = m
	}
	return provider + "/" + model, Price{v[0], v[1], v[2], v[3]}, nil
}

// Merge is a new table: p's prices with over's added, over winning where
// both price a model. Either may be nil.
func (p *Pricing) Merge(over *Pricing) *Pricing {
	out := &Pricing{prices: map[string]Price{}}
	for _, t := range []*Pricing{p, over} {
		if t == nil {
			continue
		}
		for k, v := range t.prices {
			out.prices[k] = v
		}
	}
	return out
}

// Len is the number of priced lines.
func (p *Pricing) Len() int {
	if p == nil {
		return 0
	}
	return len(p.prices)
}

func (p *Pricing) lookup(provider, model string) (Price, bool) {
	if p == nil {
		return Price{}, false
	}
	if v, ok := p.prices[provider+"/"+model]; ok && model != "" {
		return v, true
	}
	v, ok := p.prices[provider+"/"+AnyModel]
	return v, ok
}

// Covers reports whether the table prices provider's model.
func (p *Pricing) Covers(provider, model string) bool {
	_, ok := p.lookup(provider, model)
	return ok
}

// Price is what u costs on provider's model, in micro-dollars, rounded half
// up once for the whole call; priced is false (and micros 0) when the table
// does not know the model. The sum is exact: 128-bit integers.
func (p *Pricing) Price(provider, model string, u Usage) (micros int64, priced bool) {
	v, ok := p.lookup(provider, model)
	if !ok {
		return 0, false
	}
	return v.cost(u), true
}

// cost is Σ tokens × micros-per-million, over a million, rounded half up.
// Negative counts count as zero.
func (v Price) cost(u Usage) int64 {
	var hi, lo uint64
	for _, t := range [4][2]int64{{u.Input, v.Input}, {u.Output, v.Output}, {u.CacheRead, v.CacheRead}, {u.CacheWrite, v.CacheWrite}} {
		if t[0] <= 0 || t[1] <= 0 {
			continue
		}
		h, l := bits.Mul64(uint64(t[0]), uint64(t[1]))
		var c uint64
		lo, c = bits.Add64(lo, l, 0)
		hi += h + c
	}
	var c uint64
	lo, c = bits.Add64(lo, 500_000, 0)
	hi += c
	if hi >= 1_000_000 {
		return 1<<63 - 1 // beyond any cap: saturate
	}
	q, _ := bits.Div64(hi, lo, 1_000_000)
	if q > 1<<63-1 {
		return 1<<63 - 1
	}
	return int64(q)
}
