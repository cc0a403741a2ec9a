#!/bin/sh
# HTTP/2 through the gate, side by side with the same load direct: h2load (nghttp2-client) with
# few connections and many streams each, to an HTTPS origin that speaks HTTP/2. Through the gate
# each connection is a decrypted tunnel (connectfwd opens the CONNECT: h2load speaks no proxy
# protocol), HTTP/2 to the client and to the origin, every stream decided and audited. Reports
# requests per second and the gate's CPU per request, from /proc.
#
# Needs: go, h2load. Usage: bench/h2.sh [seconds] [connections] [streams per connection]
set -eu
cd "$(dirname "$0")/.."
DUR=${1:-10}
C=${2:-4}
M=${3:-16}
WORK=$(mktemp -d)
trap 'kill $(cat "$WORK"/pids 2>/dev/null) 2>/dev/null || true; rm -rf "$WORK"' EXIT
CGO_ENABLED=0 go build -o "$WORK/bin/" ./cmd/...
go -C bench build -o "$WORK/bin/" ./origin ./connectfwd ./mkcert # bench/ is a module of its own

# An origin root and a certificate for origin.test and *.bench.test.
"$WORK/bin/mkcert" "$WORK"
"$WORK/bin/origin" -listen 127.0.0.1:0 -tls-cert "$WORK/cert.pem" -tls-key "$WORK/key.pem" >"$WORK/origin.addr" &
echo $! >>"$WORK/pids"
while [ ! -s "$WORK/origin.addr" ]; do sleep 0.05; done
ORIGIN=$(cat "$WORK/origin.addr")
PORT=${ORIGIN##*:}
cat >"$WORK/policy.toml" <<TOML
version = 1
trusted = ["origin.test"]
[floor]
allow_cidrs = ["127.0.0.1/32"]
allow_ports = [$PORT]
[sources]
local = ["127.0.0.0/8"]
[floor.hosts]
"origin.test" = "127.0.0.1"
TOML
"$WORK/bin/lox" run --headless --state "$WORK/state" --policy "$WORK/policy.toml" --listen 127.0.0.1:0 --roots "$WORK/root.pem" >"$WORK/lox.out" 2>&1 &
echo $! >>"$WORK/pids"
while [ ! -s "$WORK/state/up.json" ]; do sleep 0.05; done
j() { python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(eval("d"+sys.argv[2]))' "$WORK/state/up.json" "$1"; }
LISTEN=$(j '["listen"]'); GATEPID=$(j '["pids"]["gate"]')
"$WORK/bin/connectfwd" -proxy "$LISTEN" -target "origin.test:$PORT" >"$WORK/fwd.addr" &
echo $! >>"$WORK/pids"
while [ ! -s "$WORK/fwd.addr" ]; do sleep 0.05; done
cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }
TCK=$(getconf CLK_TCK)

run() { # name, address to connect to, pid whose CPU to count
	g0=$(cpu "$3")
	out=$(h2load -D "$DUR" -c "$C" -m "$M" --connect-to "$2" "https://origin.test:$PORT/v1/items")
	g1=$(cpu "$3")
	rps=$(echo "$out" | awk '/^finished in/ {print $4}')
	done=$(echo "$out" | awk '/^requests:/ {print $8}')
	proto=$(echo "$out" | awk '/^Application protocol:/ {print $3}')
	per=$(awk -v a="$g1" -v b="$g0" -v n="$done" -v t="$TCK" 'BEGIN { if (n == 0) { print "-"; exit } printf "%.0f", (a-b) / t * 1e6 / n }')
	printf '%-22s %s %9s req/s  succeeded %7s  %s %6s µs/req\n' "$1" "$proto" "$rps" "$done" "$4" "$per"
}
run "direct" "$ORIGIN" "$(cat "$WORK/pids" | head -1)" "origin"
run "through the gate" "$(cat "$WORK/fwd.addr")" "$GATEPID" "gate"
echo "($(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), ${DUR}s per run, $C connections, $M streams each)"
