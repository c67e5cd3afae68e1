#!/usr/bin/env bash
# Builds the Gitea the forge tests run (StartGitea) from the Go module proxy, CGO off,
# into ${XDG_CACHE_HOME:-$HOME/.cache}/pidispatch/bin/gitea-<version>. A cached build is
# kept; the build takes several minutes, so CI starts it early in the background.
set -euo pipefail
version=${GITEA_VERSION:-v1.27.3}
bin_dir=${XDG_CACHE_HOME:-$HOME/.cache}/pidispatch/bin
out=$bin_dir/gitea-$version
if [ -x "$out" ]; then
	echo "$out"
	exit 0
fi
mkdir -p "$bin_dir"
src=$(go mod download -json "code.gitea.io/gitea@$version" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
[ -n "$src" ] || { echo "build-gitea: no module source for code.gitea.io/gitea@$version" >&2; exit 1; }
tmp=$out.tmp.$$
trap 'rm -f "$tmp"' EXIT
rm -f "$out.failed"
if ! (cd "$src" && CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -o "$tmp" \
	-ldflags "-s -w -X main.Version=${version#v}" .) 2>"$tmp.log"; then
	# The tests waiting for the build fail at once, with its error.
	tail -20 "$tmp.log" >"$out.failed"
	cat "$tmp.log" >&2
	rm -f "$tmp.log"
	exit 1
fi
rm -f "$tmp.log"
mv "$tmp" "$out"
echo "$out"
