#!/usr/bin/env bash
# daemon_load.sh — what the persyst node daemon costs the node: its CPU time and memory
# with 32 concurrent jobs measured at a 1 s cycle, and with none.
#
#   bench/daemon_load.sh [JOBS] [SECONDS]   (default 32 jobs, 60 s per phase; root, `make build`)
#
# PERSYST_BIN=path runs another build of persyst (default build/persyst), e.g. to compare
# two commits; STRACE_SECS (default 10, 0: off) sets the strace window of each phase.
#
# No Slurm: the script plays slurmd and the SPANK plugin. It starts a daemon for node
# "benchnode" (own socket and state dir under a temp dir), creates for each fake job the
# cgroups Slurm's cgroup/v1 plugin would (slurm_benchnode/uid_0/job_N/step_0 in the cpuacct,
# memory, pids and cpuset hierarchies, cpuset.cpus/mems copied from the parent) with one
# `sleep` in the step (idle, so that it does not disturb the daemon's CPU time), sends
# job_start and step_start over the daemon's socket with the wire protocol (bench/loadgen),
# and moves the sleep into the perf cgroup the daemon answers (as the plugin does).
#
# Phases: 0 jobs, then JOBS jobs, SECONDS each. In each the daemon's CPU time
# (utime+stime from /proc/PID/stat over CLK_TCK; also the scheduler's run time of its
# threads from /proc/PID/task/*/schedstat, ns) and memory (VmRSS every second, VmHWM at
# the end) are sampled. `persyst jobs --json` checks that every job's sample count grows
# by about one per cycle; the daemon keeps every sample in memory, so RSS growth over
# the samples taken is reported too.
# Then, per phase, `strace -c -f -p PID` counts the daemon's system calls for STRACE_SECS
# (strace slows the daemon down, so this comes after the CPU window; strace is installed
# with apt-get if missing). The summary gives, per job and per cycle, the daemon's CPU
# time (scheduler run time, net of the phase without jobs) and its system calls (net of
# the phase without jobs, over the cycles the jobs' sample counts show), and the system
# calls that make most of them.
# At the end: job_end for every job, SIGTERM to the daemon, the sleeps killed, every cgroup
# created removed, and a check that none is left.
set -euo pipefail
# The tracepoints need tracefs. If it is not mounted, the script runs in a private mount
# namespace with tracefs mounted there: nothing changes for the rest of the machine.
if [ ! -d /sys/kernel/tracing/events ] && [ ! -d /sys/kernel/debug/tracing/events ] && [ -z "${PERSYST_BENCH_NS:-}" ] && [ "$(id -u)" = 0 ]; then
	exec env PERSYST_BENCH_NS=1 unshare -m --propagation private bash -c 'mount -t tracefs nodev /sys/kernel/tracing || echo "could not mount tracefs: tracepoints not measured" >&2; exec "$0" "$@"' "$0" "$@"
fi
ROOT=$(cd "$(dirname "$0")/.." && pwd)
JOBS=${1:-32}
SECS=${2:-60}
NODE=${NODE:-benchnode}
FIRST=${FIRST_JOB:-900001}
cd "$ROOT"

[ "$(id -u)" = 0 ] || { echo "daemon_load: needs root (cgroups, the daemon's socket)" >&2; exit 1; }
BIN=${PERSYST_BIN:-build/persyst}
STRACE_SECS=${STRACE_SECS:-10}
[ -x "$BIN" ] || { echo "daemon_load: $BIN missing: run make build first (or set PERSYST_BIN)" >&2; exit 1; }
if [ "$STRACE_SECS" -gt 0 ] && ! command -v strace >/dev/null; then
	echo "daemon_load: installing strace (counts the daemon's system calls)" >&2
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q strace >/dev/null || { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q strace >/dev/null; }
fi
CG=/sys/fs/cgroup
for c in cpuacct memory pids cpuset; do
	[ -d "$CG/$c" ] || { echo "daemon_load: no cgroup v1 $c hierarchy at $CG/$c (this script fakes Slurm's cgroup/v1 layout)" >&2; exit 1; }
done

tmp=$(mktemp -d /tmp/persyst-load.XXXXXX)
# A private copy: a concurrent `make build` must not swap binaries under the benchmark.
cp "$BIN" "$tmp/persyst"
go build -o "$tmp/loadgen" ./bench/loadgen
P=$tmp/persyst
SOCK=$tmp/persyst.sock
daemon_pid=
sleep_pids=()
started_jobs=()

