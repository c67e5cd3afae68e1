package fleet

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func testKey(t *testing.T) Key {
	t.Helper()
	k, err := NewKey([]byte(strings.Repeat("k", MinKeyLen)))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestJobSignatureBindsQueueIDAndData(t *testing.T) {
	k := testKey(t)
	data := json.RawMessage(`{"folder":"/src","task":"fix","n":1}`)
	sig, err := k.SignJob("pi-jobs", "job-1", data)
	if err != nil || len(sig) != SignatureLen {
		t.Fatalf("sign: %q %v", sig, err)
	}
	if !k.VerifyJob("pi-jobs", "job-1", data, sig) {
		t.Fatal("own signature refused")
	}
	// Re-encoded by another client: same canonical form.
	if !k.VerifyJob("pi-jobs", "job-1", json.RawMessage(`{ "n": 1.0, "task":"fix", "folder":"/src" }`), sig) {
		t.Fatal("a re-encoded job refused")
	}
	other, _ := NewKey([]byte(strings.Repeat("x", MinKeyLen)))
	for name, ok := range map[string]bool{
		"other queue": k.VerifyJob("pi-jobs@b", "job-1", data, sig),
		"other id":    k.VerifyJob("pi-jobs", "job-2", data, sig),
		"other data":  k.VerifyJob("pi-jobs", "job-1", json.RawMessage(`{"folder":"/etc","task":"fix","n":1}`), sig),
		"other key":   other.VerifyJob("pi-jobs", "job-1", data, sig),
		"no sig":      k.VerifyJob("pi-jobs", "job-1", data, ""),
		"junk sig":    k.VerifyJob("pi-jobs", "job-1", data, strings.Repeat("0", SignatureLen)),
		"zero key":    Key{}.VerifyJob("pi-jobs", "job-1", data, sig),
	} {
		if ok {
			t.Errorf("%s: verified", name)
		}
	}
}

func TestRowSignature(t *testing.T) {
	k := testKey(t)
	row := map[string]string{"name": "a", "caps": "secrets:gh", "routes": "true"}
	sig, err := k.SignRow(row)
	if err != nil || !k.VerifyRow(row, sig) {
		t.Fatalf("row: %v", err)
	}
	row["caps"] = "secrets:gh secrets:prod"
	if k.VerifyRow(row, sig) {
		t.Fatal("a changed row verified")
	}
}

func TestLoadRefusesBadFiles(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, b []byte, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good", []byte(strings.Repeat("a", 40)), 0o600)
	k, err := LoadKey(good)
	if err != nil || !k.IsSet() {
		t.Fatalf("good key: %v", err)
	}
	if s := fmt.Sprintf("%v %+v %#v %s", k, k, k, k); strings.Contains(s, "aaaa") {
		t.Fatalf("key printed: %s", s)
	}
	if b, _ := json.Marshal(struct{ K Key }{k}); strings.Contains(string(b), "aaaa") {
		t.Fatalf("key marshalled: %s", b)
	}
	for name, tc := range map[string]struct {
		path string
		want error
	}{
		"missing":        {filepath.Join(dir, "nope"), ErrKeyUnreadable},
		"folder":         {dir, ErrKeyUnreadable},
		"short":          {write("short", []byte("0123456789"), 0o600), ErrKeyTooShort},
		"world-readable": {write("world", []byte(strings.Repeat("a", 40)), 0o644), ErrKeyWorldReadable},
	} {
		if _, err := LoadKey(tc.path); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", name, err, tc.want)
		}
	}
}
