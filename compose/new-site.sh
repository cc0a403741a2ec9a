#!/bin/sh
# Makes a deployment directory for the compose setup, outside this checkout, so that upgrading the
# checkout never touches what the operator changed. Usage: compose/new-site.sh DIR
#
#   DIR/.env            the settings: every docker-compose command run in DIR reads them
#   DIR/services.yaml   your services: agents, an upstream proxy, anything you add
#   DIR/policy/         the policy directory (the console mounts it read-only); the first
#                       start copies the shipped policy into it as policy.toml
#   DIR/gate/           files the gate reads (extra roots), mounted read-only
#
# It never overwrites: an existing DIR/.env or DIR/services.yaml is an error.
set -eu
if [ $# -ne 1 ]; then
	echo "usage: compose/new-site.sh DIR   (your deployment's directory, outside this checkout)" >&2
	exit 2
fi
here=$(cd "$(dirname "$0")" && pwd)
parent=$(dirname "$1")
mkdir -p "$parent"
site=$(cd "$parent" && pwd)/$(basename "$1")
case "$site/" in
"$(dirname "$here")"/*)
	echo "compose/new-site.sh: $site is inside the checkout $(dirname "$here"): choose a directory outside it, so that upgrades never touch your settings" >&2
	exit 2
	;;
esac
mkdir -p "$site"
for f in .env services.yaml; do
	if [ -e "$site/$f" ]; then
		echo "compose/new-site.sh: $site/$f exists: this is a deployment directory already; edit it, or choose another DIR" >&2
		exit 1
	fi
done
mkdir -p "$site/policy" "$site/gate"
# The console (uid 10021) reads the policy directory; the gate (uid 10003) reads gate/.
chmod 755 "$site" "$site/policy" "$site/gate"
cat >"$site/.env" <<END
# lockhttp's settings for this deployment (docs/deploy.md, "Settings"). Every docker-compose
# command run in this directory reads this file: change a setting here, then docker-compose up -d.

# The compose project: container, network and volume names start with it.
COMPOSE_PROJECT_NAME=lockhttp
# lockhttp's compose file (in the checkout), then yours.
COMPOSE_FILE=$here/compose.yaml:$site/services.yaml

# This directory: the policy (policy/policy.toml) and the gate's files (gate/).
LOCKHTTP_SITE=$site
# The images' tag (compose/build.sh TAG builds them). An upgrade changes it here.
LOCKHTTP_TAG=latest

# The hub and the phone page, published on the host: the address and port they listen on there
# (127.0.0.1: this machine only; 3139, as lox run's hub takes 3131), and the URL a phone reaches
# them at (pairing links name it).
LOCKHTTP_HUB_BIND=127.0.0.1
LOCKHTTP_HUB_PORT=3139
LOCKHTTP_PHONE_URL=http://127.0.0.1:3139

# Who answers at the console's terminal (docker attach): approvals and rejections made there are
# recorded under this name ("terminal:NAME"). It names a person, it proves nothing: whoever can
# use docker here can attach, and change it.
LOCKHTTP_OPERATOR=$(id -un 2>/dev/null || true)

# The gate: extra root certificates for origins (a PEM file put in gate/ here, written as the
# gate sees it: /etc/lockhttp/gate/NAME), an upstream proxy (http://host:port, never with a
# password: a command line is readable by every user of the machine), and the file in gate/
# holding the upstream's credential, user:password (owned by the gate's uid 10003, mode 0600;
# written /etc/lockhttp/gate/NAME). Empty: the system's roots; no upstream; no credential.
LOCKHTTP_ROOTS=
LOCKHTTP_UPSTREAM=
LOCKHTTP_UPSTREAM_CREDENTIALS=

# An OTLP/HTTP collector the gate sends a span of every request to (http://host:4318), reached
# on the egress network or as a service on the hub network. Empty: no traces.
LOCKHTTP_OTLP_ENDPOINT=

# The agent network's subnet; the policy's [sources] names it (the first start writes it there).
# Keep it outside docker's default address pools (172.17-172.31.x.x, 192.168.x.x), which
# docker's other networks are given from. Change it before the first start, with the next.
LOCKHTTP_AGENT_SUBNET=10.213.10.0/24
# The gate's address on it (inside the subnet, at its top): the agents' DNS server (dns: in
# their service), where clients that ignore the proxy variables are decided too.
LOCKHTTP_GATE_IP=10.213.10.254
END
cat >"$site/services.yaml" <<'END'
# Your services next to lockhttp (docs/deploy.md): agents (compose/agent.example.yaml is the
# template, with what keeps an agent in its box: cap_drop: [ALL], no-new-privileges, a read-only
# root, limits; never the docker socket, privileged, the host's namespaces, cap_add or devices,
# which the doctor refuses), an upstream proxy, overrides of lockhttp's services. Agents with
# rules of their own get fixed addresses on the agent network, which [sources] names (docs/
# deploy.md, "Agents apart"). Paths here are relative to lockhttp's compose directory: write
# ${LOCKHTTP_SITE}/... for files in this directory.
# A Prometheus that scrapes lockhttp's metrics (gate.hub:9464, which carries the signer's too,
# and console.hub:9464) joins the hub network, never the agent network (docs/deploy.md, "Metrics").
version: "3.8"

services: {}
END
echo "$site: the deployment directory (.env, services.yaml, policy/, gate/)"
echo "next: cd $site && $here/firewall.sh (as root) && docker-compose up -d"
