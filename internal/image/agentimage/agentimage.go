// Package agentimage assembles the agent image without pulling anything, for
// tests and the demo: FROM scratch, with the official Node.js build pinned by
// agent/image/node/package-lock.json (an npm package, so a machine whose own Node.js
// is older than pi requires still builds the image pi runs in), the pi coding
// agent installed by `npm ci` from agent/image/package-lock.json, the shared
// libraries node links from this machine, the CA certificates, a shell for
// pi's bash tool, and pi-entrypoint compiled from agent/entrypoint. The
// production recipe (agent/image/Dockerfile) lays out the same programs on the
// official Node.js base image of the same version.
//
// Everything that goes into the image is hashed into a label; Ensure builds
// only when the tag is missing or was built from other inputs, so a second
// Ensure with nothing changed costs one image inspect and the hashing of the
// local binaries. The npm installs and the compiled entrypoint are cached in
// the user's cache folder by the digest of what produced them; an empty
// cache is filled from the npm registry through the lock files.
package agentimage

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"

	"github.com/pidispatch/pidispatch/agent/entrypoint"
	"github.com/pidispatch/pidispatch/agent/image"
	"github.com/pidispatch/pidispatch/internal/image/jobimage"
)

// Tag is the tag of the offline-built agent image. It names the pinned pi
// version, so machines (and checkouts) on different pins do not rebuild
// each other's image.
const Tag = "pidispatch-agent:1.6.0-dev"

// InputsLabel holds the digest of everything the image was assembled from.
const InputsLabel = "dev.pidispatch.agentimage-inputs"

// layoutVersion changes when the image's layout (this file) changes in a
// way the inputs do not show.
const layoutVersion = "4"

// nodeTarget is where the pinned node goes; pi's `#!/usr/bin/env node`
// finds it on PATH.
const nodeTarget = "/usr/local/bin/node"

// hostPrograms are copied from the machine with the libraries they link:
// env runs pi's `#!/usr/bin/env node`, bash runs pi's bash tool.
var hostPrograms = []struct{ name, target string }{
	{"env", "/usr/bin/env"},
	{"bash", "/bin/bash"},
}

const caCerts = "/etc/ssl/certs/ca-certificates.crt"

// Inputs are the host files and digests an image is assembled from.
type Inputs struct {
	// Files maps a path in the image to the host file copied there.
	Files map[string]string
	// Digest covers the files' contents, the lock file, the entrypoint's
	// source and the layout.
	Digest string
}

// Progress receives one line per step of a build; nil discards them.
type Progress func(format string, args ...any)

var ensureMu sync.Mutex

// Ensure makes tag name an agent image assembled from the current inputs,
// building it when it does not.
func Ensure(ctx context.Context, c *client.Client, tag string, progress Progress) error {
	if progress == nil {
		progress = func(string, ...any) {}
	}
	in, err := Collect(ctx, progress)
	if err != nil {
		return err
	}
	if current, err := isCurrent(ctx, c, tag, in.Digest); err != nil || current {
		return err
	}
	ensureMu.Lock()
	defer ensureMu.Unlock()
	unlock, err := jobimage.LockFile(ctx, filepath.Join(os.TempDir(), "pidispatch-agentimage.lock"))
	if err != nil {
		return err
	}
	defer unlock()
	if current, err := isCurrent(ctx, c, tag, in.Digest); err != nil || current {
		return err
	}
	return Build(ctx, c, tag, in, progress)
}

func isCurrent(ctx context.Context, c *client.Client, tag, digest string) (bool, error) {
	img, err := c.ImageInspect(ctx, tag)
	if cerrdefs.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("inspect %s: %w", tag, err)
	}
	return img.Config != nil && img.Config.Labels[InputsLabel] == digest, nil
}

