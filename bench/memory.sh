#!/bin/sh
# The memory regression benchmark, one command: the idle stack's resident memory per process
# (idlerss.sh), then 1,000 requests held on ASKs at once, each in a decrypted keep-alive tunnel
# of its own, through the whole stack for HOLD (soak, -ask-share 1.0: the gate's and the stack's
# RSS every 10 s, the goroutines, each process at the end). bench/RESULTS.md keeps the figures.
#
# Usage: bench/memory.sh [BINDIR] [HOLD]  (BINDIR: binaries built with CGO_ENABLED=0 go build -o BINDIR/
# ./cmd/...; default: built now into a temporary directory. HOLD: default 40s)
set -eu
cd "$(dirname "$0")/.."
HOLD=${2:-40s}
BIN=${1:-}
if [ -z "$BIN" ]; then
	BIN=$(mktemp -d)
	trap 'rm -rf "$BIN"' EXIT
	CGO_ENABLED=0 go build -o "$BIN/" ./cmd/...
fi
BIN=$(cd "$BIN" && pwd)
echo "## idle stack"
sh bench/idlerss.sh "$BIN" 10
echo
echo "## 1,000 held ASKs"
go -C bench run ./soak -bin "$BIN" -conns 1000 -ask-share 1.0 -pace 10m -d "$HOLD"
