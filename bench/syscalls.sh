#!/bin/sh
# System calls per request of each proxy, for the yardstick's two keep-alive scenarios: N
# decrypted keep-alive requests (one curl, one CONNECT tunnel, one request after the other), then
# N plain-HTTP requests (one curl, one keep-alive connection, absolute-form), through the gate
# (lox run --headless), bare goproxy MITM and squid with ssl-bump (when installed: Debian's
# squid-openssl), each proxy's process counted with strace -c -f while the N requests run, after
# one request to warm its certificate cache and its upstream connection; HTTP/1.1 on both sides,
# as the anchors measure it. Prints the calls per request, in all and the most frequent. One
# request at a time: what a request costs alone (the gate's audit writes then carry one record
# each; under the yardstick's 50 connections they are shared, see bench/RESULTS.md).
#
# Needs: go, curl, strace; squid-openssl for the squid row. Usage: bench/syscalls.sh [N] [BINDIR]
set -eu
cd "$(dirname "$0")/.."
N=${1:-2000}
BIN=${2:-}
WORK=$(mktemp -d)
chmod 755 "$WORK" # squid runs as proxy
trap 'kill $(cat "$WORK"/pids 2>/dev/null) 2>/dev/null || true; [ -n "${KEEP:-}" ] || rm -rf "$WORK"' EXIT
if [ -z "$BIN" ]; then
	BIN=$WORK/bin
	CGO_ENABLED=0 go build -o "$BIN/" ./cmd/...
fi
BIN=$(cd "$BIN" && pwd)
go -C bench build -o "$WORK/tools/" ./origin ./mkcert ./goproxymitm # bench/ is a module of its own
"$WORK/tools/mkcert" "$WORK"
"$WORK/tools/origin" -listen 127.0.0.1:0 -size 1024 -http1 -tls-cert "$WORK/cert.pem" -tls-key "$WORK/key.pem" >"$WORK/origin.addr" &
echo $! >>"$WORK/pids"
while [ ! -s "$WORK/origin.addr" ]; do sleep 0.05; done
PORT=$(sed 's/.*://' "$WORK/origin.addr")
URL=https://origin.test:$PORT/
"$WORK/tools/origin" -listen 127.0.0.1:0 -size 1024 >"$WORK/plain.addr" &
echo $! >>"$WORK/pids"
while [ ! -s "$WORK/plain.addr" ]; do sleep 0.05; done
PPORT=$(sed 's/.*://' "$WORK/plain.addr")
PURL=http://origin.test:$PPORT/
cat >"$WORK/policy.toml" <<TOML
version = 1
trusted = ["origin.test"]
[floor]
allow_cidrs = ["127.0.0.1/32"]
allow_ports = [$PORT, $PPORT]
[floor.hosts]
"origin.test" = "127.0.0.1"
[sources]
local = ["127.0.0.0/8"]
TOML
i=0
while [ $i -lt "$N" ]; do echo "url = \"$URL\""; echo "output = /dev/null"; i=$((i + 1)); done >"$WORK/urls"
sed "s|$URL|$PURL|" "$WORK/urls" >"$WORK/purls"

# count NAME PID PROXY CA [plain]: the N requests through PROXY (decrypted, or plain HTTP), PID's
# system calls meanwhile.
count() {
	u=$URL urls=$WORK/urls
	if [ "${5:-}" = plain ]; then u=$PURL urls=$WORK/purls; fi
	curl -sS --http1.1 -o /dev/null -x "$3" --cacert "$4" "$u"
	strace -c -f -q -o "$WORK/$1.strace" -p "$2" &
	st=$!
	sleep 1 # strace attaches
	got=$(curl -sS --http1.1 -x "$3" --cacert "$4" -K "$urls" -w '%{http_code}\n' | grep -c '^200$' || true)
	sleep 0.5
	kill -INT $st
	wait $st || true
	# strace -c: % time, seconds, usecs/call, calls, [errors,] syscall; then a total row.
	awk '$1 ~ /^[0-9.]+$/ { print $4, $NF }' "$WORK/$1.strace" | sort -rn >"$WORK/$1.calls"
	total=$(awk '$2 == "total" { print $1 }' "$WORK/$1.calls")
	top=$(awk -v n="$N" '$2 != "total" { printf " %s %.2f", $2, $1 / n }' "$WORK/$1.calls" | cut -d' ' -f2-13)
	awk -v name="$1" -v n="$N" -v got="$got" -v total="$total" -v top="$top" \
		'BEGIN { printf "%-14s %5d/%d answered 200  %6.1f calls/request: %s\n", name, got, n, total / n, top }'
}
# both NAME PID PROXY CA: the decrypted requests, then the plain ones.
both() {
	count "$1 https" "$2" "$3" "$4"
	count "$1 http" "$2" "$3" "$4" plain
}

