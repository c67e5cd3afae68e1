package agentimage

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"

	"github.com/pidispatch/pidispatch/agent/entrypoint"
	"github.com/pidispatch/pidispatch/agent/image"
)

// dockerfile lays the context out on an empty base. pi's home and the
// scratch folders belong to the unprivileged user the job runs as.
const dockerfile = `FROM scratch
COPY rootfs/ /
COPY --chown=1000:1000 home/ /home/pi/
ENV PATH=/usr/local/bin:/usr/bin:/bin \
    HOME=/home/pi \
    PI_OFFLINE=1 \
    PI_TELEMETRY=0 \
    PI_SKIP_VERSION_CHECK=1 \
    NODE_ENV=production \
    SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt
USER 1000:1000
WORKDIR /workspace
ENTRYPOINT ["/usr/local/bin/pi-entrypoint"]
`

// cacheDir is where npm installs and compiled entrypoints are kept.
func cacheDir() (string, error) {
	base, err := os.UserCacheDir()
	if err != nil {
		base = os.TempDir()
	}
	dir := filepath.Join(base, "pidispatch", "agentimage")
	return dir, os.MkdirAll(dir, 0o755)
}

// npmInstall installs a lock file's packages once per lock file digest
// (cached under prefix) and returns the node_modules folder. what names the
// install in messages.
func npmInstall(ctx context.Context, prefix string, manifest, lock []byte, what string, progress Progress) (string, error) {
	cache, err := cacheDir()
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(lock)
	dir := filepath.Join(cache, prefix+"-"+hex.EncodeToString(sum[:8]))
	modules := filepath.Join(dir, "node_modules")
	if _, err := os.Stat(filepath.Join(dir, ".complete")); err == nil {
		return modules, nil
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		return "", fmt.Errorf("the offline agent image needs npm to install %s: %w", what, err)
	}
	tmp, err := os.MkdirTemp(cache, prefix+"-tmp-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	for name, data := range map[string][]byte{"package.json": manifest, "package-lock.json": lock} {
		if err := os.WriteFile(filepath.Join(tmp, name), data, 0o644); err != nil {
			return "", err
		}
	}
	progress("npm ci: installing %s", what)
	cmd := exec.CommandContext(ctx, npm, "ci", "--omit=dev", "--ignore-scripts", "--no-audit", "--no-fund", "--loglevel=error")
	cmd.Dir = tmp
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("npm ci (%s): %w: %s", what, err, bytes.TrimSpace(out))
	}
	if err := os.WriteFile(filepath.Join(tmp, ".complete"), nil, 0o644); err != nil {
		return "", err
	}
	_ = os.RemoveAll(dir)
	if err := os.Rename(tmp, dir); err != nil {
		return "", err
	}
	return modules, nil
}

// nodeArch maps Go's architecture names to Node.js's.
var nodeArch = map[string]string{"amd64": "x64", "arm64": "arm64"}

// nodeBinary installs agent/image/node/package-lock.json (npm installs only the
// package of this machine's platform) and returns its node binary.
func nodeBinary(ctx context.Context, progress Progress) (string, error) {
	arch, ok := nodeArch[runtime.GOARCH]
	if runtime.GOOS != "linux" || !ok {
		return "", fmt.Errorf("the offline agent image is built on linux/amd64 or linux/arm64, not %s/%s", runtime.GOOS, runtime.GOARCH)
	}
	modules, err := npmInstall(ctx, "node", image.NodePackageJSON, image.NodePackageLock, "Node.js from agent/image/node/package-lock.json", progress)
	if err != nil {
		return "", err
	}
	bin := filepath.Join(modules, "node-linux-"+arch, "bin", "node")
	if _, err := os.Stat(bin); err != nil {
		return "", fmt.Errorf("agent/image/node/package-lock.json installed no node for linux/%s: %w", arch, err)
	}
	return bin, nil
}

// mainSource is cmd/pi-entrypoint's main (a test keeps them equal), for
// the scratch module.
//
//go:embed main.go.txt
var mainSource string

