package metrics

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// other stands for a label value past the cache's bound or not shaped like
// a name: series stay bounded whatever an event carries.
const other = "other"

// Bounds of the label caches: the gate, decision, outcome and reason
// values are fixed sets of the dispatch and jobs packages, far smaller.
const (
	maxLabelLen    = 64
	maxLabelValues = 256
)

// labelCache resolves the children of one vector once per label tuple, so
// Observe skips the vector's hashing and lock on the hot path, and caps how
// many children the vector may grow.
type labelCache struct {
	counters *prometheus.CounterVec
	gauges   *prometheus.GaugeVec
	seen     sync.Map // labelKey -> prometheus.Counter or prometheus.Gauge

	mu sync.Mutex
	n  int
}

type labelKey struct{ a, b string }

func newLabelCache(v *prometheus.CounterVec) *labelCache { return &labelCache{counters: v} }

func newGaugeCache(v *prometheus.GaugeVec) *labelCache { return &labelCache{gauges: v} }

func (c *labelCache) counter(a, b string) prometheus.Counter {
	return c.child(labelKey{a, b}).(prometheus.Counter)
}

func (c *labelCache) gauge(a string) prometheus.Gauge {
	return c.child(labelKey{a: a}).(prometheus.Gauge)
}

func (c *labelCache) child(k labelKey) any {
	if v, ok := c.seen.Load(k); ok {
		return v
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if v, ok := c.seen.Load(k); ok {
		return v
	}
	resolved := labelKey{clean(k.a), clean(k.b)}
	if c.n >= maxLabelValues {
		resolved = labelKey{other, other}
	}
	var v any
	if c.gauges != nil {
		v = c.gauges.WithLabelValues(resolved.a)
	} else {
		v = c.counters.WithLabelValues(resolved.a, resolved.b)
	}
	if c.n < maxLabelValues {
		c.seen.Store(k, v)
		c.n++
	}
	return v
}

// clean keeps a label value that looks like one of the code's names
// (lower-case letters, digits, '-', '_', '.', at most maxLabelLen) and
// turns anything else into other; empty stays empty.
func clean(s string) string {
	if len(s) > maxLabelLen {
		return other
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return other
		}
	}
	return s
}
