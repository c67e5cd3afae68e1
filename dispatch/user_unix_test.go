//go:build unix

package dispatch

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pidispatch/pidispatch/internal/hostfolder"

	"github.com/pidispatch/pidispatch/jobs"
)

func TestContainerUser(t *testing.T) {
	folder := t.TempDir()
	if os.Geteuid() == 0 {
		if err := os.Chown(folder, 4321, 4322); err != nil {
			t.Fatal(err)
		}
	}
	owner, err := hostfolder.Owner(folder)
	if err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 && owner != "4321:4322" {
		t.Fatalf("owner %q, want 4321:4322", owner)
	}
	local := jobs.Job{Kind: jobs.KindLocal, Folder: folder, Flow: "f", Task: "t"}
	forge := jobs.Job{Kind: jobs.KindForge, Repo: "a/b", Flow: "f", Task: "t"}
	for _, tc := range []struct {
		setting string
		job     jobs.Job
		want    string
	}{
		{"", local, owner},
		{"owner", local, owner},
		{"owner", forge, ""},
		{"image", local, ""},
		{"root", local, "0:0"},
		{"root", forge, "0:0"},
		{"1000:1001", local, "1000:1001"},
		{"1000:1001", forge, "1000:1001"},
	} {
		w := &Worker{cfg: Config{Settings: Settings{ContainerUser: tc.setting}}}
		got, err := w.containerUser(tc.job.Folder)
		if err != nil || got != tc.want {
			t.Errorf("%q, %s job: %q %v, want %q", tc.setting, tc.job.Kind, got, err, tc.want)
		}
	}
	// A folder that is gone is an error naming what was read.
	w := &Worker{cfg: Config{}}
	gone := local
	gone.Folder = filepath.Join(folder, "absent")
	if _, err := w.containerUser(gone.Folder); err == nil || !strings.Contains(err.Error(), "owner of the job's folder") {
		t.Fatalf("missing folder: %v", err)
	}
}
