#!/usr/bin/env bash
# plugin_cost.sh — what the persyst SPANK plugin costs Slurm, on the real test cluster,
# with and without the plugin (A/B, interleaved on one cluster):
#
#   bench/plugin_cost.sh [RUNS] [ARRAY]   (default 15 runs, a 100-task array; root, `make build`)
#   NODES=3 (default)
#
# 1. Per Slurm process: every Slurm command and daemon process loads the plugin. The
#    wall time of `sbatch --test-only` (a real sbatch: loads plugstack.conf, the plugin's
#    init and option registration, one RPC) with and without the plugin, RUNS*4 of each;
#    the difference of the medians is the plugin's cost in that process.
# 2. A trivial job's life: the time from sbatch to the first poll (every 20 ms) that sees
#    the job COMPLETED, and from slurmctld's "sched: Allocate" log line (ms resolution) to
#    that poll (the job's own life on the nodes, without the scheduler's wait for its next
#    pass, which varies by up to ~2 s). 1-node and 2-node jobs.
# 3. Throughput: a job array of ARRAY tasks of `sleep 1`, its makespan (submission to the
#    last task gone from squeue) with and without the plugin, ARRAY_ROUNDS (default 3)
#    times each, alternating which goes first; each task's life on its node (slurmctld's
#    log, ms resolution: its allocation to its completion, which the plugin's waits at
#    the job's and its steps' starts and at the batch step's end lengthen; the scheduler's
#    passes, which make the makespan vary by up to 20 % between runs of the same side,
#    do not enter it); and, with the plugin, how long each batch step's end waited for
#    the daemon (the plugin logs it at slurmd's debug level: connect, send, the digest
#    written, the answer).
#
# plugstack.conf is re-read at every job launch, so the script swaps it between runs
# (A = plugin and daemons, B = an empty plugstack.conf).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
RUNS=${1:-15}
ARRAY=${2:-100}
ARRAY_ROUNDS=${ARRAY_ROUNDS:-3}
NODES=${NODES:-3}
cd "$ROOT"

scripts/cluster.sh up "$NODES" >/dev/null
trap 'scripts/cluster.sh down >/dev/null 2>&1 || true' EXIT
# shellcheck disable=SC1091
source build/cluster/env
conf=$PERSYST_CLUSTER_DIR/etc/plugstack.conf
with=$(cat "$conf")
work=$(mktemp -d)
chmod 1777 "$work"

# run_job: submit a trivial job; print "submit→end alloc→end" in seconds.
run_job() {
	local args=("$@") start id st end alloc
	start=$(date +%s.%N)
	id=$(sbatch --parsable -D "$work" -o /dev/null "${args[@]}")
	while :; do
		st=$(scontrol show job -o "$id" | grep -o 'JobState=[A-Z_]*' | cut -d= -f2)
		case "$st" in
		COMPLETED) break ;;
		PENDING | CONFIGURING | RUNNING | COMPLETING) sleep 0.02 ;;
		*) echo "job $id ended $st" >&2; exit 1 ;;
		esac
	done
	end=$(date +%s.%N)
	# The main scheduler logs "sched: Allocate JobId=N", the backfill one "Started JobId=N".
	alloc=$(grep -m1 -E "(sched: Allocate|_start_job: Started) JobId=$id " "$PERSYST_CLUSTER_DIR/log/slurmctld.log" | sed 's/^\[\([^]]*\)\].*/\1/' || true)
	[ -n "$alloc" ] || { echo "job $id: no allocation line in slurmctld.log" >&2; exit 1; }
	alloc=$(date -u -d "$alloc" +%s.%N)
	echo "$(echo "$end - $start" | bc) $(echo "$end - $alloc" | bc)"
}

stats() { # median min max of the numbers on stdin
	sort -n | awk '{a[NR]=$1} END {m=(NR%2)?a[(NR+1)/2]:(a[NR/2]+a[NR/2+1])/2; printf "median %.3f s  min %.3f s  max %.3f s  (n=%d)\n", m, a[1], a[NR], NR}'
}

