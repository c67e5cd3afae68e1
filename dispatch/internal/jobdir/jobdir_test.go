package jobdir

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestNoteRoundTrip(t *testing.T) {
	dir := t.TempDir()
	want := Note{Queue: "pi-jobs@a", JobID: "j-1", Token: "tok", Attempt: 2}
	if err := WriteNote(dir, want); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(dir, NoteName))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("note mode %v, want 0600: it holds a lock token", fi.Mode().Perm())
	}
	got, ok := ReadNote(dir)
	if !ok || got != want {
		t.Fatalf("ReadNote = %+v, %v; want %+v", got, ok, want)
	}
}

// A note that is missing, not ours, incomplete or oversized is no note.
func TestReadNoteRefuses(t *testing.T) {
	for name, body := range map[string]string{
		"not json":   "{",
		"no queue":   `{"jobId":"j","token":"t"}`,
		"no job":     `{"queue":"q","token":"t"}`,
		"no token":   `{"queue":"q","jobId":"j"}`,
		"oversized":  `{"queue":"q","jobId":"j","token":"t","pad":"` + strings.Repeat("x", maxNote) + `"}`,
		"wrong type": `{"queue":1,"jobId":"j","token":"t"}`,
	} {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, NoteName), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		if n, ok := ReadNote(dir); ok {
			t.Errorf("%s: read %+v", name, n)
		}
	}
	if _, ok := ReadNote(t.TempDir()); ok {
		t.Error("a folder without a note has one")
	}
}

func TestReadTail(t *testing.T) {
	p := filepath.Join(t.TempDir(), OutputName)
	if err := os.WriteFile(p, []byte("0123456789"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := string(ReadTail(p, 4)); got != "6789" {
		t.Errorf("tail 4 = %q", got)
	}
	if got := string(ReadTail(p, 100)); got != "0123456789" {
		t.Errorf("tail past the start = %q", got)
	}
	if got := ReadTail(filepath.Join(t.TempDir(), "none"), 4); got != nil {
		t.Errorf("missing file: %q", got)
	}
}
