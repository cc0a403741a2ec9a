#!/bin/sh
# Plain-HTTP proxying, side by side: the same wrk load directly to an origin, through the lockhttp
# gate (lox run with a policy that frees the origin) and through squid (no cache). Reports
# requests per second and the proxy process's CPU per request (utime + stime from /proc).
#
# Needs: go, wrk, squid (apt-get install -y wrk squid). Usage: bench/plain.sh [seconds] [connections]
set -eu
cd "$(dirname "$0")/.."
DUR=${1:-10}
CONNS=${2:-16}
WORK=$(mktemp -d)
trap 'kill $(cat "$WORK"/pids 2>/dev/null) 2>/dev/null || true; rm -rf "$WORK"' EXIT

CGO_ENABLED=0 go build -o "$WORK/bin/" ./cmd/...
go -C bench build -o "$WORK/bin/" ./origin # bench/ is a module of its own
"$WORK/bin/origin" -listen 127.0.0.1:0 >"$WORK/origin.addr" &
echo $! >>"$WORK/pids"
while [ ! -s "$WORK/origin.addr" ]; do sleep 0.05; done
ORIGIN=$(cat "$WORK/origin.addr")
PORT=${ORIGIN##*:}

cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }   # clock ticks
TCK=$(getconf CLK_TCK)

# wrk through a proxy: absolute-form request line, Host of the origin.
cat >"$WORK/proxy.lua" <<LUA
wrk.path = "http://origin.test:$PORT/v1/items"
wrk.headers["Host"] = "origin.test:$PORT"
LUA

run() { # name url script pid
	name=$1 url=$2 script=$3 pid=$4
	before=$(cpu "$pid")
	if [ -n "$script" ]; then
		out=$(wrk -t2 -c"$CONNS" -d"${DUR}s" -s "$script" "$url")
	else
		out=$(wrk -t2 -c"$CONNS" -d"${DUR}s" "$url")
	fi
	after=$(cpu "$pid")
	reqs=$(echo "$out" | awk '/requests in/ {print $1}')
	rps=$(echo "$out" | awk '/Requests\/sec/ {print $2}')
	non2xx=$(echo "$out" | awk '/Non-2xx/ {print $5}')
	cpu_us=$(awk -v a="$after" -v b="$before" -v n="$reqs" -v t="$TCK" 'BEGIN { printf "%.1f", (a-b) / t * 1e6 / n }')
	printf '%-8s %10s req/s  %8s µs CPU/request (process %s)  non-2xx: %s\n' "$name" "$rps" "$cpu_us" "$pid" "${non2xx:-0}"
}

# Direct: the origin's own CPU per request, for scale.
run direct "http://$ORIGIN/v1/items" "" "$(pgrep -f "$WORK/bin/origin")"

# lockhttp
cat >"$WORK/policy.toml" <<TOML
version = 1
trusted = ["origin.test"]
[floor]
allow_cidrs = ["127.0.0.1/32"]
allow_ports = [$PORT]
[floor.hosts]
"origin.test" = "127.0.0.1"
[sources]
local = ["127.0.0.0/8"]
TOML
"$WORK/bin/lox" run --headless --state "$WORK/state" --policy "$WORK/policy.toml" --listen 127.0.0.1:0 >"$WORK/lox.out" 2>&1 &
echo $! >>"$WORK/pids"
while [ ! -s "$WORK/state/up.json" ]; do sleep 0.05; done
GATE=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["listen"])' "$WORK/state/up.json")
GATEPID=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["pids"]["gate"])' "$WORK/state/up.json")
run lockhttp "http://$GATE" "$WORK/proxy.lua" "$GATEPID"

# squid, no cache, access log on (lockhttp audits every request too)
if command -v squid >/dev/null; then
	# squid drops to its own user: give it a directory it can write.
	SQ="$WORK/squid"
	mkdir -p "$SQ" && chmod 777 "$SQ" && chmod 755 "$WORK"
	echo "127.0.0.1 origin.test" >"$SQ/hosts"
	SQUIDPORT=$((PORT + 1))
	cat >"$WORK/squid.conf" <<CONF
http_port 127.0.0.1:$SQUIDPORT
acl localnet src 127.0.0.0/8
acl SafePorts port $PORT
http_access allow localnet SafePorts
http_access deny all
cache deny all
cache_mem 0
hosts_file $SQ/hosts
access_log stdio:$SQ/access.log
cache_log $SQ/cache.log
pid_filename $SQ/squid.pid
coredump_dir $SQ
workers 1
CONF
	squid -N -f "$WORK/squid.conf" 2>"$SQ/stderr" &
	echo $! >>"$WORK/pids"
	tries=0
	until curl -s -o /dev/null -x "http://127.0.0.1:$SQUIDPORT" "http://origin.test:$PORT/" 2>/dev/null; do
		tries=$((tries + 1))
		if [ $tries -gt 100 ]; then echo "squid did not start:"; cat "$SQ/stderr" "$SQ/cache.log"; exit 1; fi
		sleep 0.1
	done
	run squid "http://127.0.0.1:$SQUIDPORT" "$WORK/proxy.lua" "$(pgrep -f "squid -N -f $WORK/squid.conf" | head -1)"
fi
echo "($(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), ${DUR}s at $CONNS connections)"
