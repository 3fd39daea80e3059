#!/usr/bin/env bash
# overhead.sh — how much measuring slows a program down: wall time of a CPU-bound, a
# memory-bound and a syscall-heavy program (persyst-workload cpu / membw / openclose, each
# sized to about TARGET seconds) run directly and under `persyst run --interval 1s` and
# `--interval 60s`. The syscall storm (openat and close of one file, over and over) is
# where counting system calls costs a program most: each workload is also run with the
# system calls counted the way persyst did before eBPF (the perf syscall tracepoints), and
# the storm is run unmeasured beside a measured job (what a bystander pays).
#
#   bench/overhead.sh [ROUNDS]     (default 12 rounds; root, `make build`; about 6 minutes)
#
# Each workload also runs under `persyst run` with every metric source off (nothing
# measured; the command still in persyst's cgroups): the measured runs against those are
# what measuring costs apart from running in cgroups, which a Slurm job does anyway.
#
# A/B/C runs are interleaved: every round runs each configuration once, in an order
# rotated from round to round (U 1s 60s, 1s 60s U, 60s U 1s, ...), so that slow drift of
# the machine does not favour one configuration. Wall time per run from bash's
# EPOCHREALTIME (µs). Per configuration: median and MAD (median absolute deviation); the
# slowdown of each measured configuration against the unmeasured runs, as a ratio of
# medians and as the median of the per-round ratios (paired, robust to drift); the noise is
# the unmeasured runs' MAD/median.
#
# `persyst run` has a fixed cost the daemon does not have (it creates and removes the
# cgroups, probes the perf events and re-executes itself around the command), so it is
# measured separately (`persyst run -- /bin/true` against `/bin/true`) and the slowdown
# is also given net of it. What measuring costs the running program is given directly
# too: each workload reports its own run time (persyst-workload -report: from its start
# to its end, inside `persyst run`), and "own time" is the median over rounds of its ratio
# to the unmeasured run's, free of the fixed cost and of its noise. (Most of that fixed
# cost, when tracefs is mounted, is perf's syscall tracepoints: closing the last perf event
# of a tracepoint waits for RCU grace periods, tens of ms each, after the probe and at exit.)
#
# As root `persyst run` measures like the daemon: cgroups, perf events in cgroup mode per
# CPU, cgroup statistics and process I/O read at every cycle boundary.
set -euo pipefail
# The tracepoints need tracefs. If it is not mounted, the script runs in a private mount
# namespace with tracefs mounted there: nothing changes for the rest of the machine.
if [ ! -d /sys/kernel/tracing/events ] && [ ! -d /sys/kernel/debug/tracing/events ] && [ -z "${PERSYST_BENCH_NS:-}" ] && [ "$(id -u)" = 0 ]; then
	exec env PERSYST_BENCH_NS=1 unshare -m --propagation private bash -c 'mount -t tracefs nodev /sys/kernel/tracing || echo "could not mount tracefs: tracepoints not measured" >&2; exec "$0" "$@"' "$0" "$@"
fi
ROOT=$(cd "$(dirname "$0")/.." && pwd)
ROUNDS=${1:-12}
TARGET=${TARGET:-2} # seconds per workload run
export LC_ALL=C
cd "$ROOT"

