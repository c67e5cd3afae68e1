package jobs

import (
	"errors"
	"strconv"
	"strings"
)

// Micros per dollar: every amount of money is held in micro-dollars, so sums
// and caps are exact.
const Micros = 1_000_000

// MaxUSD is the largest dollar amount a cap, a price or a job's reported cost
// may hold: every dollar figure a host reads is bounded by it.
const MaxUSD = 1_000_000

// ErrBadUSD is a dollar amount ParseUSD cannot read.
var ErrBadUSD = errors.New(`not a dollar amount: plain digits with up to 6 decimals ("2.50")`)

// ParseUSD reads a decimal dollar amount ("2.5", "0.000125", "30") into
// micro-dollars. No sign, exponent, spaces or more than 6 decimals; at most
// 12 whole digits.
func ParseUSD(s string) (int64, error) {
	whole, frac, hasPoint := strings.Cut(s, ".")
	if whole == "" || len(whole) > 12 || len(frac) > 6 || hasPoint && frac == "" {
		return 0, ErrBadUSD
	}
	for _, part := range []string{whole, frac} {
		for i := 0; i < len(part); i++ {
			if part[i] < '0' || part[i] > '9' {
				return 0, ErrBadUSD
			}
		}
	}
	w, err := strconv.ParseInt(whole, 10, 64)
	if err != nil {
		return 0, ErrBadUSD
	}
	f := int64(0)
	if frac != "" {
		f, _ = strconv.ParseInt(frac+strings.Repeat("0", 6-len(frac)), 10, 64)
	}
	return w*Micros + f, nil
}

// FormatUSD writes micro-dollars as a decimal dollar amount without trailing
// zeros ("2.5", "0.000125", "30").
func FormatUSD(micros int64) string {
	sign := ""
	if micros < 0 {
		sign, micros = "-", -micros
	}
	s := strconv.FormatInt(micros/Micros, 10)
	if f := micros % Micros; f != 0 {
		s += "." + strings.TrimRight(strconv.FormatInt(Micros+f, 10)[1:], "0")
	}
	return sign + s
}

// USD is micro-dollars as dollars, for display and JSON.
func USD(micros int64) float64 { return float64(micros) / Micros }

// MaxProviderBytes bounds a provider name.
const MaxProviderBytes = 64

// ValidProvider reports whether s is a provider name as pi spells it
// ("anthropic", "openai", "openrouter"): 1 to 64 lowercase letters, digits
// and dashes. The one rule for every place a provider is named: config,
// the gateway's paths, the fleet's rate-limit keys.
func ValidProvider(s string) bool {
	if s == "" || len(s) > MaxProviderBytes {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}
