#!/usr/bin/env bash
# debroot.sh — a Debian root of a given release, as a cached tarball, made with mmdebstrap
# from this machine's apt sources. Sourced by fresh-check.sh (the pristine root the tests
# run in) and vm.sh (the virtual node's disk):
#
#   debroot_tarball SUITE TARBALL MAX_DAYS [MMDEBSTRAP_ARGS...]
#
# builds TARBALL unless it exists and is younger than MAX_DAYS days.

# debroot_sources SUITE: the host's apt sources (only Debian's own), their suite names made
# SUITE's (bookworm-security becomes trixie-security, and so on): a fresh machine at this
# site reaches the archive the same way.
debroot_sources() {
	local suite=$1 f host
	host=$(. /etc/os-release && echo "${VERSION_CODENAME:-bookworm}")
	{
		[ -s /etc/apt/sources.list ] && grep -v '^[[:space:]]*#' /etc/apt/sources.list | grep . || true
		for f in /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
			[ -f "$f" ] || continue
			cat "$f"
			echo
		done
	} | sed -E "s/\b$host(-updates|-security|-backports)?\b/$suite\1/g"
}

debroot_tarball() {
	local suite=$1 tarball=$2 max_days=$3 f aptopts=()
	shift 3
	if [ -s "$tarball" ] && [ -z "$(find "$tarball" -mtime +"$max_days" 2>/dev/null)" ]; then
		return 0
	fi
	echo "debroot: building a Debian $suite root (mmdebstrap $*)" >&2
	# The host's Acquire settings (proxies, snapshot validity).
	for f in /etc/apt/apt.conf.d/*; do
		[ -f "$f" ] && grep -q '^[[:space:]]*Acquire' "$f" && aptopts+=(--aptopt="$f")
	done
	mkdir -p "$(dirname "$tarball")"
	rm -f "$tarball.new"
	debroot_sources "$suite" | mmdebstrap --quiet --format=tar "$@" "${aptopts[@]}" \
		"$suite" "$tarball.new" - || { rm -f "$tarball.new"; return 1; }
	mv "$tarball.new" "$tarball"
}
