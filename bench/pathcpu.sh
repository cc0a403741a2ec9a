#!/usr/bin/env bash
# The yardstick's two keep-alive scenarios (../shared/perf/gate-vs-anchors.sh) for one or more
# builds of the stack side by side with their anchors, in one interleaved run: plain HTTP (wrk
# -t2 -c50, absolute-form) through squid and each build, decrypted HTTPS keep-alive (the perf
# loadgen, 50 workers) through bare goproxy MITM and each build. Each build runs as the yardstick
# runs it (lox run --headless, its audit on disk). Reports req/s and the CPU per request of each
# proxy's process tree (utime+stime from /proc, the stack's four processes summed), per rep, and
# each build's ratio to its anchor in the same rep; compare builds only within one run.
#
# usage: bench/pathcpu.sh [-r REPS] [-d SECONDS] [-s http,https] [-c] NAME=BINDIR [NAME=BINDIR ...]
#   BINDIR: go build -o BINDIR/ ./cmd/... (lox, gate, console, signer)
#   -c: also count the system calls of each proxy's process tree under the load (perf stat on the
#   raw_syscalls and sched tracepoints; it slows every proxy a little, so take CPU figures from a
#   run without it) and print them per request: all, read, write, recvfrom, futex, epoll_pwait,
#   nanosleep, and context switches.
#   PERF_DIR: the yardstick's directory (default ../shared/perf beside the repository, else
#   /work/shared/perf): its origin, loadgen, goproxy-mitm, squid.conf.in and wrk script.
# Needs: go, wrk, openssl, squid-openssl (as the yardstick installs them). Run it under the e2e
# lock: flock /tmp/lockhttp-e2e.lock bench/pathcpu.sh ...
set -euo pipefail
cd "$(dirname "$0")/.."
REPS=3 DUR=10 SCEN=http,https COUNT=
while getopts r:d:s:c o; do
	case $o in
	r) REPS=$OPTARG ;; d) DUR=$OPTARG ;; s) SCEN=$OPTARG ;; c) COUNT=1 ;;
	*) sed -n 2,19p "$0"; exit 2 ;;
	esac