[ "$(id -u)" = 0 ] || { echo "overhead: needs root (persyst run measures with cgroups and perf events in cgroup mode only as root)" >&2; exit 1; }
[ -x build/persyst ] && [ -x build/persyst-workload ] || { echo "overhead: run make build first" >&2; exit 1; }
tmp=$(mktemp -d /tmp/persyst-overhead.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
trap 'echo "overhead: failed at line $LINENO" >&2' ERR
# Private copies: a concurrent `make build` must not swap binaries under the benchmark.
cp build/persyst build/persyst-workload "$tmp/"
P=$tmp/persyst
W=$tmp/persyst-workload

now_us() { echo "${EPOCHREALTIME/./}"; }

# wall CMD...: run CMD (stdout to $tmp/last.out, stderr to $tmp/last.err), print µs.
wall() {
	local s e
	s=$(now_us)
	"$@" >"$tmp/last.out" 2>"$tmp/last.err" || { echo "overhead: $* failed:" >&2; cat "$tmp/last.err" >&2; exit 1; }
	e=$(now_us)
	echo $((e - s))
}

# med: the median of the numbers on stdin.
med() { sort -g | awk '{a[NR] = $1} END {printf "%.9g\n", (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }
# calibrate SMALL BIG CMD...: print the size (CMD's last argument) that makes CMD run
# about TARGET s, from the median of three runs at each of two sizes (fixed cost + linear).
calibrate() {
	local a=$1 b=$2 ta tb
	shift 2
	wall "$@" "$a" >/dev/null # warm-up
	ta=$(for _ in 1 2 3; do wall "$@" "$a"; done | med)
	tb=$(for _ in 1 2 3; do wall "$@" "$b"; done | med)
	awk -v a="$a" -v b="$b" -v ta="$ta" -v tb="$tb" -v t="$TARGET" 'BEGIN {
		per = (tb - ta) / (b - a); fixed = ta - a * per
		n = (t * 1e6 - fixed) / per; if (n < 1) n = 1; printf "%d\n", n }'
}

# stats: "median mad n" of the numbers on stdin.
stats() {
	local x m
	x=$(cat)
	m=$(med <<<"$x")
	echo "$m $(awk -v m="$m" '{d = $1 - m; print d < 0 ? -d : d}' <<<"$x" | med) $(wc -l <<<"$x")"
}

echo "persyst measurement overhead, $(date -u +%F)"
echo "machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), kernel $(uname -r), $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo)"
if [ -n "${PERSYST_BENCH_NS:-}" ] && [ -d /sys/kernel/tracing/events ]; then
	echo "(tracefs was not mounted: running in a private mount namespace with tracefs mounted at /sys/kernel/tracing)"
fi
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg); $ROUNDS rounds; about ${TARGET} s per run"

# The fixed cost of `persyst run` around a command that does nothing.
fu=() fr=()
wall "$P" run --interval 60s -- /bin/true >/dev/null # warm-up
for i in $(seq 1 15); do
	fu+=("$(wall /bin/true)")
	fr+=("$(wall "$P" run --interval 60s -- /bin/true)")
done
read -r fm fd _ < <(printf '%s\n' "${fr[@]}" | stats)
read -r tm td _ < <(printf '%s\n' "${fu[@]}" | stats)
fixed=$(awk -v a="$fm" -v b="$tm" 'BEGIN {printf "%.0f\n", a - b}')
awk -v f="$fixed" -v d="$fd" -v t="$tm" 'BEGIN {printf "fixed cost of persyst run (median of run -- /bin/true minus median of /bin/true (%.1f ms), 15 runs each): %.1f ms (MAD %.1f ms)\n", t / 1e3, f / 1e3, d / 1e3}'

cpu_n=$(calibrate 100000000 400000000 "$W" cpu -iterations)
mem_n=$(calibrate 8 24 "$W" membw -mib 256 -passes)
sys_n=$(calibrate 100000 400000 "$W" openclose -file "$tmp/storm" -n)

# own: the workload's own run time in the last run (persyst-workload -report), µs.
own() { awk '$1 == "elapsed_seconds" {printf "%.0f\n", $2 * 1e6}' "$tmp/last.out"; }

# paired A-ARRAY B-ARRAY: the median over rounds of A[i]/B[i].
paired() {
	local -n a=$1 b=$2
	local i
	for i in "${!b[@]}"; do echo "${a[i]} ${b[i]}"; done | awk '{printf "%.9f\n", $1 / $2}' | med
}

