#!/bin/sh
# Builds the lockhttp binaries (static, CGO_ENABLED=0) and the images, FROM scratch: nothing is
# pulled. The binaries stay in bin/ of this checkout (bin/lockhttp is the operator's doctor).
# Usage: compose/build.sh [TAG]   (default tag: latest)
set -eu
cd "$(dirname "$0")/.."
TAG=${1:-latest}
mkdir -p bin
CGO_ENABLED=0 go build -trimpath -ldflags=-s -o bin/ ./cmd/gate ./cmd/signer ./cmd/console ./cmd/lox ./cmd/lockhttp
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
echo "bin/: gate signer console lox lockhttp"
