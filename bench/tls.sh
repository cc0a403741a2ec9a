#!/bin/sh
# Decrypted HTTPS through the gate, side by side with the same requests made directly: new
# connections (a TLS handshake each, leaf certificates cached: "warm"), new connections to a new
# host each time ("cold": the signer issues a certificate for each), and keep-alive requests.
# Reports requests per second and the CPU of the gate (and the signer) per request, from /proc.
#
# Needs: go. Usage: bench/tls.sh [seconds] [workers]
set -eu
cd "$(dirname "$0")/.."
DUR=${1:-10}
C=${2:-8}
WORK=$(mktemp -d)
trap 'kill $(cat "$WORK"/pids 2>/dev/null) 2>/dev/null || true; rm -rf "$WORK"' EXIT
CGO_ENABLED=0 go build -o "$WORK/bin/" ./cmd/...
go -C bench build -o "$WORK/bin/" ./origin ./mkcert ./tlsload ./goproxymitm # bench/ is a module of its own

# An origin root and a certificate for origin.test and *.bench.test.
"$WORK/bin/mkcert" "$WORK"
"$WORK/bin/origin" -listen 127.0.0.1:0 -tls-cert "$WORK/cert.pem" -tls-key "$WORK/key.pem" >"$WORK/origin.addr" &
echo $! >>"$WORK/pids"
while [ ! -s "$WORK/origin.addr" ]; do sleep 0.05; done
ORIGIN=$(cat "$WORK/origin.addr")
PORT=${ORIGIN##*:}
cat >"$WORK/policy.toml" <<TOML
version = 1
trusted = ["origin.test", "*.bench.test"]
[floor]
allow_cidrs = ["127.0.0.1/32"]
allow_ports = [$PORT]
[sources]
local = ["127.0.0.0/8"]
[floor.hosts]
"origin.test" = "127.0.0.1"
TOML
# The cold run asks for a new name every time: map enough of them.
seq 1 20000 | awk '{printf "\"h%d.bench.test\" = \"127.0.0.1\"\n", $1}' >>"$WORK/policy.toml"
"$WORK/bin/lox" run --headless --state "$WORK/state" --policy "$WORK/policy.toml" --listen 127.0.0.1:0 --roots "$WORK/root.pem" >"$WORK/lox.out" 2>&1 &
echo $! >>"$WORK/pids"
while [ ! -s "$WORK/state/up.json" ]; do sleep 0.05; done
j() { python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(eval("d"+sys.argv[2]))' "$WORK/state/up.json" "$1"; }
GATE=$(j '["gate"]'); GATEPID=$(j '["pids"]["gate"]'); SIGNERPID=$(j '["pids"]["signer"]'); CA=$(j '["ca_cert"]')
cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }
TCK=$(getconf CLK_TCK)
per() { awk -v a="$1" -v b="$2" -v n="$3" -v t="$TCK" 'BEGIN { if (n == 0) { print "-"; exit } printf "%.0f", (a-b) / t * 1e6 / n }'; }

run() { # name, then tlsload flags
	name=$1; shift
	g0=$(cpu "$GATEPID"); s0=$(cpu "$SIGNERPID")
	set -- $("$WORK/bin/tlsload" -d "${DUR}s" -c "$C" "$@")
	g1=$(cpu "$GATEPID"); s1=$(cpu "$SIGNERPID")
	printf '%-26s %9s req/s  ok %7s  failed %5s  proxy %7s µs/req  signer %6s µs/req\n' "$name" "$3" "$1" "$2" "$(per "$g1" "$g0" "$1")" "$(per "$s1" "$s0" "$1")"
}
run "direct, new connections" -ca "$WORK/root.pem" -sni origin.test -url "https://$ORIGIN/v1/items" -new
run "gate, new conns (warm)" -ca "$CA" -proxy "$GATE" -url "https://origin.test:$PORT/v1/items" -new
# The signer issues at most 20 certificates a second (burst 100): stay under it.
run "gate, new conns (cold)" -ca "$CA" -proxy "$GATE" -url "https://h%d.bench.test:$PORT/v1/items" -new -rate 15
run "direct, keep-alive" -ca "$WORK/root.pem" -sni origin.test -url "https://$ORIGIN/v1/items"
run "gate, keep-alive" -ca "$CA" -proxy "$GATE" -url "https://origin.test:$PORT/v1/items"

# Bare goproxy decrypting everything with the same CA (certificates cached, nothing decided).
"$WORK/bin/goproxymitm" -ca-cert "$CA" -ca-key "$(dirname "$CA")/ca-key.pem" -roots "$WORK/root.pem" -map 127.0.0.1 >"$WORK/gp.addr" 2>"$WORK/gp.log" &
echo $! >>"$WORK/pids"
GPPID=$!
while [ ! -s "$WORK/gp.addr" ]; do sleep 0.05; done
GATEPID=$GPPID
run "goproxy, new conns (warm)" -ca "$CA" -proxy "http://$(cat "$WORK/gp.addr")" -url "https://origin.test:$PORT/v1/items" -new
run "goproxy, keep-alive" -ca "$CA" -proxy "http://$(cat "$WORK/gp.addr")" -url "https://origin.test:$PORT/v1/items"
echo "($(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), ${DUR}s per run, $C workers)"
