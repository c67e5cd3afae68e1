package jobs

import "testing"

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