# row LABEL UNMEASURED-ARRAY MEASURED-ARRAY SAMPLES-ARRAY UNMEASURED-OWN MEASURED-OWN: one
# table row (uses mu, fixed).
row() {
	local -n t=$3 smp=$4
	local m d p po samp
	read -r m d _ < <(printf '%s\n' "${t[@]}" | stats)
	p=$(paired "$3" "$2")
	po=$(paired "$6" "$5")
	samp=$(printf '%s\n' "${smp[@]}" | awk '{s += $1} END {printf "%.1f", s / NR}')
	awk -v c="$1" -v m="$m" -v d="$d" -v mu="$mu" -v p="$p" -v po="$po" -v f="$fixed" -v s="$samp" 'BEGIN {
		net = (f == "") ? "—" : sprintf("%+.2f %%", 100 * ((m - f) / mu - 1))
		printf "| %s | %.3f | %.4f | %+.2f %% | %+.2f %% | %s | %+.2f %% | %s |\n", c, m / 1e6, d / 1e6,
			100 * (m / mu - 1), 100 * (p - 1), net, 100 * (po - 1), s }'
}

# The system calls counted the way persyst did before eBPF: with the perf syscall
# tracepoints (MetricSource.syscalls=off).
printf 'MetricSource.syscalls=off\n' >"$tmp/tracepoints.conf"
# And every call counted on the raw tracepoint, whatever it costs (where the kernel
# refuses fentry; the default samples beyond SyscallBudget=0.25%).
printf 'SyscallBudget=0%%\n' >"$tmp/every.conf"
# And nothing measured: every metric source off. The command still runs in persyst's
# cgroups, as a Slurm job runs in Slurm's whether measured or not: the measured
# configurations against this one are what measuring itself costs, apart from what
# running in cgroups costs a program (charging its kernel memory, group scheduling).
for s in perf syscalls cgroup procio netdev infiniband rapl gpu schedstat suspend outside; do
	echo "MetricSource.$s=off"
done >"$tmp/nothing.conf"
samples() { grep -m1 -o '"samples": [0-9]*' "$tmp/last.err" | grep -o '[0-9]*$'; }
# opens: the file opens `persyst run --json` counted for the run (the summary's totals,
# the first such key in its output).
opens() { grep -m1 -o '"syscalls:sys_enter_openat": [0-9.e+]*' "$tmp/last.err" | awk '{printf "%.0f\n", $2}'; }

