package jobout

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestReadOnlyRegularBoundedFiles(t *testing.T) {
	dir := t.TempDir()
	host := filepath.Join(t.TempDir(), "host-secret")
	if err := os.WriteFile(host, []byte("host secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.WriteFile(filepath.Join(dir, "pr.md"), []byte("Title\nbody"), 0o600))
	must(os.WriteFile(filepath.Join(dir, "big.md"), []byte(strings.Repeat("x", 101)), 0o600))
	must(os.Symlink(host, filepath.Join(dir, "link.md")))
	must(syscall.Mkfifo(filepath.Join(dir, "fifo.md"), 0o600))
	must(os.Mkdir(filepath.Join(dir, "dir.md"), 0o700))

	if got, err := Read(dir, "pr.md", 100); err != nil || string(got) != "Title\nbody" {
		t.Fatalf("pr.md: %q %v", got, err)
	}
	if _, err := Read(dir, "absent.md", 100); !errors.Is(err, ErrAbsent) {
		t.Fatalf("absent: %v", err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for _, name := range []string{"big.md", "link.md", "fifo.md", "dir.md", "../pr.md", ""} {
			got, err := Read(dir, name, 100)
			if err == nil || errors.Is(err, ErrAbsent) || strings.Contains(string(got), "secret") {
				t.Errorf("%s: read %q, err %v", name, got, err)
			}
		}
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("a FIFO blocked the read")
	}
}

func TestMakeIsTheJobsToWrite(t *testing.T) {
	dir, err := Make(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() || filepath.Base(dir) != Name {
		t.Fatalf("%v %v", fi, err)
	}
}