// compileEntrypoint builds the embedded entrypoint source as a static
// binary for arch in a scratch module (so it works from any folder), cached
// by the source's digest.
func compileEntrypoint(ctx context.Context, arch string) ([]byte, error) {
	cache, err := cacheDir()
	if err != nil {
		return nil, err
	}
	out := filepath.Join(cache, "pi-entrypoint-"+entrypoint.SourceDigest()+"-"+arch)
	if b, err := os.ReadFile(out); err == nil {
		return b, nil
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		return nil, fmt.Errorf("the go command is needed to build pi-entrypoint (put it on PATH, e.g. /usr/local/go/bin): %w", err)
	}
	dir, err := os.MkdirTemp("", "pidispatch-entrypoint-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	files := map[string][]byte{"go.mod": []byte("module pientrypoint\n\ngo 1.22\n"), "main.go": []byte(mainSource)}
	for name, data := range entrypoint.Source() {
		files[filepath.Join("entrypoint", name)] = data
	}
	for name, data := range files {
		_ = os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755)
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			return nil, err
		}
	}
	bin := filepath.Join(dir, "pi-entrypoint")
	cmd := exec.CommandContext(ctx, goBin, "build", "-trimpath", "-buildvcs=false", "-ldflags=-s -w", "-o", bin, ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch,
		"GOFLAGS=", "GOWORK=off", "GOTOOLCHAIN=local", "GO111MODULE=on")
	if msg, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("go build pi-entrypoint: %w: %s", err, bytes.TrimSpace(msg))
	}
	b, err := os.ReadFile(bin)
	if err != nil {
		return nil, err
	}
	_ = os.WriteFile(out+".tmp", b, 0o755)
	_ = os.Rename(out+".tmp", out)
	return b, nil
}

// writeContext writes the build context: the Dockerfile, rootfs/ (the
// image's files) and home/ (pi's home folder).
func writeContext(w io.Writer, in Inputs, modules string, ep []byte) error {
	tw := tar.NewWriter(w)
	dirs := []struct {
		name string
		mode int64
	}{
		{"rootfs/", 0o755}, {"rootfs/tmp/", 0o1777}, {"rootfs/workspace/", 0o777}, {"rootfs/job/", 0o755},
		{"rootfs/run/", 0o755}, {"rootfs/run/pidispatch/", 0o755}, {"rootfs/etc/", 0o755}, {"home/", 0o755},
		{"rootfs/usr/local/bin/", 0o755}, {"rootfs/opt/", 0o755}, {"rootfs/opt/pi/", 0o755},
	}
	for _, d := range dirs {
		if err := tw.WriteHeader(&tar.Header{Name: d.name, Mode: d.mode, Typeflag: tar.TypeDir}); err != nil {
			return err
		}
	}
	small := map[string][]byte{
		"Dockerfile":                         []byte(dockerfile),
		"rootfs/etc/passwd":                  []byte("root:x:0:0:root:/root:/bin/sh\npi:x:1000:1000:pi:/home/pi:/bin/bash\n"),
		"rootfs/etc/group":                   []byte("root:x:0:\npi:x:1000:\n"),
		"rootfs/usr/local/bin/pi-entrypoint": ep,
	}
	names := make([]string, 0, len(small))
	for n := range small {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if err := writeBytes(tw, n, 0o755, small[n]); err != nil {
			return err
		}
	}
	links := map[string]string{
		"rootfs/bin/sh":           "bash",
		"rootfs/usr/local/bin/pi": "/opt/pi/node_modules/.bin/pi",
	}
	for n, target := range links {
		if err := tw.WriteHeader(&tar.Header{Name: n, Linkname: target, Mode: 0o777, Typeflag: tar.TypeSymlink}); err != nil {
			return err
		}
	}
	targets := make([]string, 0, len(in.Files))
	for t := range in.Files {
		targets = append(targets, t)
	}
	sort.Strings(targets)
	for _, t := range targets {
		if err := writeHostFile(tw, "rootfs"+t, in.Files[t]); err != nil {
			return err
		}
	}
	if err := writeTree(tw, modules, "rootfs/opt/pi/node_modules"); err != nil {
		return err
	}
	return tw.Close()
}

func writeBytes(tw *tar.Writer, name string, mode int64, data []byte) error {
	if err := tw.WriteHeader(&tar.Header{Name: name, Mode: mode, Size: int64(len(data)), Typeflag: tar.TypeReg}); err != nil {
		return err
	}
	_, err := tw.Write(data)
	return err
}

// writeHostFile copies a host file (following symlinks) to name, with the
// parent folders the tar needs.
func writeHostFile(tw *tar.Writer, name, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if err := tw.WriteHeader(&tar.Header{Name: name, Mode: int64(fi.Mode().Perm()), Size: fi.Size(), Typeflag: tar.TypeReg}); err != nil {
		return err
	}
	_, err = io.Copy(tw, f)
	return err
}

// writeTree copies a folder: directories, regular files and symlinks.
func writeTree(tw *tar.Writer, root, prefix string) error {
	return filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		name := prefix
		if rel != "." {
			name = prefix + "/" + filepath.ToSlash(rel)
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			return tw.WriteHeader(&tar.Header{Name: name + "/", Mode: 0o755, Typeflag: tar.TypeDir})
		case info.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(path)
			if err != nil {
				return err
			}
			return tw.WriteHeader(&tar.Header{Name: name, Linkname: target, Mode: 0o777, Typeflag: tar.TypeSymlink})
		case info.Mode().IsRegular():
			return writeHostFile(tw, name, path)
		}
		return nil // sockets, devices: not part of a package
	})
}
