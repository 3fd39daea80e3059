#!/usr/bin/env bash
# fresh-check.sh — prove the README's set-up on a pristine Debian root, so that a package
# missing from scripts/deps.sh fails here even on a machine where it was installed by hand,
# and run every test against that Debian release's own Slurm.
#
#   scripts/fresh-check.sh [TARGET]   (make fresh-check; make test runs it)
#   SUITE=trixie scripts/fresh-check.sh
#
# SUITE is the Debian release (default bookworm: Slurm 22.05; trixie: 24.11; forky: 26.05).
#
# 1. A minimal Debian root (mmdebstrap --variant=minbase, plus make: the README's only
#    prerequisites are Go and make) from this machine's apt sources, their suite names
#    made SUITE's (bookworm-security becomes trixie-security, and so on). It is cached as a
#    tarball (PERSYST_FRESH_CACHE, default /var/cache/persyst/fresh-check) and rebuilt when
#    older than PERSYST_FRESH_MAX_DAYS (7); each run unpacks a new copy, so nothing from an
#    earlier run is installed in it.
# 2. The checkout (the files git tracks or does not ignore, and .git) is copied into it, and
#    this machine's Go is mounted read-only at /usr/local/go. With
#    PERSYST_FRESH_SETUP_CACHE=1 (make test), the set-up of step 3 is made once per
#    content of the set-up scripts and tarball, and kept; the root is an overlay of it
#    (below, step 2).
# 3. Inside it, as root: `scripts/cluster.sh check` must fail and name the Slurm packages
#    (nothing is installed yet); `scripts/deps.sh`; slurm-wlm-jwt-plugin is removed again
#    and `scripts/cluster.sh check` must name it; then `make TARGET` (default test-here:
#    every unit and integration test, after deps.sh has put the plugin back) must pass. The
#    tests run in a network namespace of their own: the cluster's bridge and addresses are
#    private, and the tests cannot download anything deps.sh did not install.
#
# Downloaded packages, Go modules and Go's build cache are kept in the cache directory
# between runs; they make a run faster, and cannot stand in for an install step.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SUITE=${SUITE:-bookworm}
case "$SUITE" in
bookworm | trixie | forky) ;;
*) echo "fresh-check: SUITE=$SUITE: want bookworm, trixie or forky" >&2; exit 2 ;;
esac
# shellcheck source=need.sh
. "$ROOT/scripts/need.sh"
# shellcheck source=debroot.sh
. "$ROOT/scripts/debroot.sh"
log() { echo "fresh-check: $*" >&2; }
die() { echo "fresh-check: error: $*" >&2; exit 1; }

# The path for everything inside the root (the README's Go at /usr/local/go).
INSIDE_PATH=/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

# in_root ROOT CMD...: run CMD in the root as root, with a clean environment (plus the Go
# settings and trust anchors this machine uses to reach its module proxy).
in_root() {
	local r=$1 v goenv=()
	shift
	for v in GOPROXY GOSUMDB GONOSUMDB GOPRIVATE GONOPROXY GOFLAGS; do
		goenv+=("$v=${!v:-}")
	done
	env -i HOME=/root LANG=C.UTF-8 TERM=dumb PATH="$INSIDE_PATH" PERSYST_FRESH_INSIDE=1 \
		PERSYST_FUZZ="${PERSYST_FUZZ:-1}" PERSYST_UNIT="${PERSYST_UNIT:-1}" PERSYST_MARIADB_SEEN="${PERSYST_MARIADB_SEEN:-}" \
		SSL_CERT_FILE=/etc/ssl/site-ca.crt "${goenv[@]}" chroot "$r" "$@"
}

# mount_root ROOT GOROOT CACHE [LOWER]: in a private mount namespace, make ROOT a mount
# point, as / is on a machine (ip netns and unshare change its propagation): LOWER's files
# under ROOT's own (an overlay: ROOT's directory holds the changes, beside it) or ROOT
# bound on itself; then what a root needs (proc, sys, dev, run), this machine's Go, and
# the caches of downloaded packages and Go modules and builds.
mount_root() {
	local r=$1 goroot=$2 cache=$3 lower=$4
	if [ -n "$lower" ]; then
		mount -t overlay overlay -o "lowerdir=$lower,upperdir=$r.changes,workdir=$r.overlay-work" "$r"
	else
		mount --bind "$r" "$r"
	fi
	mount -t proc proc "$r/proc"
	mount --rbind /sys "$r/sys"
	mount --rbind /dev "$r/dev"
	mount -t tmpfs -o mode=0755 tmpfs "$r/run"
	mount --bind -o ro "$goroot" "$r/usr/local/go"
	mkdir -p "$r/root/go/pkg/mod" "$r/root/.cache/go-build"
	mount --bind "$cache/gomod" "$r/root/go/pkg/mod"
	mount --bind "$cache/gocache" "$r/root/.cache/go-build"
	mount --bind "$cache/apt" "$r/var/cache/apt/archives"
}

