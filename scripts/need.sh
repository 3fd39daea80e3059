#!/usr/bin/env bash
# need.sh — check that what a stage uses is installed, and name the Debian package of
# everything missing (scripts/deps.sh installs them all). Sourced by cluster.sh; run
# directly by the Makefile:
#
#   scripts/need.sh build    what `make build` uses (Go, gcc and Slurm's header for the plugin)
#
# The checks are written against what each stage runs, not against deps.sh's list, so a
# package dropped from that list fails here by name.

need_missing=()

# need_cmd COMMAND PACKAGE: COMMAND must be on PATH.
need_cmd() {
	command -v "$1" >/dev/null 2>&1 || need_missing+=("$1 (Debian package $2)")
}

# need_file PATH PACKAGE: PATH must exist.
need_file() {
	[ -e "$1" ] || need_missing+=("$1 (Debian package $2)")
}

# need_report WHAT: print what is missing for WHAT and fail, or succeed quietly.
need_report() {
	[ ${#need_missing[@]} -eq 0 ] && return 0
	local pkgs m
	pkgs=$(printf '%s\n' "${need_missing[@]}" | sed -n 's/.*(Debian package \(.*\))$/\1/p' | sort -u | tr '\n' ' ')
	echo "$1: missing:" >&2
	for m in "${need_missing[@]}"; do echo "  $m" >&2; done
	echo "$1: install with: apt-get install ${pkgs% } (or run scripts/deps.sh as root)" >&2
	need_missing=()
	return 1
}

# slurm_plugin_package TYPE_NAME: the Debian 12 package that ships Slurm's TYPE_NAME.so
# (read off the packages' file lists; most plugins are in slurm-wlm-basic-plugins).
slurm_plugin_package() {
	case $1 in
	auth_jwt) echo slurm-wlm-jwt-plugin ;;
	accounting_storage_mysql | jobcomp_mysql) echo slurm-wlm-mysql-plugin ;;
	jobcomp_elasticsearch) echo slurm-wlm-elasticsearch-plugin ;;
	acct_gather_profile_hdf5) echo slurm-wlm-hdf5-plugin ;;
	acct_gather_profile_influxdb) echo slurm-wlm-influxdb-plugin ;;
	acct_gather_energy_ipmi | acct_gather_energy_xcc) echo slurm-wlm-ipmi-plugins ;;
	ext_sensors_rrd) echo slurm-wlm-rrd-plugin ;;
	gpu_rsmi) echo slurm-wlm-rsmi-plugin ;;
	*) echo slurm-wlm-basic-plugins ;;
	esac
}

# slurm_plugin_dir [SLURM_CONF]: where Slurm loads plugins from: PluginDir in slurm.conf,
# else the distribution's directory.
slurm_plugin_dir() {
	local d
	if [ -n "${1:-}" ] && d=$(sed -n 's/^[[:space:]]*PluginDir[[:space:]]*=[[:space:]]*\([^[:space:]#]*\).*/\1/Ip' "$1" | tail -n1) && [ -n "$d" ]; then
		echo "${d%%:*}"
		return
	fi
	for d in /usr/lib/*/slurm-wlm /usr/lib64/slurm /usr/lib/slurm /usr/local/lib/slurm; do
		[ -d "$d" ] && { echo "$d"; return; }
	done
	echo /usr/lib/"$(uname -m)"-linux-gnu/slurm-wlm
}

# need_slurm_plugins PLUGIN_DIR FILE...: every plugin a Slurm config file names (any value
# or comma-separated item of the form type/name, e.g. AuthAltTypes=auth/jwt,
# CgroupPlugin=cgroup/v1) must be installed as PLUGIN_DIR/type_name.so.
need_slurm_plugins() {
	local dir=$1 f line item so
	shift
	for f in "$@"; do
		while IFS= read -r line; do
			line=${line%%#*}
			[[ "$line" == *=* ]] || continue
			for item in $(echo "${line#*=}" | tr ',' ' '); do
				[[ "$item" =~ ^[a-z_]+/[a-z0-9_.]+$ ]] || continue
				so=$(echo "$item" | tr '/.' '__')
				[ -e "$dir/$so.so" ] || need_missing+=("Slurm plugin $item named in $(basename "$f"): $dir/$so.so (Debian package $(slurm_plugin_package "$so"))")
			done
		done <"$f"
	done
}

# need_build: what `make build` uses.
need_build() {
	command -v go >/dev/null 2>&1 || need_missing+=("go (not a Debian package: install the Go of go.mod, see README)")
	need_cmd gcc gcc
	need_file /usr/include/stdio.h libc6-dev
	need_file /usr/include/slurm/spank.h libslurm-dev
	# Go stamps the version from git in a checkout, and downloads modules over TLS.
	[ -e "$(dirname "${BASH_SOURCE[0]}")/../.git" ] && need_cmd git git
	need_file /etc/ssl/certs/ca-certificates.crt ca-certificates
	need_report build
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
	set -euo pipefail
	case "${1:-}" in
	build) need_build ;;
	*) echo "usage: $0 build" >&2; exit 2 ;;
	esac
fi
