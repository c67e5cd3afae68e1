// Package buildinfo names the build of a binary: the version set at link time
// (-ldflags "-X main.version=1.2.3", as the Dockerfile does), else the module
// version `go install ...@v1.2.3` records, else the VCS revision of a build
// from a checkout, else "dev".
package buildinfo

import (
	"runtime/debug"
)

// Version returns the build's version; linked is the value of the binary's
// main.version ("" or "dev" when it was not set at link time).
func Version(linked string) string {
	if linked != "" && linked != "dev" {
		return linked
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "dev"
	}
	return fromBuildInfo(bi)
}

func fromBuildInfo(bi *debug.BuildInfo) string {
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	var rev, modified string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value
		}
	}
	if rev == "" {
		return "dev"
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if modified == "true" {
		rev += "-dirty"
	}
	return "dev-" + rev
}