# Stages: this script re-runs itself inside namespaces it creates.
case "${1:-}" in
__setup) # inside the root: the set-up, before the tests
	cd /src/persyst
	echo "== fresh-check: cluster check before anything is installed (must fail, naming packages)"
	if out=$(scripts/cluster.sh check 2>&1); then
		echo "$out"
		die "the cluster check passed on a root without Slurm"
	fi
	echo "$out"
	echo "$out" | grep -q 'Debian package slurmctld' || die "the cluster check did not name slurmctld"
	echo "== fresh-check: scripts/deps.sh"
	scripts/deps.sh
	echo "== fresh-check: without slurm-wlm-jwt-plugin, the cluster check names it"
	dpkg --purge slurm-wlm-jwt-plugin >/dev/null
	if out=$(scripts/cluster.sh check 2>&1); then
		echo "$out"
		die "the cluster check passed without the JWT plugin"
	fi
	echo "$out"
	# Only that package: anything else it names is missing from deps.sh.
	echo "$out" | grep -qx 'cluster: install with: apt-get install slurm-wlm-jwt-plugin (or run scripts/deps.sh as root)' ||
		die "the cluster check did not name slurm-wlm-jwt-plugin alone: is a package missing from scripts/deps.sh?"
	exit 0
	;;
__setup-cached) # in a private mount namespace: the set-up of a root kept as the cache's
	mount_root "$2" "$3" "$4" ""
	in_root "$2" /src/persyst/scripts/fresh-check.sh __setup
	exit
	;;
__mounted) # in a private mount namespace: mount what the root needs, set up, then test
	r=$2 goroot=$3 cache=$4 target=$5 lower=${6:-}
	mount_root "$r" "$goroot" "$cache" "$lower"
	t=$SECONDS
	if [ -n "$lower" ]; then
		log "the set-up of $lower, made by the same scripts on the same pristine root (PERSYST_FRESH_SETUP_CACHE=1)"
	elif [ "${PERSYST_FRESH_REUSE:-0}" != 1 ]; then
		in_root "$r" /src/persyst/scripts/fresh-check.sh __setup
		log "set-up in the root done in $((SECONDS - t)) s"
	fi
	echo "== fresh-check: go mod download (the tests run without a network)"
	in_root "$r" /bin/sh -c 'cd /src/persyst && go mod download'
	echo "== fresh-check: make $target (in a network namespace of its own)"
	exec unshare --net "$0" __tests "$r" "$target"
	;;
__tests) # in a network namespace of its own, with only loopback up
	ip link set lo up
	in_root "$2" /bin/bash -c "cd /src/persyst && make $3"
	exit
	;;
esac

TARGET=${1:-test-here}
CACHE=${PERSYST_FRESH_CACHE:-/var/cache/persyst/fresh-check}
MAX_DAYS=${PERSYST_FRESH_MAX_DAYS:-7}
# Under a directory starting with "_": the go command skips it, so a root kept after a
# failure (it holds Go sources of Debian's packages) never enters `go vet ./...`.
WORK=${PERSYST_FRESH_DIR:-$ROOT/build/_fresh-$SUITE}
[ "$(id -u)" = 0 ] || die "must run as root (it builds a Debian root and starts a Slurm cluster in it)"
need_cmd mmdebstrap mmdebstrap
need_cmd unshare util-linux
need_cmd ip iproute2
need_cmd git git
need_report fresh-check
GOROOT_HOST=$(go env GOROOT)
t0=$SECONDS

# 1. The pristine root's tarball.
mkdir -p "$CACHE"/{apt,gomod,gocache}
base="$CACHE/$SUITE-minbase.tar"
debroot_tarball "$SUITE" "$base" "$MAX_DAYS" --variant=minbase --include=make || die "mmdebstrap failed"

# copy_checkout DIR: the checkout (the files git tracks or does not ignore, and .git) in
# DIR/src/persyst, and the site's name servers and trust anchors (a proxy's CA, say) in
# DIR/etc, as a machine here has them.
copy_checkout() {
	mkdir -p "$1/src/persyst" "$1/usr/local/go" "$1/etc/ssl"
	(
		cd "$ROOT"
		if git rev-parse --git-dir >/dev/null 2>&1; then
			{ git ls-files -co --exclude-standard -z; find .git -print0; } |
				tar --null --no-recursion --ignore-failed-read -cf - -T - 2>/dev/null
		else
			tar --exclude=./build -cf - .
		fi
	) | tar -xf - -C "$1/src/persyst"
	cp /etc/resolv.conf "$1/etc/resolv.conf"
	cp "${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}" "$1/etc/ssl/site-ca.crt"
}

