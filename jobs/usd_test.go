package jobs

import (
	"testing"
	"time"
)

func TestParseUSD(t *testing.T) {
	for in, want := range map[string]int64{"0": 0, "2.5": 2_500_000, "0.000125": 125, "30": 30_000_000, "1000000": 1_000_000_000_000} {
		got, err := ParseUSD(in)
		if err != nil || got != want {
			t.Errorf("ParseUSD(%q) = %d, %v; want %d", in, got, err, want)
		}
		if back := FormatUSD(got); back != in {
			t.Errorf("FormatUSD(%d) = %q, want %q", got, back, in)
		}
	}
	for _, in := range []string{"", ".5", "5.", "-1", "+1", "1e3", "1.0000001", " 1", "1,5", "1234567890123"} {
		if _, err := ParseUSD(in); err == nil {
			t.Errorf("ParseUSD(%q) accepted", in)
		}
	}
}

func TestRecordSpendIsValidated(t *testing.T) {
	base := Record{JobID: "j", Outcome: OutcomePolicy, Reason: ReasonCostCap, Host: "h", StartedAt: time.Now(), EndedAt: time.Now(), Target: "-"}
	good := Spend{Dollars: 0.25, Micros: 250000, Basis: BasisMetered, Calls: 2, CapHit: ReasonCostCap}
	for name, s := range map[string]*Spend{
		"basis":    {Dollars: 0, Basis: "guessed"},
		"negative": {Micros: -1, Dollars: -0.000001, Basis: BasisMetered},
		"dollars":  {Micros: 1, Dollars: 5, Basis: BasisMetered},
		"capHit":   {Basis: BasisMetered, CapHit: "whatever"},
		"unpriced": {Basis: BasisMetered, Unpriced: []string{"a\x00b"}},
	} {
		r := base
		r.Spend = s
		if r.Validate() == nil {
			t.Errorf("%s: a bad spend %+v passed", name, s)
		}
	}
	r := base
	r.Spend = &good
	if err := r.Validate(); err != nil {
		t.Fatalf("good spend: %v", err)
	}
}
