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
# 3. What measuring costs: the helper's CPU time over 20 s of sampling every 1 s and
#    every 5 s, and each NVML call of a tick timed ("cost").
#
# PARTS="1 1b 2 3" (the default) picks parts.
set -uo pipefail
PARTS=" ${PARTS:-1 1b 2 3} "
part() { [[ $PARTS == *" $1 "* ]]; }
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

if part 1; then
echo "== 1. persyst-nvml over a known workload"
coproc H { exec "$B/persyst-nvml" -i 1000 2>&1; }
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
	read -r -a hst <"/proc/$hpid/stat" 2>/dev/null; ut=${hst[13]:-0}; st=${hst[14]:-0}
	echo "helper CPU: $(((${ut:-0} + ${st:-0}) * 1000 / $(getconf CLK_TCK))) ms in $(wc -l <"$O/rtt.txt") reads"
	sort -n "$O/rtt.txt" | awk '{a[NR]=$1} END {printf "read round trip: median %d us, max %d us (n=%d)\n", a[int((NR+1)/2)], a[NR], NR}'
	echo quit >&"${H[1]}"
	python3 bench/gpu/analyse.py "$O"
	awk '/^gpu 0/ {for (i = 3; i <= NF; i++) if ($i ~ /^tick_us=/) {split($i, a, "="); print a[2]}}' "$O/reads.txt" | sort -n |
		awk '{a[NR]=$1} END {if (NR) printf "helper sampling of one GPU (a tick): median %d us, max %d us\n", a[int((NR+1)/2)], a[NR]}'
fi

fi

if part 1b; then
echo "== 1b. persyst run over the same workload (cycle 2 s)"
"$B/persyst" run --interval 2s --json-file "$O/run-gpu.json" -- python3 bench/gpu/workload.py >"$O/run-gpu.txt" 2>&1
echo "persyst run: exit $?"
grep -v '^info\|^phase' "$O/run-gpu.txt"
grep '^phase' "$O/run-gpu.txt"
python3 - "$O/run-gpu.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
ss = r.get("samples", [])
print("per sample: t(s) busy% unused sm% occ% tensor% memGiB W thermal_s capped_s")
t0 = None
for s in ss:
    j, sec = s.get("job", {}), s.get("seconds", 0)
    if "gpus" not in j or sec <= 0:
        continue
    g = j["gpus"]
    from datetime import datetime
    t = datetime.fromisoformat(s["time"].replace("Z", "+00:00")).timestamp()
    t0 = t0 or t
    f = lambda k, d=1: (f"{100 * j[k] / (g * sec):6.1f}" if d == 1 else f"{j[k] / d:6.1f}") if k in j else "     -"
    print(f"{t - t0:5.1f} {f('gpu_busy_seconds')} {f('gpu_unused_seconds')} {f('gpu_sm_active_seconds')} {f('gpu_sm_occupancy_seconds')}"
          f" {f('gpu_tensor_active_seconds')} {j.get('gpu_memory_peak_bytes', 0) / 2**30:6.2f} {j.get('gpu_energy_joules', 0) / sec:6.1f}"
          f" {j.get('gpu_thermal_throttled_seconds', -1):5.2f} {j.get('gpu_power_capped_seconds', -1):5.2f}")
nm = r.get("summary", {}).get("not_measured", {})
print("GPU metrics not measured:", {k: v for k, v in nm.items() if k.startswith("gpu")} or "none")
PY

fi

if part 2; then
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
fi

if part 3; then
	echo "== 3. what measuring a GPU costs"
	hz=$(getconf CLK_TCK)
	for iv in 1000 5000; do
		coproc C { exec "$B/persyst-nvml" -i "$iv" 2>&1; }
		while IFS= read -r -u "${C[0]}" line; do case $line in ready* | fail*) break ;; esac; done
		read -r -a st <"/proc/$C_PID/stat"
		c0=$((st[13] + st[14]))
		sleep 20
		read -r -a st <"/proc/$C_PID/stat"
		echo "sampling every $iv ms: helper CPU $(((st[13] + st[14] - c0) * 1000 / hz)) ms in 20 s (GPU idle)"
		echo cost >&"${C[1]}"
		while IFS= read -r -u "${C[0]}" line; do [ "$line" = done ] && break; echo "  $line us (wall, CPU)"; done
		echo quit >&"${C[1]}"
		wait "$C_PID" 2>/dev/null
	done
fi