# sweep ROOT: stop every process still running in ROOT (only this script starts any there).
sweep() {
	local p left=()
	for p in /proc/[0-9]*; do
		[ "$(readlink "$p/root" 2>/dev/null)" = "$1" ] || continue
		left+=("${p#/proc/} $(tr '\0' ' ' <"$p/cmdline" 2>/dev/null)")
		kill -KILL "${p#/proc/}" 2>/dev/null || true
	done
	[ ${#left[@]} = 0 ] || log "stopped what was left running in the root: $(printf '[%s] ' "${left[@]}")"
}

# 2. The root the tests run in, with the checkout in /src/persyst.
#
# PERSYST_FRESH_SETUP_CACHE=1 (make test sets it): the set-up is made once on a pristine
# copy of the tarball and kept (CACHE/setup-SUITE-KEY), and each run's root is an overlay
# of it: its changes go to WORK/root.changes, the kept set-up is never written. KEY is
# the tarball's and every set-up script's content, so a change to deps.sh (or to the
# checks the set-up makes, or a tarball rebuilt after MAX_DAYS) makes the set-up anew on
# a pristine root: the proof stands for the scripts as they are, and saves about 90 s a
# root (apt's install and unpacking) plus the tarball's unpacking.
#
# Otherwise (make fresh-check): a fresh copy of the tarball, set up in this run.
# PERSYST_FRESH_REUSE=1 (for a developer iterating, never for make test) takes the root a
# failed run kept, with what its set-up installed, and copies only the checkout again.
lower=
if [ "${PERSYST_FRESH_REUSE:-0}" = 1 ] && [ -d "$WORK/root/src/persyst" ]; then
	log "reusing the root in $WORK/root (PERSYST_FRESH_REUSE=1): not a pristine check"
	copy_checkout "$WORK/root"
elif [ "${PERSYST_FRESH_SETUP_CACHE:-0}" = 1 ]; then
	PERSYST_FRESH_REUSE=0
	key=$( {
		stat -c '%s %Y' "$base"
		cd "$ROOT" && cat scripts/fresh-check.sh scripts/deps.sh scripts/need.sh scripts/cluster.sh scripts/debroot.sh
		echo "${PERSYST_DEPS_EXTRA:-}"
	} | sha256sum | cut -c1-16)
	lower=$CACHE/setup-$SUITE-$key
	if [ ! -d "$lower" ]; then
		log "making the set-up on a pristine $SUITE root, kept as $lower"
		rm -rf "$CACHE/setup-$SUITE-"*
		mkdir -p "$lower.new"
		tar -xf "$base" -C "$lower.new"
		copy_checkout "$lower.new"
		t=$SECONDS
		rc=0
		unshare --mount --propagation private "$0" __setup-cached "$lower.new" "$GOROOT_HOST" "$CACHE" || rc=$?
		sweep "$lower.new"
		[ "$rc" = 0 ] ||
			die "$SUITE: the set-up failed in the pristine root $lower.new (output above)"
		log "set-up in the root done in $((SECONDS - t)) s"
		rm -rf "$lower.new/src/persyst" "$lower.new/etc/ssl/site-ca.crt"
		mv "$lower.new" "$lower"
	fi
	rm -rf "$WORK"
	mkdir -p "$WORK/root" "$WORK/root.changes" "$WORK/root.overlay-work"
	copy_checkout "$WORK/root.changes"
else
	PERSYST_FRESH_REUSE=0
	rm -rf "$WORK"
	mkdir -p "$WORK/root"
	tar -xf "$base" -C "$WORK/root"
	copy_checkout "$WORK/root"
fi
export PERSYST_FRESH_REUSE
# Where the root's /src/persyst is once the mount namespace is gone (an overlay's changes).
src=$WORK/root/src/persyst
[ -z "$lower" ] || src=$WORK/root.changes/src/persyst
log "fresh root with the checkout ready after $((SECONDS - t0)) s"

# 3. The set-up and the tests, in a private mount namespace (see the stages above).
rc=0
unshare --mount --propagation private "$0" __mounted "$WORK/root" "$GOROOT_HOST" "$CACHE" "$TARGET" "$lower" || rc=$?
sweep "$WORK/root"
# What the tests keep for people to look at (the browser's screenshots), whatever the
# outcome: build/test-artifacts of this checkout.
if [ -d "$src/build/test-artifacts" ]; then
	rm -rf "$ROOT/build/test-artifacts"
	cp -r "$src/build/test-artifacts" "$ROOT/build/test-artifacts"
	log "test artifacts in $ROOT/build/test-artifacts"
fi
# The packages built there for SUITE's Slurm (the virtual node installs them: vm.sh).
if [ "$rc" = 0 ] && compgen -G "$src/build/package/persyst_*.deb" >/dev/null; then
	rm -rf "$ROOT/build/package-$SUITE"
	mkdir -p "$ROOT/build/package-$SUITE"
	cp "$src/build/package/"persyst_*.deb "$ROOT/build/package-$SUITE/"
	log "$SUITE's package in $ROOT/build/package-$SUITE"
fi
if [ "$rc" != 0 ]; then
	[ -z "$lower" ] || die "$SUITE: failed inside the fresh root after $((SECONDS - t0)) s (output above); what the run changed is kept in $WORK/root.changes (over $lower)"
	die "$SUITE: failed inside the fresh root after $((SECONDS - t0)) s (output above); the root is kept in $WORK/root"
fi
log "$SUITE: passed in $((SECONDS - t0)) s"
[ "$PERSYST_FRESH_REUSE" = 1 ] || rm -rf "$WORK"