# bench LABEL ARGS...: the interleaved rounds for one workload.
bench() {
	local label=$1 i k cfg t order
	shift
	local -a tu=() t1=() t60=() ttp=() tsm=() tno=() s1=() s60=() stp=() ssm=() sno=() o1=() o60=() otp=() osm=()
	local -a wu=() w1=() w60=() wtp=() wsm=() wno=() # the workload's own run times
	local cfgs=(U 1s 60s tp sm no)
	for cfg in U 1s 60s; do # warm-up, once each
		case $cfg in U) wall "$@" ;; *) wall "$P" run --interval "$cfg" --json -- "$@" ;; esac >/dev/null
	done
	for i in $(seq 0 $((ROUNDS - 1))); do
		order=()
		for k in 0 1 2 3 4 5; do order+=("${cfgs[$(((i + k) % 6))]}"); done
		for cfg in "${order[@]}"; do
			case $cfg in
			U) tu[i]=$(wall "$@"); wu[i]=$(own) ;;
			1s) t1[i]=$(wall "$P" run --interval 1s --json -- "$@"); s1+=("$(samples)"); o1+=("$(opens)"); w1[i]=$(own) ;;
			60s) t60[i]=$(wall "$P" run --interval 60s --json -- "$@"); s60+=("$(samples)"); o60+=("$(opens)"); w60[i]=$(own) ;;
			tp) ttp[i]=$(wall "$P" run --interval 60s --config "$tmp/tracepoints.conf" --json -- "$@"); stp+=("$(samples)"); otp+=("$(opens)"); wtp[i]=$(own) ;;
			sm) tsm[i]=$(wall "$P" run --interval 60s --config "$tmp/every.conf" --json -- "$@"); ssm+=("$(samples)"); osm+=("$(opens)"); wsm[i]=$(own) ;;
			no) tno[i]=$(wall "$P" run --interval 60s --config "$tmp/nothing.conf" --json -- "$@"); sno+=("$(samples)"); wno[i]=$(own) ;;
			esac
		done
	done
	read -r mu du nu < <(printf '%s\n' "${tu[@]}" | stats)
	echo
	echo "== $label: $*"
	echo "| configuration | median (s) | MAD (s) | slowdown (medians) | slowdown (paired) | net of fixed cost | own time (paired) | samples/run |"
	echo "|---|---|---|---|---|---|---|---|"
	awk -v m="$mu" -v d="$du" 'BEGIN {printf "| unmeasured | %.3f | %.4f | | | | | |\n", m / 1e6, d / 1e6}'
	row "--interval 1s" tu t1 s1 wu w1
	row "--interval 60s" tu t60 s60 wu w60
	row "--interval 60s, perf tracepoints" tu ttp stp wu wtp
	row "--interval 60s, every call (SyscallBudget=0%)" tu tsm ssm wu wsm
	# Its fixed cost is not the measured runs': no net column.
	fixed= row "--interval 60s, nothing measured (in cgroups only)" tu tno sno wu wno
	awk -v du="$du" -v mu="$mu" -v n="$nu" 'BEGIN { printf "noise (unmeasured MAD/median, n=%d): %.2f %%\n", n, 100 * du / mu }'
	read -r m d _ < <(printf '%s\n' "${wu[@]}" | stats)
	awk -v d="$d" -v m="$m" 'BEGIN { printf "noise of its own time (unmeasured): %.2f %%\n", 100 * d / m }'
	if [ -n "${OPENS:-}" ]; then
		# The file opens counted per run against those the workload made (OPENS), each
		# configuration's runs: median, least and most, and how many runs came within 5 %
		# (issue 34's bound for a sampled count).
		local cfg2 arr
		for cfg2 in "--interval 1s:o1" "--interval 60s:o60" "perf tracepoints:otp" "every call:osm"; do
			local -n arr=${cfg2##*:}
			printf '%s\n' "${arr[@]}" | awk -v n="$OPENS" '{printf "%.9f\n", $1 / n - 1}' | sort -g | awk -v c="${cfg2%:*}" -v n="$OPENS" '{v[NR] = $1; if ($1 >= -0.05 && $1 <= 0.05) w++} END {
				m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
				printf "file opens counted, %s: %+.1f %% of the %d made (median; %+.1f %% to %+.1f %%; within 5 %% in %d of %d runs)\n", c, 100 * m, n, 100 * v[1], 100 * v[NR], w, NR }'
			unset -n arr
		done
	fi
	# Both measured configurations pay the same fixed cost: their difference is the cost of
	# the reads at every 1 s boundary.
	local m1 m60 p
	m1=$(printf '%s\n' "${t1[@]}" | med)
	m60=$(printf '%s\n' "${t60[@]}" | med)
	p=$(paired t1 t60)
	read -r _ d60 _ < <(printf '%s\n' "${t60[@]}" | stats)
	awk -v a="$m1" -v b="$m60" -v p="$p" -v d="$d60" 'BEGIN {
		printf "cost of the 1 s cycle reads (--interval 1s against --interval 60s): %+.2f %% (medians), %+.2f %% (paired); noise of the 60 s runs %.2f %%\n",
			100 * (a / b - 1), 100 * (p - 1), 100 * d / b }'
	# What measuring costs apart from the cgroups: the own times against those of the
	# runs in the cgroups with nothing measured.
	local q1 q60
	q1=$(paired w1 wno)
	q60=$(paired w60 wno)
	awk -v a="$q1" -v b="$q60" 'BEGIN {
		printf "cost of measuring apart from the cgroups (own time against nothing measured, paired): %+.2f %% at 60 s, %+.2f %% at 1 s\n", 100 * (b - 1), 100 * (a - 1) }'
}

