#!/usr/bin/env bash
# run.sh — the main job: measure one command the way persyst measures a Slurm job
# (`persyst run`), printing the measured totals to stderr at the end. Without arguments it
# runs a short mixed workload (2 s of CPU, 64 MiB written in 4 KiB calls, 2,000 file opens,
# 128 MiB of memory touched in steps). As root, tracefs is mounted in a private mount
# namespace when the host has not mounted it, so that file opens are counted.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=$ROOT/build/persyst
LOAD=$ROOT/build/persyst-workload
INTERVAL=${INTERVAL:-1s}
if [ $# -eq 0 ]; then
	scratch=$(mktemp -d /tmp/persyst-run-XXXX)
	trap 'rm -rf "$scratch"' EXIT
	set -- sh -c "$LOAD spin -seconds 2 && $LOAD write -file $scratch/data -bytes 67108864 -size 4096 &&
		$LOAD openclose -file $scratch/f -n 2000 && $LOAD alloc -mib 128 -steps 4 -step-seconds 0.5"
	echo "persyst run: measuring a sample workload (give a command to measure your own)" >&2
fi
if [ "$(id -u)" = 0 ] && [ ! -e /sys/kernel/tracing/events ] && command -v unshare >/dev/null; then
	exec unshare -m sh -c 'mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null; exec "$@"' sh \
		"$BIN" run --interval "$INTERVAL" -- "$@"
fi
exec "$BIN" run --interval "$INTERVAL" -- "$@"
