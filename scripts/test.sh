#!/usr/bin/env bash
# test.sh — every test of persyst: static checks, unit tests, then the integration tests
# against a real Slurm cluster started on this machine (needs root). `make test` runs it
# after installing dependencies and building.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(id -u)" != 0 ]; then
	echo "test: must run as root: the integration tests start slurmd in network namespaces" >&2
	exit 1
fi

# Tests that would skip where a kernel feature or root is missing fail instead when CI is
# set: this script is what CI runs, and every test must run here, not skip.
export CI="${CI:-1}"

echo "== gofmt, go vet"
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './build/*'))
if [ -n "$unformatted" ]; then
	echo "gofmt would change: $unformatted" >&2
	exit 1
fi
go vet ./...

mkdir -p build
echo "== unit tests"
go test -count=1 $(go list ./... | grep -v /integration) 2>&1 | tee build/test-unit.log

echo "== integration tests (a real Slurm cluster on this machine; verbose, so each scenario shows)"
PERSYST_INTEGRATION=1 go test -count=1 -v -timeout 20m ./integration/ 2>&1 | tee build/test-integration.log
