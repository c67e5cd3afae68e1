// Package buildinfo names the build of a binary: the version set at link time
// (-ldflags "-X main.version=1.2.3", as the Dockerfile does), else the module
// version `go install ...@v1.2.3` (or a VCS-stamped `go build`) records, else
// the VCS revision of a build from a checkout (with -dirty for uncommitted
// changes), else "dev+" and a digest of the executable itself, so two builds
// of a fleet can always be told apart, even where VCS stamping is off
// (GOFLAGS=-buildvcs=false, a build from a source tarball).
package buildinfo

import (
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"runtime/debug"
	"sync"
)

// Version returns the build's version; linked is the value of the binary's
// main.version ("" or "dev" when it was not set at link time).
func Version(linked string) string {
	if linked != "" && linked != "dev" {
		return linked
	}
	v := "dev"
	if bi, ok := debug.ReadBuildInfo(); ok {
		v = fromBuildInfo(bi)
	}
	if v != "dev" {
		return v
	}
	if d := exeDigest(); d != "" {
		return "dev+" + d
	}
	return v
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

// exeDigest is the first 12 hex digits of the SHA-256 of the running
// executable, read once; "" when it cannot be read.
var exeDigest = sync.OnceValue(func() string {
	path, err := os.Executable()
	if err != nil {
		return ""
	}
	return fileDigest(path)
})

func fileDigest(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return ""
	}
	return hex.EncodeToString(h.Sum(nil))[:12]
}
