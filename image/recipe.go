// Package image holds the agent image's recipe: the npm manifest and lock
// file that pin the pi coding agent, and the production Dockerfile beside
// them. The offline build (internal/agentimage) installs exactly this lock
// file, so the image tests run is the image operators build.
package image

import _ "embed"

// PackageJSON and PackageLock are image/package.json and
// image/package-lock.json.
var (
	//go:embed package.json
	PackageJSON []byte
	//go:embed package-lock.json
	PackageLock []byte
)
