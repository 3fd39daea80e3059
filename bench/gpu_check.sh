#!/usr/bin/env bash
# gpu_check.sh — persyst on a real NVIDIA GPU, against a workload of known phases.
#
#   bench/gpu_check.sh [OUTDIR]     (needs `make build`, an NVIDIA driver, PyTorch; root)
#
# 1. persyst-nvml (the daemon's NVML helper) is read once a second while
#    bench/gpu/workload.py runs an idle phase with 8 GiB allocated, a full-GPU phase, a
#    one-block phase and an idle phase; nvidia-smi samples beside it. analyse.py prints,
#    per phase, the utilization, GPM SM activity/occupancy/tensor/DRAM, memory and energy
#    over time against the power readings; the round trip of one read is timed.
# 2. The CPU side: `persyst run` over a compute-bound and a memory-bound program, with
#    what it measured of the hardware counters (instructions, cycles, cache misses): a
#    machine without a PMU says "not measured" and why; with `perf` installed, perf
#    stat's counts of the same programs are printed beside.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
B=${BUILD:-$ROOT/build}
O=${1:-${OUT:-/tmp/gpu_check}}
mkdir -p "$O"
cd "$ROOT"
export LC_ALL=C

echo "== machine"
uname -r
nproc
nvidia-smi --query-gpu=name,driver_version,memory.total,power.limit,persistence_mode --format=csv 2>&1 | tee "$O/smi-info.txt"

echo "== 1. persyst-nvml over a known workload"
coproc H { "$B/persyst-nvml" -i 1000 2>&1; }
hpid=$H_PID
while IFS= read -r -u "${H[0]}" line; do
	echo "$line" >>"$O/hello.txt"
	case $line in ready* | fail*) break ;; esac
done
cat "$O/hello.txt"
if ! grep -q '^ready' "$O/hello.txt"; then
	echo "persyst-nvml did not start"
else
	nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used,power.draw --format=csv,noheader -lms 1000 >"$O/smi.csv" 2>&1 &
	smi=$!
	PYTHONUNBUFFERED=1 python3 bench/gpu/workload.py >"$O/workload.txt" 2>"$O/workload.err" &
	w=$!
	: >"$O/reads.txt"
	: >"$O/rtt.txt"
	while kill -0 "$w" 2>/dev/null; do
		t0=${EPOCHREALTIME/./}
		echo read >&"${H[1]}"
		while IFS= read -r -u "${H[0]}" line; do
			[ "$line" = done ] && break
			echo "$line" >>"$O/reads.txt"
		done
		t1=${EPOCHREALTIME/./}
		echo $((t1 - t0)) >>"$O/rtt.txt"
		sleep 1
	done
	wait "$w"
	echo "workload exit $?"
	kill "$smi" 2>/dev/null
	cat "$O/workload.txt"
	tail -3 "$O/workload.err"
	read -r _ _ _ _ _ _ _ _ _ _ _ _ _ ut st _ <"/proc/$hpid/stat" 2>/dev/null || true
	echo "helper CPU: $(((${ut:-0} + ${st:-0}) * 1000 / $(getconf CLK_TCK))) ms in $(wc -l <"$O/rtt.txt") reads"
	sort -n "$O/rtt.txt" | awk '{a[NR]=$1} END {printf "read round trip: median %d us, max %d us (n=%d)\n", a[int((NR+1)/2)], a[NR], NR}'
	echo quit >&"${H[1]}"
	python3 bench/gpu/analyse.py "$O"
fi

echo "== 2. hardware counters (the CPU side)"
for w in "cpu -iterations 400000000" "membw"; do
	# shellcheck disable=SC2086
	"$B/persyst" run --interval 1s --json-file "$O/run-${w%% *}.json" -- "$B/persyst-workload" $w >"$O/run-${w%% *}.txt" 2>&1
	echo "persyst run $w: exit $?"
	python3 - "$O/run-${w%% *}.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
s = r.get("summary", r)
tot, nm = s.get("totals", {}), s.get("not_measured", {})
for k in ("instructions", "cycles", "cache-misses", "task-clock"):
    print(f"  {k}: {tot[k]:.4g}" if k in tot else f"  {k}: not measured ({nm.get(k, 'absent')})")
PY
	if command -v perf >/dev/null; then
		# shellcheck disable=SC2086
		perf stat -x, -e instructions,cycles "$B/persyst-workload" $w 2>&1 >/dev/null | tail -2
	else
		echo "  perf is not installed here"
	fi
done
tail -20 "$O/run-cpu.txt"
