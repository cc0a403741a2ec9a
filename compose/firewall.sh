#!/bin/sh
# This machine's firewall for a lockhttp deployment (docs/deploy.md, "Host firewall"), from the
# settings in the .env of the directory it runs in (LOCKHTTP_AGENT_SUBNET, LOCKHTTP_GATE_IP):
#
#   INPUT        what the agent network sends to this machine itself is dropped (its services
#                on 0.0.0.0, TCP and UDP, are out of the agents' reach);
#   DOCKER-USER  agents reach the gate's address, and the gate answers them: inter-container
#                traffic is off on the agent network (compose/compose.yaml), so without these
#                two rules agents reach nothing, and with them nothing but the gate.
#
# Run it as root in the deployment directory, before the first start and after each boot (the
# rules last until a reboot; docs/deploy.md says how to keep them). It adds only the rules that
# are missing, and prints each. --delete removes them.
# Usage: compose/firewall.sh [--delete]
set -eu
mode=add
case "${1:-}" in
"") ;;
--delete) mode=delete ;;
*)
	echo "usage: compose/firewall.sh [--delete]   (as root, in your deployment directory)" >&2
	exit 2
	;;
esac
if [ ! -f .env ]; then
	echo "compose/firewall.sh: no .env in $(pwd): run it in your deployment directory (compose/new-site.sh DIR makes one)" >&2
	exit 2
fi
setting() { sed -n "s/^$1=//p" .env | tail -n 1; }
subnet=$(setting LOCKHTTP_AGENT_SUBNET)
gate=$(setting LOCKHTTP_GATE_IP)
subnet=${subnet:-10.213.10.0/24}
gate=${gate:-10.213.10.254}
# DOCKER-USER is docker's chain for the operator's rules, before its own; docker makes it when
# it starts.
if ! iptables -S DOCKER-USER >/dev/null 2>&1; then
	echo "compose/firewall.sh: iptables has no DOCKER-USER chain: start docker first (and run this as root)" >&2
	exit 1
fi
rule() { # chain, rule...
	chain=$1
	shift
	if [ "$mode" = delete ]; then
		while iptables -C "$chain" "$@" 2>/dev/null; do iptables -D "$chain" "$@"; done
		echo "removed: iptables -I $chain $*"
	elif iptables -C "$chain" "$@" 2>/dev/null; then
		echo "present: iptables -I $chain $*"
	else
		iptables -I "$chain" "$@"
		echo "added:   iptables -I $chain $*"
	fi
}
rule INPUT -s "$subnet" -j DROP
rule DOCKER-USER -s "$subnet" -d "$gate" -j ACCEPT
rule DOCKER-USER -s "$gate" -d "$subnet" -m conntrack --ctstate ESTABLISHED,RELATED -j ACCEPT