bench "CPU-bound" "$W" cpu -report -iterations "$cpu_n"
bench "memory-bound" "$W" membw -report -mib 256 -passes "$mem_n"
OPENS=$sys_n bench "syscall storm (openat/close)" "$W" openclose -report -file "$tmp/storm" -n "$sys_n"

# bystander: the syscall storm unmeasured, alone (A) or while a measured job runs beside
# it (`persyst run --interval 60s -- sleep`, system calls counted with eBPF as by default
# (E), with the perf tracepoints (T), or with eBPF counting every call (S)): what a
# process outside every measured job pays.
bystander() {
	local i k cfg order pid
	local -a ta=() te=() tt=() ts=() wa=() we=() wt=() ws=()
	local cfgs=(A E T S)
	for i in $(seq 0 $((ROUNDS - 1))); do
		order=()
		for k in 0 1 2 3; do order+=("${cfgs[$(((i + k) % 4))]}"); done
		for cfg in "${order[@]}"; do
			pid=
			case $cfg in
			E) "$P" run --interval 60s -- sleep 600 >/dev/null 2>&1 & pid=$! ;;
			T) "$P" run --interval 60s --config "$tmp/tracepoints.conf" -- sleep 600 >/dev/null 2>&1 & pid=$! ;;
			S) "$P" run --interval 60s --config "$tmp/every.conf" -- sleep 600 >/dev/null 2>&1 & pid=$! ;;
			esac
			# Its counters are open by then, and its start-up over (BPF programs loaded,
			# their cost calibrated: the daemon does that once, not at each job).
			[ -z "$pid" ] || sleep 2
			case $cfg in
			A) ta[i]=$(wall "$@"); wa[i]=$(own) ;;
			E) te[i]=$(wall "$@"); we[i]=$(own) ;;
			T) tt[i]=$(wall "$@"); wt[i]=$(own) ;;
			S) ts[i]=$(wall "$@"); ws[i]=$(own) ;;
			esac
			if [ -n "$pid" ]; then
				pkill -TERM -P "$pid" 2>/dev/null || true # the sleep: persyst run ends with it
				wait "$pid" 2>/dev/null || true
			fi
		done
	done
	read -r mu du nu < <(printf '%s\n' "${ta[@]}" | stats)
	echo
	echo "== bystander: $* (unmeasured) beside a measured job"
	echo "| configuration | median (s) | MAD (s) | slowdown (medians) | slowdown (paired) | net of fixed cost | own time (paired) | samples/run |"
	echo "|---|---|---|---|---|---|---|---|"
	awk -v m="$mu" -v d="$du" 'BEGIN {printf "| alone | %.3f | %.4f | | | | | |\n", m / 1e6, d / 1e6}'
	local -a none=()
	local f=$fixed
	fixed=0
	row "beside a job, eBPF" ta te none wa we
	row "beside a job, perf tracepoints" ta tt none wa wt
	row "beside a job, eBPF every call (SyscallBudget=0%)" ta ts none wa ws
	fixed=$f
	awk -v du="$du" -v mu="$mu" -v n="$nu" 'BEGIN { printf "noise (alone MAD/median, n=%d): %.2f %%; resolution of the paired slowdown about 2 x noise / sqrt(n)\n", n, 100 * du / mu }'
}
bystander "$W" openclose -report -file "$tmp/storm2" -n "$sys_n"
echo
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "slowdown (medians) = median(measured)/median(unmeasured) - 1; (paired) = median over rounds of measured/unmeasured - 1;"
echo "net of fixed cost = (median(measured) - fixed cost)/median(unmeasured) - 1; own time (paired) = median over rounds of the workload's own run time measured/unmeasured - 1. samples/run = cycle reads per run (persyst run --json), end read included."
