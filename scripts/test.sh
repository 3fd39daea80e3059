#!/usr/bin/env bash
# test.sh — every test of persyst: static checks here, then the unit tests, fuzzing and the
# integration tests against a real Slurm cluster in a pristine root of each Debian release
# (scripts/fresh-check.sh, SUITE=bookworm, trixie, forky; needs root). `make test` runs it after installing dependencies and
# building; `make test-here` (PERSYST_FRESH=0) runs the integration tests on this machine.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(id -u)" != 0 ]; then
	echo "test: must run as root: the integration tests start slurmd in network namespaces" >&2
	exit 1
fi

# Tests that would skip where a kernel feature or root is missing fail instead when CI is
# set: this script is what CI runs, and every test must run here, not skip.
export CI="${CI:-1}"

# stage NAME: a heading, with the seconds since test.sh started (each stage's time).
stage() { echo "== $* [at ${SECONDS} s]"; }

# The static checks read the code alone: inside a pristine root they would repeat what
# make test checked before it made the roots.
if [ -z "${PERSYST_FRESH_INSIDE:-}" ]; then
	stage "gofmt, go vet, go mod tidy"
	unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './build/*'))
	if [ -n "$unformatted" ]; then
		echo "gofmt would change: $unformatted" >&2
		exit 1
	fi
	go vet ./...
	go mod tidy -diff || { echo "go mod tidy would change go.mod or go.sum (above)" >&2; exit 1; }
fi

mkdir -p build

# The tests run here when asked (make test-here) or when this is the fresh root already;
# otherwise in a pristine Debian root, after the README's set-up there, so that they cannot
# pass on a package installed by hand on this machine (running the unit tests here as well
# would only repeat them).
if [ "${PERSYST_FRESH:-1}" = 0 ] || [ -n "${PERSYST_FRESH_INSIDE:-}" ]; then
	# The unit tests read no Slurm either: run in the first release's root only
	# (PERSYST_UNIT=0 in the others, as fuzzing), about a minute each.
	if [ "${PERSYST_UNIT:-1}" = 0 ]; then
		echo "(unit tests ran in the first release's root)"
	else
		stage "unit tests"
		go test -count=1 $(go list ./... | grep -v /integration) 2>&1 | tee build/test-unit.log
	fi

	# The site store's tests on MariaDB (a private server they start and stop), on each
	# release's own MariaDB series (bookworm's 10.11, trixie's 11.8): what a site
	# installs from that release. A series an earlier release's root tested already
	# (PERSYST_MARIADB_SEEN: forky's 11.8 is trixie's) is not tested again: the store
	# speaks to the server, whose series decides what it accepts.
	maria=$(dpkg-query -W -f '${Version}' mariadb-server 2>/dev/null || true)
	series=$(printf '%s\n' "$maria" | sed -n 's/^\([0-9]*:\)\{0,1\}\([0-9]*\.[0-9]*\).*/\2/p')
	if [ -n "$series" ] && [[ " ${PERSYST_MARIADB_SEEN:-} " == *" $series "* ]]; then
		echo "(the store's tests ran on MariaDB $series in an earlier release's root: $maria is the same series)"
	else
		stage "the store's tests on MariaDB ${maria:-(version unknown)}"
		PERSYST_TEST_STORE=mariadb go test -count=1 ./collectors/store/ 2>&1 | tee build/test-mariadb.log
	fi

	# Every fuzz target, for a fixed short time each (PERSYST_FUZZTIME, default 1s); a crash
	# fails the tests and leaves its input under the package's testdata/fuzz.
	stage "fuzzing"
	# Go's fuzzing coordinator before 1.27 can report a bare "context deadline exceeded"
	# as -fuzztime ends, with no failing input (go.dev/issue/75804): such a run is tried
	# once more, and a second one is reported as what it is. A failing input always
	# fails the tests.
	fuzz_one() {
		for _ in 1 2; do
			if go test -run XXX -fuzz "^$2\$" -fuzztime "${PERSYST_FUZZTIME:-1s}" "$1" >build/fuzz.log 2>&1; then
				echo "ok  $1 $2"
				return
			fi
			if grep -q 'Failing input written\|panic:' build/fuzz.log ||
				! grep -q '^    context deadline exceeded$' build/fuzz.log; then
				cat build/fuzz.log
				echo "fuzz: $2 in $1 failed" >&2
				exit 1
			fi
		done
		echo "ok  $1 $2 (twice stopped by Go's fuzzing deadline race, no failing input)"
	}
	# Fuzzing reads no Slurm: test.sh fuzzes in the first release's root only
	# (PERSYST_FUZZ=0 in the others).
	[ "${PERSYST_FUZZ:-1}" = 0 ] && echo "(fuzzed in the first release's root)"
	[ "${PERSYST_FUZZ:-1}" = 0 ] || for pkg in $(go list ./... | grep -v /integration); do
		dir=$(go list -f '{{.Dir}}' "$pkg")
		for fz in $(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go 2>/dev/null | sed 's/^func //' | sort -u); do
			fuzz_one "$pkg" "$fz"
		done
	done

	# The packages (TestPackage inspects them). In the pristine root the .deb is installed
	# and the integration tests run its files: the daemons, the plugin Slurm loads, the
	# commands. On this machine (make test-here) nothing is installed.
	stage "packages (make package)"
	make package >build/package.log 2>&1 || { cat build/package.log; exit 1; }
	if [ -n "${PERSYST_FRESH_INSIDE:-}" ]; then
		echo "== the .deb installed; the integration tests run the installed files"
		DEBIAN_FRONTEND=noninteractive dpkg -i build/package/persyst_*.deb >build/package-install.log 2>&1 ||
			{ cat build/package-install.log; exit 1; }
		export PERSYST_INSTALLED=1 PERSYST_BIN=/usr/bin/persyst PERSYST_SPANK=/usr/lib/x86_64-linux-gnu/slurm-wlm/spank_persyst.so
	fi

	stage "integration tests (a real Slurm cluster on this machine; verbose, so each scenario shows)"
	# What does not depend on the release runs in the first root only, with the unit
	# tests: the tests that start no Slurm (persyst run on the corpus, under a CPU quota,
	# its exit and signals, as an ordinary user; the services' READY and socket
	# activation), and those that judge how persyst reads what it measured, not how it
	# finds a job (the causes of CPU findings, the corpus's programs as jobs, phases and
	# interference, the imbalance between a 4-node job's nodes and the site's I/O
	# episodes, the site in a box), those of the tree and the site's side, which read
	# nothing a Slurm release changes (the tree over TLS, its measured loads and an
	# intruder, the idle-GPU notices, the admin's view of the site, two clusters' frontends
	# on one MariaDB through its outage; jobs' energy, whose cgroups are the host's in
	# every root and cgroup v2's on the virtual nodes): the job map's facts are checked per release with
	# each release's recorded answers and TestJobmap, Slurm's accounting in TestSiteTools,
	# the store's own tests on each release's MariaDB), and the test cluster's own
	# failures to start (its scripts, not Slurm's release): every root finds, measures and
	# digests its jobs in TestDigest, TestSlurmMeasures and the rest, multi-node jobs
	# through the tree in TestTreeAgents, real programs in TestRealPrograms.
	skip=()
	if [ "${PERSYST_UNIT:-1}" = 0 ]; then
		once='TestCorpus|TestOwnQuotaIsNoInterference|TestRunMeasures|TestRunExitAndSignals|TestRunUnprivileged|TestServicesNotifySystemd|TestWebSocketActivation|TestCauses|TestCorpusSlurm|TestWhenAndWhy|TestTree|TestSiteInABox|TestClusterUpFailure|TestSiteClusters|TestTreeTLS|TestTreeLoads|TestNotices|TestAdminView|TestEnergy'
		skip=(-skip "^($once)\$")
		echo "(${once//|/, } ran in the first release's root)"
	fi
	# The tests that judge no CPU time run PERSYST_IT_PARALLEL at a time, each on a
	# cluster of its own (integration/cluster_test.go), after the others ran alone.
	# A failure ends the output with each failed test's own lines (scripts/failures.awk).
	# Go's own -parallel lets every such test ask for its turn at once: the turns
	# (PERSYST_IT_PARALLEL, 6) go to the longest first (sideBySide).
	if ! PERSYST_INTEGRATION=1 PERSYST_IT_PARALLEL="${PERSYST_IT_PARALLEL:-6}" go test -count=1 -v -timeout 20m -parallel 64 "${skip[@]}" ./integration/ 2>&1 | tee build/test-integration.log; then
		awk -f scripts/failures.awk build/test-integration.log
		exit 1
	fi
	stage "every test passed"
