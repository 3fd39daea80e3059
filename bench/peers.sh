#!/usr/bin/env bash
# peers.sh — the persyst node daemon's cost beside established monitors, on the same fake
# Slurm jobs, in one interleaved run on this machine.
#
#   bench/peers.sh [SECONDS] [ROUNDS]   (default 60 s per window, 2 rounds; root, build/persyst)
#   env: PEERS_JOBS="8 32" (the phases), PEERS_SETTLE=3 (s between a monitor's start and
#        its window), NODE=peersnode, FIRST_JOB=910001, PEERS_KEEP=1 (keep the temp dir),
#        PERSYST_BIN=build/persyst (the binary measured)
#
# Monitors, each started by hand (no systemd), with private config, logs and data under a
# temp dir and non-default ports on 127.0.0.1:
#   persyst   the node daemon at a 1 s cycle, as bench/daemon_load.sh starts it; the jobs
#             are registered over its socket with bench/loadgen (playing the SPANK plugin).
#   pcp       pmcd + the proc PMDA (pmdaproc; cgroup and per-process metrics) + pmlogger
#             logging every 1 s what corresponds to persyst's per-job values: cgroup CPU,
#             memory, block I/O and pressure, and each process's CPU, faults, context
#             switches, RSS, I/O and run delay. pmlogger talks to pmcd over pmcd's unix
#             socket (the proc PMDA answers per-process metrics only to local credentials).
#   collectl  -sZ -i1:1 (process data every 1 s; a bare -i1 samples processes every 60 s),
#             recording to a file (raw, compressed).
#   node_exporter  default collectors, scraped every 1 s by curl. It has no per-job view.
# The packages pcp, collectl and prometheus-node-exporter are installed if missing; a
# package's postinst is not allowed to start its service (policy-rc.d; a systemctl that
# does nothing while PID 1 is not systemd), and any service it started anyway is stopped
# by the PID in its pid file.
#
# Phases: 8 jobs, then 32 (cgroups as in daemon_load.sh: slurm_NODE/uid_0/job_N/step_0 in
# the cpuacct, memory, pids and cpuset hierarchies, one idle sleep each). In each phase the
# monitors run one at a time, in alternating order over ROUNDS rounds (persyst pcp collectl
# node_exporter, then the reverse, ...), so that load drift hits all alike. For each window
# of SECONDS: CPU time (utime+stime of all the monitor's processes from /proc/PID/stat;
# PCP: pmcd, its PMDAs and pmlogger), RSS (sum of VmRSS, sampled every second) and the
# values it collected per cycle:
#   persyst   values in a job's sample (the job map plus the per-CPU values; mean over the
#             cycle samples in the daemon's sample files, StateDir/samples/<job>.jsonl),
#             summed over the jobs;
#   pcp       values per record of the pmlogger archive (pmdumplog), without the preamble;
#   collectl  fields per process line (all but date, time and command) x process lines per
#             interval (the recording played back with -P);
#   node_exporter  series in a scrape (lines that are not comments).
# It prints CPU % of one core, RSS MiB, CPU µs per value collected, and persyst's ratio to
# each. At the end everything started is stopped by PID, every cgroup created is removed,
# and a check that none is left.
set -euo pipefail
# persyst's tracepoints need tracefs, as in daemon_load.sh: if it is not mounted, run in
# a private mount namespace with tracefs mounted there.
# shellcheck disable=SC2016 # expanded by the inner bash
if [ ! -d /sys/kernel/tracing/events ] && [ ! -d /sys/kernel/debug/tracing/events ] && [ -z "${PERSYST_BENCH_NS:-}" ] && [ "$(id -u)" = 0 ]; then
	exec env PERSYST_BENCH_NS=1 unshare -m --propagation private bash -c 'mount -t tracefs nodev /sys/kernel/tracing || echo "could not mount tracefs: tracepoints not measured" >&2; exec "$0" "$@"' "$0" "$@"
