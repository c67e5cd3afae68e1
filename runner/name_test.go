package runner

import (
	"bytes"
	"regexp"
	"strings"
	"testing"
)

// engineName is the engine's rule for container names.
var engineName = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.-]+$`)

func TestContainerName(t *testing.T) {
	tests := []struct{ id, want string }{
		{"local-0123456789abcdef", "pi-job-local-0123456789abcdef"},
		{"gh-7f1c2e4a-guid", "pi-job-gh-7f1c2e4a-guid"},
		{"A_b.C-9", "pi-job-A_b.C-9"},
	}
	for _, tt := range tests {
		if got := ContainerName(tt.id); got != tt.want {
			t.Errorf("ContainerName(%q) = %q, want %q", tt.id, got, tt.want)
		}
	}
}

func TestContainerNameLossy(t *testing.T) {
	ids := []string{
		"repeat:nightly:1700000000000", "repeat-nightly-1700000000000",
		"a/b", "a:b", "a--b", "-lead", "--", ".", "..", "", "\x00", "ümlaut", "\xff\xfe",
		"x y\tz\n", strings.Repeat("a", 100), strings.Repeat("a", 101), strings.Repeat("a", 5000),
		strings.Repeat("/", 300), strings.Repeat("é", 200),
	}
	seen := map[string]string{}
	for _, id := range ids {
		name := ContainerName(id)
		if !engineName.MatchString(name) || !strings.HasPrefix(name, NamePrefix) {
			t.Errorf("ContainerName(%q) = %q is not a valid engine name", id, name)
		}
		if len(name) > len(NamePrefix)+maxNameID+17 {
			t.Errorf("ContainerName(%q) is %d bytes long", id, len(name))
		}
		if strings.Contains(name, "--") && !strings.HasPrefix(name, NamePrefix) {
			t.Errorf("ContainerName(%q) = %q has an uncollapsed run", id, name)
		}
		if other, dup := seen[name]; dup {
			t.Errorf("ids %q and %q share the name %q", other, id, name)
		}
		seen[name] = id
		if ContainerName(id) != name {
			t.Errorf("ContainerName(%q) is not deterministic", id)
		}
	}
	if got := ContainerName("a/b"); !strings.HasPrefix(got, "pi-job-a-b-") || len(got) != len("pi-job-a-b-")+16 {
		t.Errorf("lossy name %q lacks the readable part plus a 16-hex suffix", got)
	}
}

func FuzzContainerName(f *testing.F) {
	f.Add("local-abc")
	f.Add("repeat:x:1")
	f.Add("\x00-")
	f.Fuzz(func(t *testing.T, id string) {
		name := ContainerName(id)
		if !engineName.MatchString(name) || len(name) > len(NamePrefix)+maxNameID+17 {
			t.Fatalf("ContainerName(%q) = %q", id, name)
		}
	})
}

func TestTailBuffer(t *testing.T) {
	tb := newTailBuffer(10)
	var all bytes.Buffer
	for _, chunk := range []string{"abc", "defgh", "ij", "klmnopq", "", "r", strings.Repeat("z", 25), "12", "345"} {
		_, _ = tb.Write([]byte(chunk))
		all.WriteString(chunk)
		want := all.Bytes()
		if len(want) > 10 {
			want = want[len(want)-10:]
		}
		if got := tb.Bytes(); !bytes.Equal(got, want) {
			t.Fatalf("after %q: tail %q, want %q", chunk, got, want)
		}
		if tb.truncated() != (all.Len() > 10) {
			t.Fatalf("after %q: truncated=%v with %d bytes written", chunk, tb.truncated(), all.Len())
		}
	}
	zero := newTailBuffer(0)
	_, _ = zero.Write([]byte("abc"))
	if len(zero.Bytes()) != 0 || !zero.truncated() {
		t.Fatal("zero-size tail kept bytes")
	}
}
