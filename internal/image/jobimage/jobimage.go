// Package jobimage builds the test and demo job image without pulling
// anything: the static program in ./jobprog, compiled by the local Go
// toolchain, packed into a FROM scratch image by the daemon's legacy builder.
//
// The program's source is embedded in this package and compiled in a
// temporary module, so building works from any working directory (tests of
// any package, or the demo command run outside the repository). The image
// carries a label with the source's digest; Ensure rebuilds when the source
// changed, so a stale image never answers for a newer program.
package jobimage

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/build"
	"github.com/moby/moby/api/types/jsonstream"
	"github.com/moby/moby/client"
)

// TestTag is the tag tests and the demo command use for the job image.
const TestTag = "pidispatch-test-job:dev"

// SourceLabel is the image label holding the digest of the program's source.
const SourceLabel = "dev.pidispatch.jobprog-source"

// buildRepo names the temporary tags images are built under before they are
// tagged with the requested name, so concurrent builds never see each other's
// half-finished work.
const buildRepo = "pidispatch-jobimage-build"

//go:embed jobprog/main.go
var programSource []byte

// dockerfile packs the static program into an empty image. FROM scratch is
// resolved by the builder itself: nothing is pulled.
const dockerfile = "FROM scratch\nCOPY jobprog /jobprog\nENTRYPOINT [\"/jobprog\"]\n"

// SourceDigest is the digest of the program's source the image is labelled
// with (16 hex characters).
func SourceDigest() string {
	sum := sha256.Sum256(programSource)
	return hex.EncodeToString(sum[:8])
}

// File is one file of a build context.
type File struct {
	Name string
	Mode int64
	Data []byte
}

// Build compiles the job program for the daemon's architecture and builds the
// image under tag, replacing whatever the tag named before. Build output goes
// to progress (nil discards it).
func Build(ctx context.Context, c *client.Client, tag string, progress io.Writer) error {
	ver, err := c.ServerVersion(ctx, client.ServerVersionOptions{})
	if err != nil {
		return fmt.Errorf("docker version: %w", err)
	}
	if ver.Os != "" && ver.Os != "linux" {
		return fmt.Errorf("docker daemon runs %s containers; the job image is linux only", ver.Os)
	}
	binary, err := compile(ctx, ver.Arch)
	if err != nil {
		return err
	}
	files := []File{
		{Name: "Dockerfile", Mode: 0o644, Data: []byte(dockerfile)},
		{Name: "jobprog", Mode: 0o755, Data: binary},
	}
	return BuildFiles(ctx, c, tag, files, map[string]string{SourceLabel: SourceDigest()}, progress)
}

var ensureMu sync.Mutex

// Ensure builds the image under tag only when the tag is missing or names an
// image of a different program source. Concurrent callers (goroutines, or test
// binaries of several packages) serialise on a lock file; a build that races
// anyway is harmless, since each builds under its own temporary tag and only
// retags at the end.
func Ensure(ctx context.Context, c *client.Client, tag string) error {
	if current, err := isCurrent(ctx, c, tag); err != nil || current {
		return err
	}
	ensureMu.Lock()
	defer ensureMu.Unlock()
	unlock, err := lockFile(ctx, filepath.Join(os.TempDir(), "pidispatch-jobimage.lock"))
	if err != nil {
		return err
	}
	defer unlock()
	if current, err := isCurrent(ctx, c, tag); err != nil || current {
		return err
	}
	return Build(ctx, c, tag, nil)
}

// isCurrent reports whether tag names an image built from this source.
func isCurrent(ctx context.Context, c *client.Client, tag string) (bool, error) {
	img, err := c.ImageInspect(ctx, tag)
	if cerrdefs.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("inspect %s: %w", tag, err)
	}
	return img.Config != nil && img.Config.Labels[SourceLabel] == SourceDigest(), nil
}