fi
ROOT=$(cd "$(dirname "$0")/.." && pwd)
SECS=${1:-60}
ROUNDS=${2:-2}
PHASES=${PEERS_JOBS:-8 32}
SETTLE=${PEERS_SETTLE:-3}
NODE=${NODE:-peersnode}
FIRST=${FIRST_JOB:-910001}
PMCD_PORT_=44421 PMLOGGER_PORT_=44422 NE_PORT=19101
MONITORS=(persyst pcp collectl node_exporter)
cd "$ROOT"
# shellcheck source=bench/lib.sh
. bench/lib.sh

[ "$(id -u)" = 0 ] || { echo "peers: needs root (cgroups, apt-get, the daemon's socket)" >&2; exit 1; }
PERSYST_BIN=${PERSYST_BIN:-build/persyst}
[ -x "$PERSYST_BIN" ] || { echo "peers: $PERSYST_BIN missing (CGO_ENABLED=0 go build -o build/persyst ./cmd/persyst)" >&2; exit 1; }
CG=/sys/fs/cgroup
for c in "${V1_CTRLS[@]}"; do
	[ -d "$CG/$c" ] || { echo "peers: no cgroup v1 $c hierarchy at $CG/$c (this script fakes Slurm's cgroup/v1 layout)" >&2; exit 1; }
done
for p in $PMCD_PORT_ $PMLOGGER_PORT_ $NE_PORT; do
	if ss -Htln "sport = :$p" | grep -q .; then echo "peers: port $p is taken" >&2; exit 1; fi
done

tmp=$(mktemp -d /tmp/persyst-peers.XXXXXX)
sleep_pids=()
started_jobs=()
daemon_pid='' pmcd_pid='' pmlogger_pid='' collectl_pid='' ne_pid='' scraper_pid=''
SOCK=$tmp/persyst.sock

cleanup() {
	set +e
	local m
	for m in "${MONITORS[@]}"; do
		# Not defined yet when the packages' installation failed.
		if declare -F "stop_$m" >/dev/null; then "stop_$m"; fi
	done
	kill_sleeps
	local left
	# shellcheck disable=SC2046
	rm_cgroups $(node_cgroups)
	left=$(node_cgroups)
	if [ -n "$left" ]; then
		echo "peers: cgroups left behind: $left" >&2
	else
		echo "cleanup: every monitor stopped, sleeps killed, no cgroup of slurm_$NODE or persyst_$NODE left"
	fi
	if [ -n "${PEERS_KEEP:-}" ]; then echo "kept $tmp"; else rm -rf "$tmp"; fi
}
trap cleanup EXIT
trap 'echo "peers: failed at line $LINENO" >&2' ERR

