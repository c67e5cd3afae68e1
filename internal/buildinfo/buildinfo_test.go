package buildinfo

import (
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
)

func TestVersion(t *testing.T) {
	if got := Version("1.2.3"); got != "1.2.3" {
		t.Fatalf("linked version: %q", got)
	}
	for _, tc := range []struct {
		name string
		bi   debug.BuildInfo
		want string
	}{
		{"go install @version", debug.BuildInfo{Main: debug.Module{Version: "v0.4.0"}}, "v0.4.0"},
		{"checkout", debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "0123456789abcdef0123"}, {Key: "vcs.modified", Value: "false"}}}, "dev-0123456789ab"},
		{"dirty checkout", debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "abc"}, {Key: "vcs.modified", Value: "true"}}}, "dev-abc-dirty"},
		{"nothing known", debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, "dev"},
	} {
		if got := fromBuildInfo(&tc.bi); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

// Two builds with VCS stamping off (GOFLAGS=-buildvcs=false, as on machines
// and in images that build from a copy of the source) still name
// themselves apart, and each names itself the same way every time.
func TestBuildsWithoutVCSStampTellThemselvesApart(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("go: %v", err)
	}
	dir := t.TempDir()
	build := func(name string, ldflags string) string {
		out := filepath.Join(dir, name)
		cmd := exec.Command(goBin, "build", "-buildvcs=false", "-ldflags="+ldflags, "-o", out, "./testdata/prog")
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build: %v\n%s", err, b)
		}
		v, err := exec.Command(out).Output()
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(v))
	}
	a, b := build("a", "-s"), build("b", "-w")
	if !strings.HasPrefix(a, "dev+") || !strings.HasPrefix(b, "dev+") || a == b {
		t.Fatalf("versions %q and %q: want two different dev+<digest>", a, b)
	}
	if again, _ := exec.Command(filepath.Join(dir, "a")).Output(); strings.TrimSpace(string(again)) != a {
		t.Fatalf("the same build named itself %q, then %q", a, again)
	}
	if v := build("c", "-X main.version=1.2.3"); v != "1.2.3" {
		t.Fatalf("a linked version: %q", v)
	}
}