done
shift $((OPTIND - 1))
[[ $# -ge 1 ]] || { sed -n 2,19p "$0"; exit 2; }
PERF_DIR=${PERF_DIR:-$(cd .. && pwd)/shared/perf}
[[ -d $PERF_DIR/loadgen ]] || PERF_DIR=/work/shared/perf
HOST=origin.perf-lockhttp.dev
grep -qE "^127\.0\.0\.1[[:space:]].*\b$HOST\b" /etc/hosts || echo "127.0.0.1 $HOST" >>/etc/hosts

W=$(mktemp -d /tmp/pathcpu.XXXXXX)
chmod 755 "$W" # squid runs as proxy
PIDS=()
cleanup() {
	for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	[[ -n ${KEEP:-} ]] || rm -rf "$W"
}
trap cleanup EXIT
log() { echo "$(date -u +%H:%M:%S) $*" >&2; }

(cd "$PERF_DIR" && go build -o "$W/tools/" ./origin ./loadgen) && (cd "$PERF_DIR/goproxy-mitm" && go build -o "$W/tools/" .)

# The origin: its CA and an ECDSA leaf for HOST, as the yardstick makes them.
mkdir -p "$W/origin" "$W/squid"
mkca() { openssl req -x509 -new "${@:3}" -nodes -keyout "$1/ca.key" -out "$1/ca.pem" -days 2 -subj "/CN=$2" \
	-addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null; }
mkca "$W/origin" "pathcpu origin CA" -newkey ec -pkeyopt ec_paramgen_curve:P-256
openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$W/origin/leaf.key" \
	-out "$W/origin/leaf.csr" -subj "/CN=$HOST" 2>/dev/null
printf 'subjectAltName=DNS:%s,DNS:localhost,IP:127.0.0.1\nbasicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n' "$HOST" >"$W/origin/leaf.ext"
openssl x509 -req -in "$W/origin/leaf.csr" -CA "$W/origin/ca.pem" -CAkey "$W/origin/ca.key" -CAcreateserial \
	-out "$W/origin/leaf.pem" -days 2 -extfile "$W/origin/leaf.ext" 2>/dev/null
chmod 644 "$W/origin/ca.pem"
BASE=${PATHCPU_PORT_BASE:-29000}
"$W/tools/origin" -http 127.0.0.1:$((BASE + 80)) -https 127.0.0.1:$((BASE + 443)) -cert "$W/origin/leaf.pem" \
	-key "$W/origin/leaf.key" -size 1024 >"$W/origin.log" 2>&1 &
PIDS+=($!)
HTTP_URL=http://$HOST:$((BASE + 80))/ HTTPS_URL=https://$HOST:$((BASE + 443))/

wait_port() { for _ in $(seq 200); do (echo >"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.05; done; echo "port $1 never listened" >&2; return 1; }
wait_port $((BASE + 80))

declare -A URL CA PID
TARGETS_HTTP=() TARGETS_HTTPS=()
if [[ $SCEN == *http,* || $SCEN == http || $SCEN == *,http ]]; then
	mkca "$W/squid" "pathcpu squid CA" -newkey rsa:2048
	/usr/lib/squid/security_file_certgen -c -s "$W/squid/ssl_db" -M 16MB >/dev/null
	sed -e "s|@SQUID_PORT@|$((BASE + 128))|g" -e "s|@WORK@|$W|g" -e "s|@ORIGIN_CA@|$W/origin/ca.pem|g" \
		"$PERF_DIR/conf/squid.conf.in" >"$W/squid/squid.conf"
	chown -R proxy:proxy "$W/squid"
	squid -N -f "$W/squid/squid.conf" >"$W/squid/out.log" 2>&1 &
	PID[squid]=$! URL[squid]=http://127.0.0.1:$((BASE + 128))
	PIDS+=($!)
	wait_port $((BASE + 128))
	TARGETS_HTTP+=(squid)
fi
if [[ $SCEN == *https* ]]; then
	mkdir -p "$W/goproxy"
	"$W/tools/goproxy-mitm" -listen 127.0.0.1:$((BASE + 700)) -ca-out "$W/goproxy/ca.pem" -upstream-ca "$W/origin/ca.pem" \
		-key ecdsa >"$W/goproxy/out.log" 2>&1 &
	PID[goproxy]=$! URL[goproxy]=http://127.0.0.1:$((BASE + 700)) CA[goproxy]=$W/goproxy/ca.pem
	PIDS+=($!)
	wait_port $((BASE + 700))
	TARGETS_HTTPS+=(goproxy)
fi

cat >"$W/policy.toml" <<EOF
version = 1
trusted = ["$HOST"]

[floor]
allow_cidrs = ["127.0.0.0/8"]
allow_ports = [80, 443, $((BASE + 80)), $((BASE + 443))]

[floor.hosts]
"$HOST" = "127.0.0.1"

[sources]
local = ["127.0.0.0/8"]
EOF
port=$((BASE + 900))
BUILDS=()
for a in "$@"; do
	name=${a%%=*} bin=$(cd "${a#*=}" && pwd)
	"$bin/lox" run --headless --state "$W/$name" --policy "$W/policy.toml" --listen 127.0.0.1:$port \
		--hub-listen 127.0.0.1:$((port + 1)) --roots "$W/origin/ca.pem" >"$W/$name.log" 2>&1 &
	PID[$name]=$! URL[$name]=http://127.0.0.1:$port CA[$name]=$W/$name/ca/ca.pem
	PIDS+=($!)
	wait_port $port
	for _ in $(seq 200); do [[ -s $W/$name/up.json ]] && break; sleep 0.05; done
	BUILDS+=("$name")
	TARGETS_HTTP+=("$name") TARGETS_HTTPS+=("$name")
	port=$((port + 10))
done

tree() { ps -e -o pid=,ppid= | awk -v r="$1" '{ pp[$1] = $2 } END { k[r] = 1; m = 1; while (m) { m = 0; for (p in pp) if (!(p in k) && (pp[p] in k)) { k[p] = 1; m = 1 } } for (p in k) print p }'; }
tree_ticks() { # utime+stime of PID and its descendants, clock ticks
	local t=0 p
	for p in $(tree "$1"); do
		t=$((t + $(sed 's/.*) //' "/proc/$p/stat" 2>/dev/null | awk '{print $12 + $13}' || echo 0)))
	done
	echo $t
}
HZ=$(getconf CLK_TCK)
RUNS=$W/runs.tsv
EVENTS=raw_syscalls:sys_enter,context-switches
for s in read write recvfrom futex epoll_pwait nanosleep; do EVENTS=$EVENTS,syscalls:sys_enter_$s; done
measure() { # SCENARIO TARGET REP
	local sc=$1 t=$2 rep=$3 t0 t1 reqs rps out pst=
	if [[ -n $COUNT ]]; then
		perf stat -x, -e "$EVENTS" -p "$(tree "${PID[$t]}" | paste -sd,)" -o "$W/perf.$t" -- sleep $((DUR + 1)) &
		pst=$!
	fi
	case $sc in
	http)
		local args=(-t2 -c50 --timeout 10s -s "$PERF_DIR/conf/wrk-proxy.lua" "${URL[$t]}/" -- "$HTTP_URL" "$HOST:$((BASE + 80))")
		wrk -d1s "${args[@]}" >/dev/null 2>&1 || true
		t0=$(tree_ticks "${PID[$t]}")
		out=$(wrk -d"${DUR}s" "${args[@]}" 2>&1 || true)
		t1=$(tree_ticks "${PID[$t]}")
		reqs=$(grep -o 'requests=[0-9]*' <<<"$out" | cut -d= -f2)
		rps=$(awk -v r="$reqs" -v d="$(grep -o 'duration_us=[0-9]*' <<<"$out" | cut -d= -f2)" 'BEGIN{printf "%.0f", r/(d/1e6)}')
		;;
	https)
		out=$("$W/tools/loadgen" -url "$HTTPS_URL" -ca "$W/origin/ca.pem,${CA[$t]}" -c 50 -d "${DUR}s" -warmup 1s \
			-proxy "${URL[$t]}" -watch "${PID[$t]}" 2>&1 || true)
		reqs=$(grep -o 'requests=[0-9]*' <<<"$out" | cut -d= -f2)
		rps=$(grep -o ' rps=[0-9.]*' <<<"$out" | cut -d= -f2)
		t0=0 t1=$(grep -o 'watch_ticks=[0-9]*' <<<"$out" | cut -d= -f2)
		[[ $(grep -o 'errors=[0-9]*' <<<"$out") == errors=0 ]] || log "$sc $t: $(grep -o 'errors=.*' <<<"$out")"
		;;
	esac
	[[ -n $reqs && $reqs -gt 0 ]] || { log "$sc $t rep $rep: no result: $(tail -2 <<<"$out")"; return 0; }
	local us calls=
	us=$(awk -v t=$((t1 - t0)) -v hz="$HZ" -v n="$reqs" 'BEGIN{printf "%.1f", t * 1e6 / hz / n}')
	if [[ -n $pst ]]; then
		# perf counts from the warm-up's end for DUR+1 s: its requests are scaled to that time.
		wait "$pst" || true
		calls=$(awk -F, -v n="$reqs" -v d="$DUR" '$1 + 0 > 0 { sub("syscalls:sys_enter_", "", $3); sub("raw_syscalls:sys_enter", "all", $3); printf " %s %.2f", $3, $1 / (n * (d + 1) / d) }' "$W/perf.$t")
	fi
	printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$sc" "$t" "$rep" "${rps%.*}" "$us" "$calls" >>"$RUNS"
	log "$(printf '%-6s %-10s rep %s: %7s req/s  %6s us/req%s' "$sc" "$t" "$rep" "${rps%.*}" "$us" "${calls:+  calls/req:$calls}")"
}

log "load $(cut -d' ' -f1-3 /proc/loadavg); builds ${BUILDS[*]}; $REPS reps x ${DUR}s"
for rep in $(seq "$REPS"); do
	for sc in ${SCEN//,/ }; do
		if [[ $sc == http ]]; then ts=("${TARGETS_HTTP[@]}"); else ts=("${TARGETS_HTTPS[@]}"); fi
		# Each rep turns the order of the targets, so that no build always follows the same one.
		n=${#ts[@]} k=$(((rep - 1) % n))
		for i in $(seq 0 $((n - 1))); do measure "$sc" "${ts[$(((i + k) % n))]}" "$rep"; done
	done
done
log "load $(cut -d' ' -f1-3 /proc/loadavg)"

# Per build and scenario: median req/s and µs/req over the reps, and the medians of the per-rep
# ratios to the anchor (squid for http, goproxy for https).
echo "| scenario | target | req/s, per rep | CPU µs/req, per rep | req/s ÷ anchor, per rep (median) | CPU ÷ anchor, per rep (median) |"
echo "|---|---|---|---|---|---|"
awk -F'\t' '
	function med(s,   a, n, i, j, x) { n = split(s, a, " "); for (i = 2; i <= n; i++) { x = a[i]; for (j = i - 1; j >= 1 && a[j] + 0 > x + 0; j--) a[j + 1] = a[j]; a[j + 1] = x } return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
	{ rps[$1, $2, $3] = $4; us[$1, $2, $3] = $5; if (!(($1, $2) in seen)) { seen[$1, $2] = 1; order[++n] = $1 SUBSEP $2 } if ($3 > reps) reps = $3 }
	END {
		for (i = 1; i <= n; i++) {
			split(order[i], k, SUBSEP); sc = k[1]; t = k[2]; anc = sc == "http" ? "squid" : "goproxy"
			r = ""; u = ""; rr = ""; ur = ""
			for (p = 1; p <= reps; p++) {
				r = r " " rps[sc, t, p]; u = u " " us[sc, t, p]
				if (t != anc && rps[sc, anc, p] > 0) { rr = rr sprintf(" %.2f", rps[sc, t, p] / rps[sc, anc, p]); ur = ur sprintf(" %.2f", us[sc, t, p] / us[sc, anc, p]) }
			}
			printf "| %s | %s |%s |%s |", sc, t, r, u
			if (rr != "") printf "%s (%.2f) |%s (%.2f) |\n", rr, med(rr), ur, med(ur); else print " — | — |"
		}
	}' "$RUNS"
