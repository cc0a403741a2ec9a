#!/bin/sh
# Builds the lockhttp binaries (static, CGO_ENABLED=0) and the images, FROM scratch: nothing is
# pulled. The binaries stay in bin/ of this checkout (bin/lockhttp is the operator's doctor).
# Usage: compose/build.sh [TAG]   (default tag: latest)
set -eu
cd "$(dirname "$0")/.."
TAG=${1:-latest}
mkdir -p bin
# Every binary's --version names this build even where the toolchain records no revision
# (GOFLAGS=-buildvcs=false): the commit (git describe: a tag, the commits since, the hash, and
# -dirty for changes not committed), or outside git a hash of the sources.
stamp=$(git describe --always --dirty 2>/dev/null || true)
if [ -z "$stamp" ]; then
	stamp=tree-$(find go.mod go.sum cmd internal compose -type f -name '*' | LC_ALL=C sort | xargs cat | sha256sum | cut -c1-12)
fi
CGO_ENABLED=0 go build -trimpath -ldflags="-s -X github.com/lockhttp/lockhttp/internal/buildinfo.stamp=$stamp" \
	-o bin/ ./cmd/gate ./cmd/signer ./cmd/console ./cmd/lox ./cmd/lockhttp
build() { # image, binaries...
	img=$1
	shift
	ctx=$(mktemp -d)
	cp "compose/images/$img/Dockerfile" "$ctx/"
	for b in "$@"; do cp "bin/$b" "$ctx/"; done
	docker build -q -t "lockhttp-$img:$TAG" "$ctx" >/dev/null
	rm -rf "$ctx"
	echo "lockhttp-$img:$TAG"
}
build gate gate
build signer signer
build console console lox lockhttp
build tools lockhttp
echo "bin/: gate signer console lox lockhttp (build $stamp)"