measure() { # measure LABEL SBATCH-ARGS...
	local label=$1
	shift
	local a=() b=() aa=() ba=() i t
	run_job "$@" >/dev/null # warm-up (loads, caches)
	for i in $(seq 1 "$RUNS"); do
		# Alternate which goes first, so a periodic scheduler cannot favour one side.
		for side in $([ $((i % 2)) = 0 ] && echo "A B" || echo "B A"); do
			if [ "$side" = A ]; then
				echo "$with" >"$conf"
				read -r t u < <(run_job "$@"); a+=("$t"); aa+=("$u")
			else
				: >"$conf"
				read -r t u < <(run_job "$@"); b+=("$t"); ba+=("$u")
			fi
		done
	done
	echo "$with" >"$conf"
	echo "== $label: sbatch $*"
	printf '  submit→end, with plugin:    '; printf '%s\n' "${a[@]}" | stats
	printf '  submit→end, without plugin: '; printf '%s\n' "${b[@]}" | stats
	printf '  alloc→end,  with plugin:    '; printf '%s\n' "${aa[@]}" | stats
	printf '  alloc→end,  without plugin: '; printf '%s\n' "${ba[@]}" | stats
}

trap 'echo "plugin_cost: failed at line $LINENO" >&2' ERR
echo "persyst plugin cost, $(nproc) CPUs, $(uname -r), Slurm $(sinfo -V | awk '{print $2}'), $NODES nodes, $(date -u +%F)"

# 1. Per Slurm process.
sbatch_ms() { # the wall time of one sbatch --test-only, in ms
	local t0 t1
	t0=$(date +%s%N)
	sbatch --test-only -N1 -D "$work" --wrap true >/dev/null 2>&1
	t1=$(date +%s%N)
	echo $(((t1 - t0) / 1000))
}
a=() b=()
for i in $(seq 1 $((RUNS * 4))); do
	echo "$with" >"$conf"; a+=("$(sbatch_ms)")
	: >"$conf"; b+=("$(sbatch_ms)")
done
echo "$with" >"$conf"
echo "== per Slurm process: sbatch --test-only, wall time"
printf '  with plugin:    '; printf '%s\n' "${a[@]}" | awk '{print $1/1000}' | sort -n | awk '{v[NR]=$1} END {printf "median %.3f ms  (n=%d)\n", (NR%2)?v[(NR+1)/2]:(v[NR/2]+v[NR/2+1])/2, NR}'
printf '  without plugin: '; printf '%s\n' "${b[@]}" | awk '{print $1/1000}' | sort -n | awk '{v[NR]=$1} END {printf "median %.3f ms  (n=%d)\n", (NR%2)?v[(NR+1)/2]:(v[NR/2]+v[NR/2+1])/2, NR}'

# 2. A trivial job's life.
measure "1-node trivial job" -N1 --wrap true
measure "2-node job with one srun step" -N2 --wrap "srun -N2 true"

# The plugin's own time per event, as it logs it (slurmd debug level): connect, send and,
# for start events and the batch step's end, the daemon's answer.
plugin_times() { # plugin_times LOGS...: median, p90 and max per event
	cat "$@" | grep -o '[0-9a-z]*: [a-z_]* sent in [0-9.]*ms' |
		awk '{e=$2; if ($1 ~ /batch:$/ && e == "step_end") e="batch_end"; v=$5; sub(/ms$/,"",v); print e, v}' | sort -k1,1 -k2,2n |
		awk '{k[$1]=k[$1] " " $2; n[$1]++} END {for (e in k) {split(substr(k[e],2),a," "); m=a[int((n[e]+1)/2)]; p=a[int(n[e]*0.9+0.999)];
		     printf "  %-10s median %.3f ms  p90 %.3f ms  max %.3f ms  (n=%d)\n", e, m, p, a[n[e]], n[e]}}' | sort
}
echo "== plugin time per event (from the slurmd logs, all runs above)"
plugin_times "$PERSYST_CLUSTER_DIR"/log/slurmd-*.log

