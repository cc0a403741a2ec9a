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
go build -o "$WORK/bin/" ./cmd/... ./bench/origin ./bench/connectfwd

# An origin root and a certificate for origin.test and *.bench.test.
cat >"$WORK/mkcert.go" <<'GO'
package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"time"
)

func main() {
	dir := os.Args[1]
	rk, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	rt := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "bench root"}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(48 * time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	rd, _ := x509.CreateCertificate(rand.Reader, rt, rt, &rk.PublicKey, rk)
	root, _ := x509.ParseCertificate(rd)
	lk, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	lt := &x509.Certificate{SerialNumber: big.NewInt(2), DNSNames: []string{"origin.test", "*.bench.test"}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(48 * time.Hour), ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, KeyUsage: x509.KeyUsageDigitalSignature}
	ld, _ := x509.CreateCertificate(rand.Reader, lt, root, &lk.PublicKey, rk)
	kd, _ := x509.MarshalPKCS8PrivateKey(lk)
	os.WriteFile(dir+"/root.pem", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: rd}), 0o644)
	os.WriteFile(dir+"/cert.pem", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ld}), 0o644)
	os.WriteFile(dir+"/key.pem", pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kd}), 0o600)
}
GO
(cd "$WORK" && go run mkcert.go "$WORK")
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
