#!/usr/bin/env bash
# deps.sh — install what building and testing persyst need on Debian, idempotently and
# quietly. Go itself must already be installed (README). Needs root when anything is missing.
set -euo pipefail

PKGS=(slurmctld slurmd slurm-client slurmrestd libslurm-dev munge iproute2 util-linux procps gcc libc6-dev)
# `make generate` also needs protoc (the generated gRPC code is committed: tests do not).
if [ "${1:-}" = --protoc ]; then
	PKGS=(protobuf-compiler)
fi

missing=()
for p in "${PKGS[@]}"; do
	if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
		missing+=("$p")
	fi
done

if [ ${#missing[@]} -gt 0 ]; then
	if [ "$(id -u)" != 0 ]; then
		echo "deps: missing Debian packages: ${missing[*]} (run as root: scripts/deps.sh)" >&2
		exit 1
	fi
	echo "deps: installing ${missing[*]}" >&2
	export DEBIAN_FRONTEND=noninteractive
	# Package scripts must not start munge or Slurm services on this machine: the test
	# cluster starts its own daemons under build/cluster/.
	policy=/usr/sbin/policy-rc.d
	created_policy=0
	if [ ! -e "$policy" ]; then
		printf '#!/bin/sh\nexit 101\n' >"$policy"
		chmod 0755 "$policy"
		created_policy=1
	fi
	trap '[ "$created_policy" = 1 ] && rm -f "$policy"' EXIT
	apt-get update -qq >/dev/null
	apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

command -v go >/dev/null || { echo "deps: Go is not installed (see README)" >&2; exit 1; }
[ -f /usr/include/slurm/spank.h ] || { echo "deps: /usr/include/slurm/spank.h missing (libslurm-dev)" >&2; exit 1; }