# 3. Throughput: a job array.
array_run() { # submit the array, wait until every task is gone from squeue; print seconds
	local start id end
	start=$(date +%s.%N)
	id=$(sbatch --parsable -D "$work" -o /dev/null --array="1-$ARRAY" -N1 --wrap 'sleep 1')
	id=${id%%;*}
	while [ -n "$(squeue -h -r -j "$id" -o %i 2>/dev/null | head -1)" ]; do sleep 0.2; done
	end=$(date +%s.%N)
	echo "$(echo "$end - $start" | bc) $id"
}
# task_lives ARRAYID: each task's allocation to completion in seconds, from slurmctld's log
# ("sched: Allocate JobId=A_T(J)" or the backfill's "Started JobId=A_T(J)", then
# "_job_complete: JobId=A_T(J) done"), one per line.
task_lives() {
	grep -E "(sched: Allocate|_start_job: Started|_job_complete:) JobId=$1_[0-9]+\(" "$PERSYST_CLUSTER_DIR/log/slurmctld.log" |
		awk -v a="$1" '
		function secs(ts,   d, t) { # [YYYY-MM-DDTHH:MM:SS.mmm] → seconds (day of month × 86400 + time)
			split(substr(ts, 2, 23), d, "T"); split(d[2], t, ":")
			return substr(d[1], 9, 2) * 86400 + t[1] * 3600 + t[2] * 60 + t[3]
		}
		{
			match($0, "JobId=" a "_[0-9]+"); task = substr($0, RSTART, RLENGTH)
			if ($0 ~ /_job_complete:/) { if ($0 ~ / done$/) done[task] = secs($1) }
			else if (!(task in alloc)) alloc[task] = secs($1)
		}
		END { for (t in alloc) if (t in done) printf "%.3f\n", done[t] - alloc[t] }'
}
declare -A mark
for f in "$PERSYST_CLUSTER_DIR"/log/slurmd-*.log; do mark[$f]=$(wc -l <"$f"); done
aw=() bw=() alives=() blives=()
for i in $(seq 1 "$ARRAY_ROUNDS"); do
	for side in $([ $((i % 2)) = 0 ] && echo "A B" || echo "B A"); do
		if [ "$side" = A ]; then
			echo "$with" >"$conf"; read -r t aid < <(array_run); aw+=("$t")
			mapfile -t -O "${#alives[@]}" alives < <(task_lives "$aid")
		else
			: >"$conf"; read -r t bid < <(array_run); bw+=("$t")
			mapfile -t -O "${#blives[@]}" blives < <(task_lives "$bid")
		fi
	done
done
echo "$with" >"$conf"
echo "== $ARRAY-task array of sleep 1 on $NODES nodes: makespan"
printf '  with plugin:    %s s\n' "${aw[*]}"
printf '  without plugin: %s s\n' "${bw[*]}"
med() { sort -n | awk '{v[NR]=$1} END {print (NR%2)?v[(NR+1)/2]:(v[NR/2]+v[NR/2+1])/2}'; }
ma=$(printf '%s\n' "${aw[@]}" | med)
mb=$(printf '%s\n' "${bw[@]}" | med)
awk -v a="$ma" -v b="$mb" 'BEGIN {printf "  with/without:   %+.1f %% (medians)\n", (a/b-1)*100}'
echo "== each array task's life on its node (allocation → completion, slurmctld's log)"
printf '  with plugin:    '; printf '%s\n' "${alives[@]}" | stats
printf '  without plugin: '; printf '%s\n' "${blives[@]}" | stats
la=$(printf '%s\n' "${alives[@]}" | awk '{s+=$1} END {print s/NR}')
lb=$(printf '%s\n' "${blives[@]}" | awk '{s+=$1} END {print s/NR}')
awk -v a="$la" -v b="$lb" 'BEGIN {printf "  means %.3f s and %.3f s: with/without %+.1f %% (the share of the node time the plugin adds to the array)\n", a, b, (a/b-1)*100}'
echo "== plugin time per event during the arrays (with plugin)"
logs=()
for f in "$PERSYST_CLUSTER_DIR"/log/slurmd-*.log; do
	tail -n +"$((mark[$f] + 1))" "$f" >"$work/$(basename "$f")"
	logs+=("$work/$(basename "$f")")
done
plugin_times "${logs[@]}"