# --- the packages --------------------------------------------------------------------
install_peers() {
	local need=() p pf pid
	for p in pcp collectl prometheus-node-exporter; do
		dpkg-query -W -f '${Status}\n' "$p" 2>/dev/null | grep -q '^install ok installed$' || need+=("$p")
	done
	[ ${#need[@]} -gt 0 ] || return 0
	echo "installing ${need[*]} ..."
	# The pid files their init scripts use; those that exist now are not ours to touch.
	local pidfiles=(/run/pcp/pmcd.pid /run/pcp/pmlogger.pid /run/pcp/pmie.pid /run/pcp/pmproxy.pid
		/run/collectl.pid /run/prometheus/prometheus-node-exporter.pid)
	local before=()
	for pf in "${pidfiles[@]}"; do [ -e "$pf" ] && before+=("$pf"); done
	local shim=$tmp/shim policy_made=
	mkdir -p "$shim"
	# pcp's postinst runs `systemctl start` when systemctl exists, and fails without
	# systemd as PID 1: give it a systemctl that does nothing. apt runs dpkg with its own
	# PATH (DPkg::Path), so the shim goes there too.
	if [ "$(cat /proc/1/comm)" != systemd ]; then
		printf '#!/bin/sh\necho "systemctl (peers.sh: no systemd as PID 1): ignored: $*" >&2\n' >"$shim/systemctl"
		chmod +x "$shim/systemctl"
	fi
	if [ ! -e /usr/sbin/policy-rc.d ]; then
		printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
		chmod +x /usr/sbin/policy-rc.d
		policy_made=1
	fi
	local rc=0
	{
		apt-get update -qq
		# A package left half-configured by an earlier try is configured again too.
		PATH=$shim:$PATH DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
			-o "DPkg::Path=$shim:/usr/sbin:/usr/bin:/sbin:/bin" \
			-o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold "${need[@]}" ||
			PATH=$shim:$PATH DEBIAN_FRONTEND=noninteractive dpkg --configure --pending
	} >"$tmp/apt.log" 2>&1 || rc=$?
	for p in "${need[@]}"; do
		dpkg-query -W -f '${Status}\n' "$p" 2>/dev/null | grep -q '^install ok installed$' || rc=1
	done
	[ -z "$policy_made" ] || rm -f /usr/sbin/policy-rc.d
	for pf in "${pidfiles[@]}"; do
		[ -e "$pf" ] || continue
		case " ${before[*]} " in *" $pf "*) continue ;; esac
		pid=$(tr -dc 0-9 <"$pf")
		if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
			echo "peers: the install started $(cat "/proc/$pid/comm") ($pid, $pf): stopping it"
			stop_pid "$(cat "/proc/$pid/comm")" "$pid"
		fi
	done
	if [ "$rc" != 0 ]; then
		echo "peers: installing ${need[*]} failed; the log's end:" >&2
		tail -20 "$tmp/apt.log" >&2
		exit 1
	fi
}
install_peers

# PCP's directories, from its own configuration.
pcpconf() { awk -F= -v k="$1" '$1 == k {print $2}' /etc/pcp.conf; }
PCP_BINADM=$(pcpconf PCP_BINADM_DIR)
PCP_PMDAS=$(pcpconf PCP_PMDAS_DIR)
PCP_VAR=$(pcpconf PCP_VAR_DIR)
# A namespace of just the agents we run: pmcd's own and proc's.
mkdir -p "$tmp/pcp"
(cd "$PCP_VAR/pmns" && "$PCP_BINADM/pmnsmerge" root_pmcd root_proc "$tmp/pcp/root") >/dev/null

# A private copy: a concurrent `make build` must not swap binaries under the benchmark.
cp "$PERSYST_BIN" "$tmp/persyst"
go build -o "$tmp/loadgen" ./bench/loadgen
P=$tmp/persyst

# --- the monitors: start_X DIR, pids_X, values_X DIR (values per cycle), stop_X ----------
start_persyst() {
	local d=$1 j
	"$P" daemon --node "$NODE" --cycle 1s --socket "$SOCK" --state-dir "$d/state" 2>"$d/daemon.log" &
	daemon_pid=$!
	for _ in $(seq 100); do [ -S "$SOCK" ] && "$P" jobs --node "$NODE" --socket "$SOCK" >/dev/null 2>&1 && break; sleep 0.1; done
	"$P" jobs --node "$NODE" --socket "$SOCK" >/dev/null || { echo "peers: daemon not answering; log:" >&2; cat "$d/daemon.log" >&2; exit 1; }
	for i in "${!sleep_pids[@]}"; do
		j=$((FIRST + i))
		"$tmp/loadgen" start -socket "$SOCK" -node "$NODE" -job "$j" -pid "${sleep_pids[$i]}" >/dev/null
		started_jobs+=("$j")
	done
}
pids_persyst() { echo "$daemon_pid"; }
values_persyst() {
	# Per job, the mean over its cycle samples (the values present vary a little between
	# reads); summed over the jobs. Also: how many jobs had the syscall tracepoints.
	local f
	for f in "$1"/state/samples/*.jsonl; do
		[ -e "$f" ] || continue
		jq -rs '[.[] | select(.reason == "cycle")] as $c
			| [$c[] | [(.job | length), ([(.cpu // [])[].values | length] | add // 0)]]
			| if length == 0 then "0 0 0" else
				"\(map(.[0]) | add / length) \(map(.[1]) | add / length) \(if ($c | last | .job | has("syscalls:sys_enter_openat")) then 1 else 0 end)" end' "$f"
	done | awk -v out="$1/values.txt" '{ j++; a += $1; c += $2; tp += $3 }
		END { printf "%.0f\n", a + c
			printf "%.0f per cycle: %d jobs x (%.0f job values + %.0f per-CPU values); syscall tracepoints in %d of the jobs\n", a + c, j, j ? a / j : 0, j ? c / j : 0, tp > out }'
}
stop_persyst() {
	local j p
	for j in "${started_jobs[@]}"; do "$tmp/loadgen" end -socket "$SOCK" -job "$j" >/dev/null 2>&1 || true; done
	started_jobs=()
	stop_pid "persyst daemon" "$daemon_pid"
	daemon_pid=
	# The daemon moved the sleeps into its own cgroups in the unified hierarchy (for perf
	# events): put them back, so that every monitor sees the same cgroups.
	if [ -d "$CG/unified/persyst_$NODE" ]; then
		for p in "${sleep_pids[@]}"; do echo "$p" >"$CG/unified/cgroup.procs" 2>/dev/null || true; done
		# shellcheck disable=SC2046
		rm_cgroups $(find "$CG/unified/persyst_$NODE" -type d | awk '{print length($0) " " $0}' | sort -rn | cut -d' ' -f2-)
	fi
}

start_pcp() {
	local d=$1
	mkdir -p "$d/run" "$d/log" "$d/arch"
	cat >"$d/pmcd.conf" <<-EOF
		pmcd	2	dso	pmcd_init	$PCP_PMDAS/pmcd/pmda_pmcd.so
		proc	3	pipe	binary		$PCP_PMDAS/proc/pmdaproc -d 3 -l $d/log/proc.log
		[access]
		disallow ".*" : store;
		disallow ":*" : store;
		allow "local:*" : all;
	EOF
	# cgroup: what the proc PMDA offers per cgroup; proc: per process. Leaves are named
	# one by one: proc.io.total_bytes is a derived metric, which makes pmlogger 6.0.3 dump
	# whole results into its log at every fetch.
	cat >"$d/pmlogger.conf" <<-'EOF'
		log mandatory on every 1 second {
			cgroup.cpuacct
			cgroup.cpusched
			cgroup.cpu.stat
			cgroup.memory.usage
			cgroup.memory.current
			cgroup.memory.failcnt
			cgroup.memory.stat.rss
			cgroup.memory.stat.cache
			cgroup.memory.stat.anon
			cgroup.memory.stat.pgfault
			cgroup.memory.stat.pgmajfault
			cgroup.blkio.all.io_service_bytes
			cgroup.blkio.all.io_serviced
			cgroup.pressure
			proc.psinfo.utime
			proc.psinfo.stime
			proc.psinfo.minflt
			proc.psinfo.maj_flt
			proc.psinfo.threads
			proc.psinfo.vctxsw
			proc.psinfo.nvctxsw
			proc.memory.rss
			proc.io.rchar
			proc.io.wchar
			proc.io.syscr
			proc.io.syscw
			proc.io.read_bytes
			proc.io.write_bytes
			proc.io.cancelled_write_bytes
			proc.schedstat.run_delay
			proc.schedstat.pcount
		}
	EOF
	(cd "$d" && exec env PCP_RUN_DIR="$d/run" PCP_LOG_DIR="$d/log" PCP_TMP_DIR="$d/run" \
		"$PCP_BINADM/pmcd" -f -p "$PMCD_PORT_" -i 127.0.0.1 -s "$d/run/pmcd.socket" \
		-c "$d/pmcd.conf" -n "$tmp/pcp/root" -l "$d/log/pmcd.log" >"$d/pmcd.out" 2>&1) &
	pmcd_pid=$!
	for _ in $(seq 100); do [ -S "$d/run/pmcd.socket" ] && break; sleep 0.1; done
	[ -S "$d/run/pmcd.socket" ] || { echo "peers: pmcd did not start; log:" >&2; cat "$d/log/pmcd.log" "$d/pmcd.out" >&2; exit 1; }
	(cd "$d" && exec env PCP_RUN_DIR="$d/run" PCP_LOG_DIR="$d/log" PCP_TMP_DIR="$d/run" \
		PMLOGGER_PORT="$PMLOGGER_PORT_" PMLOGGER_LOCAL=1 \
		"$PCP_BINADM/pmlogger" -h "unix:$d/run/pmcd.socket" -c "$d/pmlogger.conf" \
		-l "$d/log/pmlogger.log" "$d/arch/a" >"$d/pmlogger.out" 2>&1) &
	pmlogger_pid=$!
}
# shellcheck disable=SC2046 # PIDs, one word each
pids_pcp() { echo "$pmcd_pid" $(ps -o pid= --ppid "$pmcd_pid") "$pmlogger_pid"; }
values_pcp() {
	# Records are "HH:MM:SS.frac N metric(s)" lines; each value a " value " in the lines
	# that follow. The preamble (pmcd.pmlogger.*) is not counted. The split between the
	# cgroup and the process metrics goes to DIR/values.txt.
	pmdumplog "$1/arch/a" 2>/dev/null | awk -v out="$1/values.txt" -v node="$NODE" '
		function done() { if (r && !pre) { n++; v += c; vc += cc; vp += cp } }
		/^[0-9][0-9]:[0-9][0-9]:[0-9][0-9]\.[0-9]+ +[0-9]+ metrics?$/ { done(); r = 1; pre = 0; c = cc = cp = 0; next }
		/pmcd\.pmlogger\./ { pre = 1 }
		/^    [0-9]+\.[0-9]+\.[0-9]+ \(/ { m = $2 }
		/ value / { c++; if (m ~ /^\(cgroup\./) cc++; else if (m ~ /^\(proc\./) cp++ }
		m == "(cgroup.cpuacct.stat.user):" && /inst \[.* or "/ { sub(/.*or "/, ""); sub(/"\].*/, ""); cg[$0] = 1 }
		m == "(proc.psinfo.utime):" && /inst \[/ { np++ }
		END {
			done()
			for (k in cg) { ncg++; if (k ~ "_" node "/") ours++ }
			printf "%.0f per record: %.0f of cgroups (%d cgroups, %d of them our jobs\x27), %.0f of processes (%.0f processes)\n", n ? v / n : 0, n ? vc / n : 0, ncg, ours, n ? vp / n : 0, n ? np / n : 0 > out
			printf "%d\n", n ? v / n : 0 }'
}
stop_pcp() {
	local kids p
	[ -n "$pmcd_pid" ] || return 0
	kids=$(ps -o pid= --ppid "$pmcd_pid" || true)
	stop_pid pmlogger "$pmlogger_pid"
	stop_pid pmcd "$pmcd_pid"
	for p in $kids; do stop_pid "pmcd's agent" "$p"; done
	pmcd_pid='' pmlogger_pid=''
}

