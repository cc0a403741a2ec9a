#!/bin/sh
# The idle stack's resident memory: lox run --headless with the shipped policy, each process's
# VmRSS, RssAnon and RssFile (/proc/PID/status) and its Pss (/proc/PID/smaps_rollup), read after
# the stack has been idle for SETTLE seconds; the binaries' sizes beside them.
#
# Usage: bench/idlerss.sh [BINDIR] [SETTLE]  (BINDIR: binaries built with CGO_ENABLED=0 go build -o BINDIR/
# ./cmd/...; default: built now into a temporary directory)
set -eu
cd "$(dirname "$0")/.."
SETTLE=${2:-10}
WORK=$(mktemp -d)
trap 'kill $(cat "$WORK"/pids 2>/dev/null) 2>/dev/null || true; rm -rf "$WORK"' EXIT
BIN=${1:-}
if [ -z "$BIN" ]; then
	BIN=$WORK/bin
	CGO_ENABLED=0 go build -o "$BIN/" ./cmd/...
fi

"$BIN/lox" run --headless --state "$WORK/state" --listen 127.0.0.1:0 --hub-listen 127.0.0.1:0 >"$WORK/lox.out" 2>&1 &
echo $! >>"$WORK/pids"
tries=0
while [ ! -s "$WORK/state/up.json" ]; do
	tries=$((tries + 1))
	if [ $tries -gt 600 ]; then echo "lox did not come up:"; cat "$WORK/lox.out"; exit 1; fi
	sleep 0.05
done
sleep "$SETTLE"

kib() { awk -v k="$2:" '$1 == k {print $2}' "$1"; }
mib() { awk -v n="$1" 'BEGIN { printf "%.1f", n / 1024 }'; }
printf '%-8s %12s %8s %8s %8s %8s %8s\n' process "binary B" VmRSS RssAnon RssFile Pss Pss_File
for name in gate console signer lox; do
	if [ "$name" = lox ]; then
		pid=$(cat "$WORK/pids")
	else
		pid=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["pids"][sys.argv[2]])' "$WORK/state/up.json" "$name")
	fi
	st=/proc/$pid/status sm=/proc/$pid/smaps_rollup
	printf '%-8s %12s %8s %8s %8s %8s %8s\n' "$name" "$(stat -c %s "$BIN/$name")" \
		"$(mib "$(kib "$st" VmRSS)")" "$(mib "$(kib "$st" RssAnon)")" "$(mib "$(kib "$st" RssFile)")" \
		"$(mib "$(kib "$sm" Pss)")" "$(mib "$(kib "$sm" Pss_File)")"
done
echo "(MiB but the binary's size; idle ${SETTLE}s after up.json; $(nproc) cores, $(uname -r))"
