// Package entrypoint is the agent image's entrypoint: it turns the job the
// worker wrote to /job/job.json (and, for a flow job, the prompt the host
// rendered into /job/prompt.md, given to pi on its stdin) into one headless
// run of the pi coding agent in /workspace, watches pi's JSON event stream, enforces the job's turn and
// cost limits (pi has no flag for either), and ends with the exit protocol of
// docs/container-contract.md: a readable transcript on stderr, the exit line
// with the run's telemetry last on stdout, and exit code 0 (completed), 1
// (infrastructure) or 2 (policy).
//
// The package uses the standard library only: the offline image build
// (internal/image/agentimage) compiles its embedded source in a scratch module, so
// the image's program is exactly this package at the digest it is labelled
// with.
package entrypoint

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"sort"
	"strings"
)

//go:embed *.go
var source embed.FS

// Source returns the package's non-test Go files by name, for builds that
// compile the entrypoint outside this module.
func Source() map[string][]byte {
	out := map[string][]byte{}
	entries, _ := fs.ReadDir(source, ".")
	for _, e := range entries {
		if name := e.Name(); !strings.HasSuffix(name, "_test.go") {
			b, _ := fs.ReadFile(source, name)
			out[name] = b
		}
	}
	return out
}

// SourceDigest is a digest of Source (16 hex characters).
func SourceDigest() string {
	files := Source()
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	h := sha256.New()
	for _, n := range names {
		h.Write([]byte(n))
		h.Write([]byte{0})
		h.Write(files[n])
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil)[:8])
}