else
	# Every Debian release's own Slurm (PERSYST_SUITES; docs/development.md): bookworm's
	# 22.05, trixie's 24.11, forky's 26.05.
	fuzz=1 vms=() maria_seen=""
	for suite in ${PERSYST_SUITES:-bookworm trixie forky}; do
		echo "== every test in a pristine Debian $suite root (scripts/fresh-check.sh)"
		t=$SECONDS
		PERSYST_FUZZ=$fuzz PERSYST_UNIT=$fuzz PERSYST_FRESH_SETUP_CACHE=1 PERSYST_MARIADB_SEEN="$maria_seen" SUITE=$suite \
			scripts/fresh-check.sh test-here 2>&1 | tee build/fresh-$suite.log
		echo "== $suite: every test passed in $((SECONDS - t)) s"
		maria_seen+=" $(sed -n "s/^== the store's tests on MariaDB \([0-9]*:\)\{0,1\}\([0-9]*\.[0-9]*\).*/\2/p" build/fresh-$suite.log | head -1)"
		fuzz=0
		case "$suite" in trixie | forky) vms+=("$suite") ;; esac
	done
	# The node as production runs it (systemd, cgroup v2), with the package just built for
	# each release's Slurm: trixie's and forky's (scripts/vm.sh), one after the other: side
	# by side, each emulated on one of this machine's two cores, the nodes' tests took 600
	# s instead of 184 (trixie's, 2026-12-04), and a test that judges CPU time failed.
	# The scenarios that judge what the node's kernel measures run on the first node only
	# (PERSYST_VM_SCOPE=release on the others: vmnode/node_test.go); the syscount tests
	# still load and run the eBPF programs on each node's kernel.
	scope=all
	for suite in "${vms[@]}"; do
		stage "the $suite node as a virtual machine (scripts/vm.sh)"
		t=$SECONDS
		PERSYST_VM_SCOPE=$scope PERSYST_VM_DEB=$(ls -t build/package-"$suite"/persyst_*.deb | head -1) SUITE=$suite scripts/vm.sh
		echo "== $suite's virtual node: every test passed in $((SECONDS - t)) s"
		scope=release
	done
	stage "every test passed"
fi