"$BIN/lox" run --headless --state "$WORK/state" --policy "$WORK/policy.toml" --listen 127.0.0.1:0 --roots "$WORK/root.pem" >"$WORK/lox.out" 2>&1 &
echo $! >>"$WORK/pids"
while [ ! -s "$WORK/state/up.json" ]; do sleep 0.05; done
j() { python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(eval("d"+sys.argv[2]))' "$WORK/state/up.json" "$1"; }
CA=$(j '["ca_cert"]')
both gate "$(j '["pids"]["gate"]')" "$(j '["gate"]')" "$CA"

"$WORK/tools/goproxymitm" -ca-cert "$CA" -ca-key "$(dirname "$CA")/ca-key.pem" -roots "$WORK/root.pem" -map 127.0.0.1 >"$WORK/gp.addr" 2>"$WORK/gp.log" &
echo $! >>"$WORK/pids"
while [ ! -s "$WORK/gp.addr" ]; do sleep 0.05; done
both goproxy "$!" "http://$(cat "$WORK/gp.addr")" "$CA"

SQUID=$(command -v squid || echo /usr/sbin/squid)
if [ -x "$SQUID" ] && [ -x /usr/lib/squid/security_file_certgen ]; then
	mkdir -p "$WORK/squid"
	openssl req -x509 -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$WORK/squid/ca.key" \
		-out "$WORK/squid/ca.pem" -days 2 -subj "/CN=lockhttp bench squid CA" \
		-addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
	/usr/lib/squid/security_file_certgen -c -s "$WORK/squid/ssl_db" -M 16MB >/dev/null
	echo "127.0.0.1 origin.test" >"$WORK/squid/hosts"
	SP=$((PORT + 1))
	cat >"$WORK/squid/squid.conf" <<CONF
http_port 127.0.0.1:$SP ssl-bump tls-cert=$WORK/squid/ca.pem tls-key=$WORK/squid/ca.key generate-host-certificates=on dynamic_cert_mem_cache_size=16MB
sslcrtd_program /usr/lib/squid/security_file_certgen -s $WORK/squid/ssl_db -M 16MB
sslcrtd_children 5 startup=1 idle=1
acl step1 at_step SslBump1
acl step2 at_step SslBump2
ssl_bump peek step1
ssl_bump stare step2
ssl_bump bump all
tls_outgoing_options cafile=$WORK/root.pem
http_access allow localhost
http_access deny all
cache deny all
cache_mem 0 MB
access_log none
cache_log $WORK/squid/cache.log
pid_filename $WORK/squid/squid.pid
coredump_dir $WORK/squid
shutdown_lifetime 1 seconds
pinger_enable off
hosts_file $WORK/squid/hosts
dns_nameservers 127.0.0.1
visible_hostname lockhttp-bench
forwarded_for delete
CONF
	chown -R proxy:proxy "$WORK/squid"
	"$SQUID" -N -f "$WORK/squid/squid.conf" >"$WORK/squid/out" 2>&1 &
	echo $! >>"$WORK/pids"
	SQPID=$!
	tries=0
	until curl -s -o /dev/null "http://127.0.0.1:$SP/" 2>/dev/null; do
		tries=$((tries + 1)); [ $tries -lt 100 ] || { echo "squid did not start"; exit 1; }; sleep 0.1
	done
	cat "$WORK/squid/ca.pem" "$WORK/root.pem" >"$WORK/squid/trust.pem"
	both squid "$SQPID" "http://127.0.0.1:$SP" "$WORK/squid/trust.pem"
else
	echo "squid    (not installed: apt-get install squid-openssl)"
fi
echo "($N keep-alive requests on one connection, decrypted (https) or plain (http), 1 KiB answers; $(nproc) cores, $(uname -r))"