// Collect installs the pinned Node.js (once per lock file, from the npm
// registry), finds the host programs, the libraries they and node link and
// the CA certificates, and digests them with the lock files and the
// entrypoint's source.
func Collect(ctx context.Context, progress Progress) (Inputs, error) {
	if progress == nil {
		progress = func(string, ...any) {}
	}
	in := Inputs{Files: map[string]string{caCerts: caCerts}}
	if _, err := os.Stat(caCerts); err != nil {
		return Inputs{}, fmt.Errorf("CA certificates: %w (install ca-certificates)", err)
	}
	node, err := nodeBinary(ctx, progress)
	if err != nil {
		return Inputs{}, err
	}
	in.Files[nodeTarget] = node
	programs := []string{node}
	for _, p := range hostPrograms {
		path, err := exec.LookPath(p.name)
		if err != nil {
			return Inputs{}, fmt.Errorf("the agent image needs %s from this machine: %w", p.name, err)
		}
		in.Files[p.target] = path
		programs = append(programs, path)
	}
	for _, path := range programs {
		libs, err := sharedLibs(path)
		if err != nil {
			return Inputs{}, err
		}
		for _, l := range libs {
			in.Files[l] = l
		}
	}
	h := sha256.New()
	fmt.Fprintf(h, "layout %s %x %x\nlock %x\nnode lock %x\nentrypoint %s\n", layoutVersion, sha256.Sum256([]byte(dockerfile)),
		sha256.Sum256([]byte(mainSource)), sha256.Sum256(image.PackageLock), sha256.Sum256(image.NodePackageLock), entrypoint.SourceDigest())
	targets := make([]string, 0, len(in.Files))
	for t := range in.Files {
		targets = append(targets, t)
	}
	sort.Strings(targets)
	for _, t := range targets {
		sum, err := fileDigest(in.Files[t])
		if err != nil {
			return Inputs{}, err
		}
		fmt.Fprintf(h, "%s %s\n", t, sum)
	}
	in.Digest = hex.EncodeToString(h.Sum(nil)[:12])
	return in, nil
}

var digestCache sync.Map // path|size|mtime -> digest

// fileDigest hashes a file's content, remembering it per size and mtime so
// a process that ensures the image twice hashes node once.
func fileDigest(path string) (string, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return "", err
	}
	key := fmt.Sprintf("%s|%d|%d", path, fi.Size(), fi.ModTime().UnixNano())
	if d, ok := digestCache.Load(key); ok {
		return d.(string), nil
	}
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	d := hex.EncodeToString(h.Sum(nil))
	digestCache.Store(key, d)
	return d, nil
}

// sharedLibs lists the absolute paths ldd resolves for a program, the
// dynamic loader included.
func sharedLibs(program string) ([]string, error) {
	out, err := exec.Command("ldd", program).Output()
	if err != nil {
		return nil, fmt.Errorf("ldd %s: %w (the offline agent image needs a dynamically linked Linux build and ldd)", program, err)
	}
	return parseLdd(string(out)), nil
}

// parseLdd reads ldd's output: "name => /path (addr)" and "/path (addr)".
func parseLdd(out string) []string {
	var libs []string
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		for i, w := range f {
			if strings.HasPrefix(w, "/") && (i == 0 || f[i-1] == "=>") {
				libs = append(libs, w)
				break
			}
		}
	}
	return libs
}

// Build assembles the image from in and tags it.
func Build(ctx context.Context, c *client.Client, tag string, in Inputs, progress Progress) error {
	ver, err := c.ServerVersion(ctx, client.ServerVersionOptions{})
	if err != nil {
		return fmt.Errorf("docker version: %w", err)
	}
	if ver.Os != "" && ver.Os != "linux" {
		return fmt.Errorf("docker daemon runs %s containers; the agent image is linux only", ver.Os)
	}
	if ver.Arch != "" && ver.Arch != runtime.GOARCH {
		return fmt.Errorf("docker daemon runs %s containers and this machine is %s: the offline agent image carries this machine's libraries, build it on a %s machine", ver.Arch, runtime.GOARCH, ver.Arch)
	}
	modules, err := npmInstall(ctx, "npm", image.PackageJSON, image.PackageLock, entrypoint.AgentPackage, progress)
	if err != nil {
		return err
	}
	progress("compiling pi-entrypoint for linux/%s", ver.Arch)
	ep, err := compileEntrypoint(ctx, ver.Arch)
	if err != nil {
		return err
	}
	progress("assembling the image from node %s and %s", in.Files[nodeTarget], modules)
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(writeContext(pw, in, modules, ep)) }()
	labels := map[string]string{
		InputsLabel:                  in.Digest,
		entrypoint.LabelContract:     entrypoint.ContractVersion,
		entrypoint.LabelCapabilities: entrypoint.Capabilities,
		entrypoint.LabelAgent:        entrypoint.AgentPackage,
	}
	err = jobimage.BuildTar(ctx, c, tag, pr, labels, nil)
	_ = pr.CloseWithError(errors.New("build ended"))
	if err != nil {
		return fmt.Errorf("agent image: %w", err)
	}
	progress("tagged %s", tag)
	return nil
}
