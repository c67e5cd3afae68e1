package gateway

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A malformed line is an error naming the line and the rule.
func TestParsePricingErrors(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"# c\n\nanthropic m 1 2 3\n", "pricing line 3: want 6 fields"},
		{"anthropic m 1 2 3 4\nopenai x 1 2 3 -4\n", "pricing line 2: cacheWrite price \"-4\""},
		{"anthropic m 1 2 3 4.1234567\n", "pricing line 1: cacheWrite price"},
		{"a/b m 1 2 3 4\n", "pricing line 1: provider \"a/b\" must not contain /"},
		{"anthropic m 1 2 3 4\n\nanthropic m 1 2 3 4 # again\n", "pricing line 3: anthropic/m is priced twice"},
	} {
		if _, err := ParsePricing(strings.NewReader(tc.in)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParsePricing(%q) = %v, want %q", tc.in, err, tc.want)
		}
	}
}

// The built-in table covers the models pi uses by default, at pi's prices.
func TestDefaultPricing(t *testing.T) {
	p := DefaultPricing()
	for _, m := range []string{"claude-sonnet-4-5", "claude-haiku-4-5", "claude-opus-4-5"} {
		if !p.Covers("anthropic", m) {
			t.Errorf("defaults do not price anthropic/%s", m)
		}
	}
	if !p.Covers("openai", "gpt-5") || !p.Covers("openrouter", "anthropic/claude-sonnet-4.5") || p.Covers("anthropic", "gpt-5") {
		t.Error("defaults miss openai or openrouter, or price a model they should not")
	}
	// claude-sonnet-4-5: $3 in, $15 out, $0.30 cache read, $3.75 cache write.
	if m, ok := p.Price("anthropic", "claude-sonnet-4-5", Usage{1_000_000, 1_000_000, 1_000_000, 1_000_000}); !ok || m != 22_050_000 {
		t.Fatalf("sonnet 4.5 a million of each = %d micros", m)
	}
}

// One call is priced exactly and rounded half up once.
func TestPriceRounding(t *testing.T) {
	p, err := ParsePricing(strings.NewReader("x m 0.3 0.000001 0 0\nx * 1 1 1 1\nx big 999999999999 0 0 0\n"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		u    Usage
		want int64
	}{
		{Usage{Input: 1}, 0},                  // 0.3 micro
		{Usage{Input: 2}, 1},                  // 0.6
		{Usage{Input: 5}, 2},                  // 1.5 rounds up
		{Usage{Input: 1, Output: 200_000}, 1}, // 0.3 + 0.2 = 0.5: rounded once, up
		{Usage{Input: 1 << 40}, 329853488333}, // 2^40 × 0.3
	} {
		if got, ok := p.Price("x", "m", tc.u); !ok || got != tc.want {
			t.Errorf("Price(%+v) = %d, want %d", tc.u, got, tc.want)
		}
	}
	if m, _ := p.Price("x", "big", Usage{Input: 1 << 62}); m != 1<<63-1 {
		t.Errorf("an overflowing price = %d, want it saturated", m)
	}
	if m, ok := p.Price("x", "other", Usage{Input: 1_000_000}); !ok || m != 1_000_000 {
		t.Errorf("the * line priced other at %d %v", m, ok)
	}
	if _, ok := p.Price("y", "m", Usage{Input: 1}); ok || p.Covers("y", "m") {
		t.Error("an unknown provider was priced")
	}
}

// A file merged over the defaults adds models and wins where both price one.
func TestLoadPricing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "prices.txt")
	if err := os.WriteFile(path, []byte("anthropic claude-sonnet-4-5 1 1 1 1\nlocal llama 0 0 0 0\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p, err := LoadPricing(path)
	if err != nil {
		t.Fatal(err)
	}
	if m, _ := p.Price("anthropic", "claude-sonnet-4-5", Usage{Input: 1_000_000}); m != 1_000_000 || !p.Covers("local", "llama") || !p.Covers("anthropic", "claude-haiku-4-5") {
		t.Fatalf("merged table: sonnet %d, %d lines", m, p.Len())
	}
	if err := os.WriteFile(path, []byte("bad\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadPricing(path); err == nil || !strings.Contains(err.Error(), "pricing line 1:") || !strings.Contains(err.Error(), path) {
		t.Fatalf("bad file: %v", err)
	}
	if _, err := LoadPricing(filepath.Join(t.TempDir(), "none")); err == nil {
		t.Fatal("a missing file loaded")
	}
}
