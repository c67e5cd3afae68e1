package fleet

import (
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
	"unicode/utf8"
)

type nameVectors struct {
	Sanitize []struct {
		Raw  string `json:"raw"`
		Want string `json:"want"`
	} `json:"sanitizeWorkerName"`
	Valid []struct {
		Name string `json:"name"`
		Want bool   `json:"want"`
	} `json:"validWorkerName"`
}

func loadNameVectors(t *testing.T) nameVectors {
	t.Helper()
	raw, err := os.ReadFile("../test/testdata/reference-vectors.json")
	if err != nil {
		t.Fatal(err)
	}
	var v nameVectors
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	if len(v.Sanitize) == 0 || len(v.Valid) == 0 {
		t.Fatalf("reference vectors missing: %d sanitize, %d valid rows", len(v.Sanitize), len(v.Valid))
	}
	return v
}

func TestSanitizeNameReferenceVectors(t *testing.T) {
	for _, row := range loadNameVectors(t).Sanitize {
		if got := SanitizeName(row.Raw); got != row.Want {
			t.Errorf("SanitizeName(%q) = %q, want %q", row.Raw, got, row.Want)
		}
	}
}

func TestValidateNameReferenceVectors(t *testing.T) {
	for _, row := range loadNameVectors(t).Valid {
		err := ValidateName(row.Name)
		if (err == nil) != row.Want {
			t.Errorf("ValidateName(%q) = %v, want valid=%v", row.Name, err, row.Want)
		}
	}
}

func TestValidateNameRules(t *testing.T) {
	cases := []struct {
		name string
		rule error
	}{
		{"", ErrNameEmpty},
		{"-x", ErrNameLeading},
		{".x", ErrNameLeading},
		{"_x", ErrNameLeading},
		{strings.Repeat("a", 65), ErrNameTooLong},
		{"a b", ErrNameCharset},
		{"a:b", ErrNameCharset},
		{"a\x00b", ErrNameCharset},
		{"caf\u00e9", ErrNameCharset},
		{"\xff", ErrNameCharset},
		{"prod.json", ErrNameReserved},
		{"prod.LOG", ErrNameReserved},
		{"x.json.y", nil},
		{strings.Repeat("a", 64), nil},
	}
	for _, c := range cases {
		err := ValidateName(c.name)
		if c.rule == nil {
			if err != nil {
				t.Errorf("ValidateName(%q) = %v, want nil", c.name, err)
			}
			continue
		}
		if !errors.Is(err, c.rule) {
			t.Errorf("ValidateName(%q) = %v, want rule %v", c.name, err, c.rule)
		}
		var ne *NameError
		if !errors.As(err, &ne) || ne.Name != c.name {
			t.Errorf("ValidateName(%q): error %v does not carry the name", c.name, err)
		}
		if !strings.Contains(err.Error(), c.rule.Error()) {
			t.Errorf("ValidateName(%q): message %q does not name the rule", c.name, err)
		}
	}
}

// JavaScript's toLowerCase is Unicode-wide; these pin the cases where that
// differs from an ASCII-only fold (outputs checked against Node 20).
func TestSanitizeNameUnicode(t *testing.T) {
	cases := map[string]string{
		"\u0130x":                         "i-x",  // one-to-many lowercase
		"\u212Aa":                         "ka",   // Kelvin sign lowercases to ASCII k
		"Ab\U0001F600c":                   "ab-c", // non-BMP: two dashes collapse
		"\xff\xfehost":                    "host", // invalid UTF-8 is replaced, then trimmed
		"a\x00b":                          "a-b",
		strings.Repeat("-", 100):          "worker",
		strings.Repeat("a", 63) + ".json": strings.Repeat("a", 63), // cut at 64, then the dot trimmed
		"x.JSON":                          "x-json",
	}
	for raw, want := range cases {
		if got := SanitizeName(raw); got != want {
			t.Errorf("SanitizeName(%q) = %q, want %q", raw, got, want)
		}
	}
}

func TestDefaultNameIsValid(t *testing.T) {
	if err := ValidateName(DefaultName()); err != nil {
		t.Fatalf("DefaultName() = %q is not valid: %v", DefaultName(), err)
	}
}

func FuzzSanitizeName(f *testing.F) {
	for _, s := range []string{"", "Robs-Mac-Mini.local", "host.json", "..a..", "\u0130", "\xff", strings.Repeat("ab-", 40)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		got := SanitizeName(raw)
		if err := ValidateName(got); err != nil {
			t.Fatalf("SanitizeName(%q) = %q, which ValidateName refuses: %v", raw, got, err)
		}
		if !utf8.ValidString(got) {
			t.Fatalf("SanitizeName(%q) = %q is not UTF-8", raw, got)
		}
		settled := !strings.Contains(raw, "--") && !strings.HasSuffix(raw, "-") && !strings.HasSuffix(raw, ".")
		if ValidateName(raw) == nil && strings.ToLower(raw) == raw && settled && got != raw {
			t.Fatalf("a valid lowercase name %q was altered to %q", raw, got)
		}
		if again := SanitizeName(got); again != got {
			t.Fatalf("SanitizeName is not idempotent: %q -> %q -> %q", raw, got, again)
		}
	})
}