start_collectl() {
	local d=$1
	mkdir -p "$d/rec"
	(cd "$d" && exec collectl -sZ -i1:1 -f "$d/rec" >"$d/collectl.out" 2>&1) &
	collectl_pid=$!
}
# shellcheck disable=SC2046 # PIDs, one word each
pids_collectl() { echo "$collectl_pid" $(ps -o pid= --ppid "$collectl_pid"); }
values_collectl() {
	local d=$1
	(cd "$d" && collectl -p "$d"/rec/*.raw.gz -sZ -P -f "$d/play" >/dev/null 2>&1) || true
	# shellcheck disable=SC2012
	zcat "$(ls "$d"/play*.prc.gz | head -1)" | awk -v out="$d/values.txt" '
		/^#Date/ { f = NF - 3 }   # all but Date, Time and Command
		/^[0-9]/ { lines++; t[$1 " " $2] = 1 }
		END { for (k in t) n++; printf "%d\n", n ? f * lines / n : 0
			printf "%d per interval: %d fields x %.0f process lines\n", n ? f * lines / n : 0, f, n ? lines / n : 0 > out }'
}
stop_collectl() {
	stop_pid collectl "$collectl_pid"
	collectl_pid=
}

start_node_exporter() {
	local d=$1
	mkdir -p "$d/textfile"
	prometheus-node-exporter --web.listen-address="127.0.0.1:$NE_PORT" \
		--collector.textfile.directory="$d/textfile" >"$d/node_exporter.log" 2>&1 &
	ne_pid=$!
	# The scraper: one scrape a second, at most for the window and its margins.
	(
		local_next=$(($(now_us) / 1000000 + 1))
		for _ in $(seq $((SECS + SETTLE + 30))); do
			curl -fsS "http://127.0.0.1:$NE_PORT/metrics" -o "$d/scrape.new" 2>/dev/null && mv "$d/scrape.new" "$d/scrape.prom" && echo . >>"$d/scrapes"
			while [ "$(($(now_us) / 1000000))" -lt "$local_next" ]; do sleep 0.05; done
			local_next=$((local_next + 1))
		done
	) &
	scraper_pid=$!
}
pids_node_exporter() { echo "$ne_pid"; }
values_node_exporter() {
	local n
	n=$(grep -vc '^#' "$1/scrape.prom" || true)
	echo "$n series per scrape, none of them per job; $(grep -c '^# TYPE' "$1/scrape.prom" || true) metric families" >"$1/values.txt"
	echo "$n"
}
stop_node_exporter() {
	stop_pid scraper "$scraper_pid"
	stop_pid node_exporter "$ne_pid"
	ne_pid='' scraper_pid=''
}

stop_monitor() { "stop_$1"; }

# --- a window ------------------------------------------------------------------------
# window PHASE MONITOR ROUND: start the monitor, SETTLE s, measure SECS s, count its values,
# stop it. Adds to the totals below.
declare -A TICKS US RSS VALS N CPUS
window() {
	local ph=$1 m=$2 r=$3 d=$tmp/$1-$2-$3 pids t0 t1 c0 c1 rs=0 n=0 v cyc=$SECS s0 s1
	mkdir -p "$d"
	"start_$m" "$d"
	sleep "$SETTLE"
	# shellcheck disable=SC2207
	pids=($("pids_$m"))
	[ "$m" != node_exporter ] || s0=$(wc -l <"$d/scrapes" 2>/dev/null || echo 0)
	t0=$(now_us); c0=$(sum_ticks "${pids[@]}")
	for _ in $(seq "$SECS"); do
		sleep 1
		rs=$((rs + $(sum_rss_kb "${pids[@]}"))); n=$((n + 1))
	done
	t1=$(now_us); c1=$(sum_ticks "${pids[@]}")
	if [ "$m" = node_exporter ]; then
		s1=$(wc -l <"$d/scrapes")
		cyc=$((s1 - s0))
	fi
	[ "$m" != persyst ] || v=$(values_persyst "$d")
	"stop_$m"
	[ "$m" = persyst ] || v=$("values_$m" "$d")
	local k=$ph:$m
	NOTE[$k]=$(cat "$d/values.txt" 2>/dev/null || true)
	TICKS[$k]=$((${TICKS[$k]:-0} + c1 - c0))
	US[$k]=$((${US[$k]:-0} + t1 - t0))
	RSS[$k]=$((${RSS[$k]:-0} + rs / n))
	VALS[$k]=$((${VALS[$k]:-0} + v))
	N[$k]=$((${N[$k]:-0} + 1))
	# cycles in the window, for the values collected
	CYC[$k]=$((${CYC[$k]:-0} + cyc))
	CPUS[$k]="${CPUS[$k]:-}$(awk -v c=$((c1 - c0)) -v hz="$HZ" -v us=$((t1 - t0)) 'BEGIN {printf " %.2f", 100 * c / hz / (us / 1e6)}')"
	printf '  round %d %-13s %2d processes, CPU %6.2f %%, RSS %6.1f MiB, %6d values/cycle\n' "$r" "$m" "${#pids[@]}" \
		"$(awk -v c=$((c1 - c0)) -v hz="$HZ" -v us=$((t1 - t0)) 'BEGIN {print 100 * c / hz / (us / 1e6)}')" \
		"$(awk -v k=$((rs / n)) 'BEGIN {print k / 1024}')" "$v"
}
declare -A CYC NOTE

version_of() { dpkg-query -W -f '${Version}' "$1"; }
echo "peers: $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')), kernel $(uname -r), $(date -u '+%F %H:%M UTC')"
echo "monitors: persyst $("$P" version 2>/dev/null | head -1), pcp $(version_of pcp) (pmcd + pmdaproc + pmlogger), collectl $(version_of collectl), prometheus-node-exporter $(version_of prometheus-node-exporter)"
echo "node $NODE, phases of $PHASES jobs (one idle sleep each), $ROUNDS rounds, ${SECS} s windows (+${SETTLE} s to settle); load average before: $(cut -d' ' -f1-3 /proc/loadavg)"

for ph in $PHASES; do
	for i in $(seq 0 $((ph - 1))); do fake_job $((FIRST + i)); done
	echo "phase: $ph jobs"
	for r in $(seq "$ROUNDS"); do
		order=("${MONITORS[@]}")
		if [ $((r % 2)) = 0 ]; then order=(node_exporter collectl pcp persyst); fi
		for m in "${order[@]}"; do window "$ph" "$m" "$r"; done
	done
	kill_sleeps
	# shellcheck disable=SC2046
	rm_cgroups $(node_cgroups)
done

# --- the table -----------------------------------------------------------------------
echo
echo "| jobs | monitor | CPU % of a core (rounds) | RSS MiB | values / cycle | CPU µs / value | persyst ÷ it: CPU | µs / value |"
echo "|---:|---|---|---:|---:|---:|---:|---:|"
for ph in $PHASES; do
	pk=$ph:persyst
	for m in "${MONITORS[@]}"; do
		k=$ph:$m
		awk -v ph="$ph" -v m="$m" -v t="${TICKS[$k]}" -v us="${US[$k]}" -v rss="${RSS[$k]}" -v vals="${VALS[$k]}" \
			-v n="${N[$k]}" -v cyc="${CYC[$k]}" -v rounds="${CPUS[$k]}" -v hz="$HZ" \
			-v pt="${TICKS[$pk]}" -v pus="${US[$pk]}" -v pvals="${VALS[$pk]}" -v pn="${N[$pk]}" -v pcyc="${CYC[$pk]}" 'BEGIN {
			cpu = 100 * t / hz / (us / 1e6); pcpu = 100 * pt / hz / (pus / 1e6)
			vpc = vals / n; collected = vpc * cyc
			upv = collected ? 1e6 * t / hz / collected : 0
			pupv = 1e6 * pt / hz / ((pvals / pn) * pcyc)
			gsub(/^ /, "", rounds); gsub(/ /, ", ", rounds)
			if (m == "persyst") { r1 = "—"; r2 = "—" } else {
				r1 = cpu ? sprintf("%.2f", pcpu / cpu) : "∞"; r2 = upv ? sprintf("%.2f", pupv / upv) : "∞" }
			printf "| %d | %s | %.2f (%s) | %.1f | %d | %.2f | %s | %s |\n", ph, m, cpu, rounds, rss / n / 1024, vpc, upv, r1, r2 }'
	done
done
echo
echo "Values collected (last round):"
for ph in $PHASES; do for m in "${MONITORS[@]}"; do echo "  $ph jobs, $m: ${NOTE[$ph:$m]}"; done; done
echo "CPU: utime+stime of the monitor's processes over all its windows (${SECS} s x $ROUNDS per phase), % of one core; per round in"
echo "parentheses. RSS: sum of VmRSS of its processes, mean of one-second samples. Values per cycle: see the head of $0;"
echo "a cycle is 1 s (node_exporter: a scrape, counted). µs / value: CPU time over the values collected in the windows."
echo "Not counted: the scraper of node_exporter (curl; a Prometheus server pays its own), the playback of collectl's file."
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
trap - ERR
cleanup
trap - EXIT
