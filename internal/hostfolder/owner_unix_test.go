//go:build unix

package hostfolder

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// Owner and UID read the folder's owner; UID does not follow a final link.
func TestOwnerAndUID(t *testing.T) {
	dir := t.TempDir()
	uid, gid := os.Geteuid(), os.Getegid()
	if uid == 0 {
		if err := os.Chown(dir, 4321, 4322); err != nil {
			t.Fatal(err)
		}
		uid, gid = 4321, 4322
	}
	owner, err := Owner(dir)
	if err != nil {
		t.Fatal(err)
	}
	if want := strconv.Itoa(uid) + ":" + strconv.Itoa(gid); owner != want {
		t.Errorf("Owner = %q, want %q", owner, want)
	}
	if got, ok := UID(dir); !ok || int(got) != uid {
		t.Errorf("UID = %d %v, want %d", got, ok, uid)
	}
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink("/", link); err != nil {
		t.Fatal(err)
	}
	if got, ok := UID(link); !ok || int(got) != os.Geteuid() {
		t.Errorf("UID of a link = %d %v, want the link's own owner %d", got, ok, os.Geteuid())
	}
	if _, err := Owner(filepath.Join(dir, "absent")); err == nil {
		t.Error("Owner of a missing folder: no error")
	}
	if _, ok := UID(filepath.Join(dir, "absent")); ok {
		t.Error("UID of a missing folder: ok")
	}
}
