#!/usr/bin/env bash
# plugin_cost.sh — what the persyst SPANK plugin costs a job: the time from sbatch to the
# job's end for a trivial job, with and without the plugin, on the real test cluster.
#
#   bench/plugin_cost.sh [RUNS]        (default 15 of each; needs root and `make build`)
#
# A/B runs are interleaved on one cluster: plugstack.conf is re-read at every job launch,
# so the script swaps it between jobs (A = plugin and daemons, B = empty plugstack.conf).
# Two times per job: from just before `sbatch` to the first poll (every 20 ms) that sees
# the job COMPLETED (what a user waits), and from slurmctld's "sched: Allocate" log line
# (ms resolution) to that poll: the job's own life on the nodes, without the scheduler's
# wait for its next pass, which is most of the first number and varies by up to ~2 s.
# Prints the median, min and max of each, with and without the plugin.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
RUNS=${1:-15}
NODES=${NODES:-2}
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
echo "persyst plugin cost, $(nproc) CPUs, $(uname -r), Slurm $(sinfo -V | awk '{print $2}'), $(date -u +%F)"
measure "1-node trivial job" -N1 --wrap true
measure "2-node job with one srun step" -N2 --wrap "srun -N2 true"

# The plugin's own time per event, as it logs it (slurmd debug level): connect, send and,
# for start events, the daemon's answer.
echo "== plugin time per event (from the slurmd logs, all runs above)"
cat "$PERSYST_CLUSTER_DIR"/log/slurmd-*.log | grep -o '[a-z_]* sent in [0-9.]*[µm]*s' |
	awk '{v=$4; if (v ~ /µs$/) {sub(/µs$/,"",v); v=v/1000} else if (v ~ /ms$/) {sub(/ms$/,"",v)} else {sub(/s$/,"",v); v=v*1000}
	     print $1, v}' | sort -k1,1 -k2,2n |
	awk '{k[$1]=k[$1] " " $2; n[$1]++} END {for (e in k) {split(substr(k[e],2),a," "); m=a[int((n[e]+1)/2)];
	     printf "  %-10s median %.3f ms  max %.3f ms  (n=%d)\n", e, m, a[n[e]], n[e]}}' | sort