cleanup() {
	set +e
	for j in "${started_jobs[@]}"; do "$tmp/loadgen" end -socket "$SOCK" -job "$j" 2>/dev/null; done
	started_jobs=()
	if [ -n "$daemon_pid" ] && kill -0 "$daemon_pid" 2>/dev/null; then
		kill -TERM "$daemon_pid"
		for _ in $(seq 50); do kill -0 "$daemon_pid" 2>/dev/null || break; sleep 0.1; done
		kill -0 "$daemon_pid" 2>/dev/null && { echo "daemon_load: daemon $daemon_pid ignored SIGTERM, killing it" >&2; kill -KILL "$daemon_pid"; }
		wait "$daemon_pid" 2>/dev/null
	fi
	daemon_pid=
	for p in "${sleep_pids[@]}"; do kill "$p" 2>/dev/null; done
	for p in "${sleep_pids[@]}"; do wait "$p" 2>/dev/null; done
	sleep_pids=()
	# Deepest first; a cgroup can stay busy for a moment after its last task exited.
	local dirs
	dirs=$( { for c in cpuacct memory pids cpuset; do [ -d "$CG/$c/slurm_$NODE" ] && find "$CG/$c/slurm_$NODE" -type d; done
		[ -d "$CG/unified/persyst_$NODE" ] && find "$CG/unified/persyst_$NODE" -type d; } | awk '{print length($0) " " $0}' | sort -rn | cut -d' ' -f2-)
	for d in $dirs; do
		for _ in $(seq 50); do rmdir "$d" 2>/dev/null && break; [ -d "$d" ] || break; sleep 0.1; done
	done
	left=$( { for c in cpuacct memory pids cpuset; do [ -d "$CG/$c/slurm_$NODE" ] && echo "$CG/$c/slurm_$NODE"; done
		[ -d "$CG/unified/persyst_$NODE" ] && echo "$CG/unified/persyst_$NODE"; } || true)
	if [ -n "$left" ]; then
		echo "daemon_load: cgroups left behind:" $left >&2
	else
		echo "cleanup: daemon stopped, sleeps killed, no cgroup of slurm_$NODE or persyst_$NODE left"
	fi
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'echo "daemon_load: failed at line $LINENO" >&2' ERR

hz=$(getconf CLK_TCK)
# cpu_ticks PID: utime+stime (fields 14, 15 of /proc/PID/stat; the comm may hold spaces).
cpu_ticks() { sed 's/.*) //' "/proc/$1/stat" | awk '{print $12 + $13}'; }
# run_ns PID: the scheduler's run time of all its threads (ns); Go threads do not exit.
run_ns() { cat /proc/"$1"/task/*/schedstat 2>/dev/null | awk '{s += $1} END {printf "%d\n", s}'; }
status_kb() { awk -v k="$2:" '$1 == k {print $2}' "/proc/$1/status"; }
now_us() { echo "${EPOCHREALTIME/./}"; }

# jobs_state: "jobs measured samples_min samples_max samples_total" from `persyst jobs --json`.
jobs_state() {
	"$P" jobs --node "$NODE" --socket "$SOCK" --json |
		jq -r '[(.jobs // [])[] | select(.state == "running")] as $r | [$r[] | select(.measurement != null) | .measurement.samples] as $s
		       | "\($r | length) \($s | length) \($s | min // 0) \($s | max // 0) \($s | add // 0)"'
}

# phase LABEL: sample the daemon for SECS seconds; prints one table row.
phase() {
	local label=$1 t0 t1 c0 c1 n0 n1 rss_sum=0 rss_max=0 rss_first rss_last n=0 s0 s1 r
	s0=$(jobs_state)
	t0=$(now_us); c0=$(cpu_ticks "$daemon_pid"); n0=$(run_ns "$daemon_pid")
	rss_first=$(status_kb "$daemon_pid" VmRSS)
	for _ in $(seq "$SECS"); do
		sleep 1
		r=$(status_kb "$daemon_pid" VmRSS)
		rss_sum=$((rss_sum + r)); n=$((n + 1))
		[ "$r" -gt "$rss_max" ] && rss_max=$r
	done
	t1=$(now_us); c1=$(cpu_ticks "$daemon_pid"); n1=$(run_ns "$daemon_pid")
	rss_last=$(status_kb "$daemon_pid" VmRSS)
	s1=$(jobs_state)
	local hwm
	hwm=$(status_kb "$daemon_pid" VmHWM)
	awk -v l="$label" -v dt=$(((t1 - t0))) -v dc=$((c1 - c0)) -v hz="$hz" -v dn=$((n1 - n0)) \
		-v rm=$((rss_sum / n)) -v rx="$rss_max" -v r0="$rss_first" -v r1="$rss_last" -v hwm="$hwm" 'BEGIN {
		s = dt / 1e6
		printf "| %-8s | %6.1f | %7.2f %% | %7.2f %% | %8.1f | %8.1f | %+8.2f | %8.1f |\n", l, s,
			100 * dc / hz / s, 100 * dn / 1e9 / s, rm / 1024, rx / 1024, (r1 - r0) / 1024, hwm / 1024 }'
	read -r j0 m0 mn0 mx0 tot0 <<<"$s0"
	read -r j1 m1 mn1 mx1 tot1 <<<"$s1"
	sched_ns[$label]=$((n1 - n0)); sched_us[$label]=$((t1 - t0))
	checks+=("$label: running jobs $j1, measured $m1; samples per job $mn0–$mx0 → $mn1–$mx1 (total $tot0 → $tot1, +$((tot1 - tot0)) in ${SECS} s)")
	if [ "$tot1" -gt "$tot0" ]; then
		checks+=("  RSS growth per sample taken: $(awk -v r="$((rss_last - rss_first))" -v n="$((tot1 - tot0))" 'BEGIN {printf "%.2f KiB", r / n}')")
	fi
	if [ "$j1" -gt 0 ] && { [ "$m1" != "$j1" ] || [ "$mn1" -le "$mn0" ]; }; then
		checks+=("  WARNING: not every job's sample count grew")
	fi
}

declare -A sched_ns sched_us sys_calls sys_cycles
# syscalls LABEL JOBS: count the daemon's system calls for STRACE_SECS with strace -c;
# keeps the total and the cycles the jobs' samples show, and the per-call table.
syscalls() {
	local label=$1 n=$2 s0 s1
	[ "$STRACE_SECS" -gt 0 ] || return 0
	s0=$(jobs_state)
	timeout -s INT "$STRACE_SECS" strace -c -f -q -p "$daemon_pid" -o "$tmp/strace.$label" || true
	s1=$(jobs_state)
	read -r _ _ _ _ tot0 <<<"$s0"
	read -r _ _ _ _ tot1 <<<"$s1"
	sys_calls[$label]=$(awk '$NF == "total" {print $4}' "$tmp/strace.$label")
	# Cycles in the window: from the samples taken (one per job per cycle), else seconds.
	if [ "$n" -gt 0 ] && [ "$tot1" -gt "$tot0" ]; then
		sys_cycles[$label]=$(awk -v d=$((tot1 - tot0)) -v n="$n" 'BEGIN {printf "%.2f", d / n}')
	else
		sys_cycles[$label]=$STRACE_SECS
	fi
}

echo "persyst daemon load: $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')), kernel $(uname -r), $(date -u +%F)"
if [ -n "${PERSYST_BENCH_NS:-}" ] && [ -d /sys/kernel/tracing/events ]; then
	echo "(tracefs was not mounted: running in a private mount namespace with tracefs mounted at /sys/kernel/tracing)"
fi
echo "node $NODE, cycle 1s, $JOBS jobs (one idle sleep each), ${SECS} s per phase; load average before: $(cut -d' ' -f1-3 /proc/loadavg)"

"$P" daemon --node "$NODE" --cycle 1s --socket "$SOCK" --state-dir "$tmp/state" 2>"$tmp/daemon.log" &
daemon_pid=$!
for _ in $(seq 100); do [ -S "$SOCK" ] && "$P" jobs --node "$NODE" --socket "$SOCK" >/dev/null 2>&1 && break; sleep 0.1; done
"$P" jobs --node "$NODE" --socket "$SOCK" >/dev/null || { echo "daemon_load: daemon not answering; log:" >&2; cat "$tmp/daemon.log" >&2; exit 1; }
probed=$(grep -m1 '"perf events probed"' "$tmp/daemon.log" | jq -r '(.events | join(",")) + " (" + (.not_available | tostring) + " not available)"' 2>/dev/null || echo "none (see the daemon log)")
echo "daemon pid $daemon_pid; perf events: $probed"

checks=()
echo
echo "| jobs     | secs   | CPU (ticks) | CPU (sched) | RSS mean | RSS max  | RSS Δ    | VmHWM    |"
echo "|----------|--------|-------------|-------------|----------|----------|----------|----------|"
sleep 3
phase "0"
syscalls "0" 0

# Fake Slurm cgroups and one sleep per job.
mkcg() { # mkcg CTRL PATH... : create nested dirs, copying cpuset.cpus/mems from the parent
	local c=$1 d=$CG/$1 p
	shift
	for p in "$@"; do
		d=$d/$p
		if [ ! -d "$d" ]; then
			mkdir "$d"
			if [ "$c" = cpuset ]; then
				cat "$(dirname "$d")/cpuset.cpus" >"$d/cpuset.cpus"
				cat "$(dirname "$d")/cpuset.mems" >"$d/cpuset.mems"
			fi
		fi
	done
}
for i in $(seq 0 $((JOBS - 1))); do
	j=$((FIRST + i))
	for c in cpuacct memory pids cpuset; do mkcg "$c" "slurm_$NODE" uid_0 "job_$j" step_0; done
	sleep 100000 &
	sp=$!
	sleep_pids+=("$sp")
	for c in cpuacct memory pids cpuset; do echo "$sp" >"$CG/$c/slurm_$NODE/uid_0/job_$j/step_0/cgroup.procs"; done
	"$tmp/loadgen" start -socket "$SOCK" -node "$NODE" -job "$j" -pid "$sp" >/dev/null
	started_jobs+=("$j")
done
sleep 3
checks+=("$(grep -m1 '"measuring job"' "$tmp/daemon.log" | jq -r '"first job measured on cpus " + .cpus + ", perf cgroup " + .perf_cgroup + ", processes from " + .procs' || true)")
phase "$JOBS"
syscalls "$JOBS" "$JOBS"

echo
printf '%s\n' "${checks[@]}"
# Per job and cycle (1 s): the daemon's CPU (scheduler run time) and system calls, net of
# the phase without jobs.
awk -v n="$JOBS" -v c0="${sched_ns[0]}" -v t0="${sched_us[0]}" -v c1="${sched_ns[$JOBS]}" -v t1="${sched_us[$JOBS]}" 'BEGIN {
	r0 = c0 / (t0 / 1e6); r1 = c1 / (t1 / 1e6)   # ns of CPU per second
	printf "per job per cycle: CPU %.3f ms (%.3f ms gross; no jobs: %.3f ms per second)\n", (r1 - r0) / n / 1e6, r1 / n / 1e6, r0 / 1e6 }'
if [ "$STRACE_SECS" -gt 0 ]; then
	awk -v n="$JOBS" -v s0="${sys_calls[0]:-0}" -v w0="$STRACE_SECS" -v s1="${sys_calls[$JOBS]:-0}" -v cy="${sys_cycles[$JOBS]}" -v w1="$STRACE_SECS" 'BEGIN {
		printf "per job per cycle: %.1f system calls (%.1f gross; no jobs: %.1f per second; %s cycles in the %d s strace window)\n",
			(s1 / cy - s0 / w0) / n, s1 / cy / n, s0 / w0, cy, w1 }'
	echo "system calls per job per cycle, by call (gross; strace -c -f for ${STRACE_SECS} s):"
	awk -v n="$JOBS" -v cy="${sys_cycles[$JOBS]}" '$1 ~ /^[0-9.]+$/ && NF >= 5 && $NF != "total" {
		err = (NF == 6) ? $5 : 0
		printf "  %-16s %7.1f  (%.1f failed)\n", $NF, $4 / cy / n, err / cy / n }' "$tmp/strace.$JOBS" | sort -k2 -rn | head -12
fi
echo "CPU is % of one core over the phase; RSS in MiB (mean and max of one-second samples, Δ = last − first); VmHWM at the phase's end."
if grep -q '"level":"\(error\|warn\)"' "$tmp/daemon.log"; then
	echo "daemon warnings/errors logged:"
	grep '"level":"\(error\|warn\)"' "$tmp/daemon.log" | head -5
fi
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
trap - ERR
cleanup
trap - EXIT