// BuildFiles builds an image from a context of files (one of them named
// Dockerfile) with the legacy builder, which needs no BuildKit session and
// never pulls a base it has locally (or scratch). The image is built under a
// temporary tag and then tagged as tag.
func BuildFiles(ctx context.Context, c *client.Client, tag string, files []File, labels map[string]string, progress io.Writer) error {
	if progress == nil {
		progress = io.Discard
	}
	var tarball bytes.Buffer
	tw := tar.NewWriter(&tarball)
	for _, f := range files {
		if err := tw.WriteHeader(&tar.Header{Name: f.Name, Mode: f.Mode, Size: int64(len(f.Data)), Typeflag: tar.TypeReg}); err != nil {
			return fmt.Errorf("build context: %w", err)
		}
		if _, err := tw.Write(f.Data); err != nil {
			return fmt.Errorf("build context: %w", err)
		}
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("build context: %w", err)
	}
	return BuildTar(ctx, c, tag, &tarball, labels, progress)
}

// BuildTar builds an image from a tar stream of a build context the way
// BuildFiles does, for contexts too large to hold in memory.
func BuildTar(ctx context.Context, c *client.Client, tag string, tarball io.Reader, labels map[string]string, progress io.Writer) error {
	if progress == nil {
		progress = io.Discard
	}
	temp := buildRepo + ":" + randomHex(8)
	res, err := c.ImageBuild(ctx, tarball, client.ImageBuildOptions{
		Tags:        []string{temp},
		Remove:      true,
		ForceRemove: true,
		PullParent:  false,
		Labels:      labels,
		Version:     build.BuilderV1,
	})
	if err != nil {
		return fmt.Errorf("image build: %w", err)
	}
	err = readBuildStream(res.Body, progress)
	_ = res.Body.Close()
	if err != nil {
		return fmt.Errorf("image build: %w", err)
	}
	defer func() {
		// Drop the temporary tag; the image keeps the final one.
		_, _ = c.ImageRemove(context.WithoutCancel(ctx), temp, client.ImageRemoveOptions{})
	}()
	if _, err := c.ImageTag(ctx, client.ImageTagOptions{Source: temp, Target: tag}); err != nil {
		return fmt.Errorf("tag %s: %w", tag, err)
	}
	return nil
}

// readBuildStream copies the builder's messages to progress and returns the
// first error the builder reported.
func readBuildStream(body io.Reader, progress io.Writer) error {
	dec := json.NewDecoder(body)
	for {
		var msg jsonstream.Message
		if err := dec.Decode(&msg); errors.Is(err, io.EOF) {
			return nil
		} else if err != nil {
			return fmt.Errorf("read build output: %w", err)
		}
		if msg.Error != nil {
			return errors.New(strings.TrimSpace(msg.Error.Message))
		}
		if msg.Stream != "" {
			_, _ = io.WriteString(progress, msg.Stream)
		}
	}
}

// compile builds the embedded program as a static linux binary for arch in a
// temporary module, so it works from any working directory.
func compile(ctx context.Context, arch string) ([]byte, error) {
	if arch == "" {
		return nil, errors.New("docker daemon did not report its architecture")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		return nil, fmt.Errorf("the go command is needed to build the job image (put it on PATH, e.g. /usr/local/go/bin): %w", err)
	}
	dir, err := os.MkdirTemp("", "pidispatch-jobprog-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	if err := os.WriteFile(filepath.Join(dir, "main.go"), programSource, 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module jobprog\n\ngo 1.22\n"), 0o600); err != nil {
		return nil, err
	}
	out := filepath.Join(dir, "jobprog")
	cmd := exec.CommandContext(ctx, goBin, "build", "-trimpath", "-buildvcs=false", "-ldflags=-s -w", "-o", out, ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(),
		"CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch,
		"GOFLAGS=", "GOWORK=off", "GOTOOLCHAIN=local", "GO111MODULE=on",
	)
	if msg, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("go build jobprog: %w: %s", err, bytes.TrimSpace(msg))
	}
	return os.ReadFile(out)
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// LockFile takes the exclusive build lock at path (see Ensure), for other
// image builders that serialise across processes the same way.
func LockFile(ctx context.Context, path string) (unlock func(), err error) {
	return lockFile(ctx, path)
}
