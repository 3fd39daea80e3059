#!/usr/bin/env bash
# deps.sh — install every Debian package that building persyst, its test cluster and its
# tests use, idempotently and quietly, without starting any service. Go itself must already
# be installed (README). Needs root when anything is missing.
#
#   scripts/deps.sh            everything `make build`, `make run` and `make test` use
#   scripts/deps.sh --protoc   what `make generate` adds (the generated code is committed)
#
# Each package is listed once, with what uses it. The users check for themselves and name
# the package when it is missing (Makefile's build check, scripts/cluster.sh check, the
# integration tests), so a package dropped from this list fails a test by name.
set -euo pipefail

PKGS=(
	# build: cgo for the SPANK plugin, its header, version stamping, module downloads
	gcc libc6-dev libslurm-dev git ca-certificates
	# the test cluster (scripts/cluster.sh): Slurm's daemons, commands and plugins, and the
	# JWT plugin its slurm.conf names (AuthAltTypes=auth/jwt, for slurmrestd over TCP)
	slurmctld slurmd slurm-client slurmrestd slurm-wlm-basic-plugins slurm-wlm-jwt-plugin munge
	# the test cluster's accounting: sacct, AdminComment (slurmdbd, its MySQL plugin, and a
	# private MariaDB server on a unix socket)
	mariadb-server slurmdbd slurm-wlm-mysql-plugin
	# the Prometheus integration test scrapes the daemons' /metrics
	prometheus
	# the end-of-job mail test: a local MTA and /usr/bin/mail
	exim4-daemon-light bsd-mailx
	# namespaces, veths and the bridge (ip, ss), nsenter/unshare/setpriv/setsid, useradd
	iproute2 util-linux passwd
	# the test cluster's agent tree over mutual TLS (PERSYST_TREEAUTH=tls): its certificates
	openssl
	# make bench: its scripts read the daemons' JSON and do arithmetic
	jq bc
	# make test: the pristine Debian root the set-up is proven on (scripts/fresh-check.sh)
	mmdebstrap
	# the pictures' tests: headless Chromium renders the HTML report and the web view (and
	# a font to draw their text in the screenshots)
	chromium fonts-dejavu-core
	# the web view deployed as docs/admin.md says: nginx as the site's reverse proxy, and
	# curl as a local user forging a request on the view's socket
	nginx curl
	# make package's tests: the units checked with systemd-analyze verify, the .rpm's files
	# listed with rpm
	systemd rpm
	# the real-program corpus (integration/programs_integration_test.go): programs HPC
	# people run, as each Debian release ships them; hpcc runs its ranks with OpenMPI
	stress-ng fio sysbench hpcc openmpi-bin
	# make test-vm: the node as a virtual machine (qemu, software emulation where KVM does
	# not work), its disk made from a Debian root (mkfs.ext4 -d)
	qemu-system-x86 e2fsprogs
)
if [ "${1:-}" = --protoc ]; then
	PKGS=(protobuf-compiler)
fi
# PERSYST_DEPS_EXTRA adds packages (space-separated), e.g. for a site's own checks.
read -r -a extra <<<"${PERSYST_DEPS_EXTRA:-}"
PKGS+=("${extra[@]}")

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
	log=$(mktemp)
	if ! { apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}"; } >"$log" 2>&1; then
		tail -n 20 "$log" | sed 's/^/deps:   /' >&2
		rm -f "$log"
		echo "deps: installing ${missing[*]} failed (apt-get output above)" >&2
		exit 1
	fi
	rm -f "$log"
fi

command -v go >/dev/null || { echo "deps: Go is not installed (see README)" >&2; exit 1; }
exit 0
