#!/usr/bin/env bash
# record-slurm.sh [DIR]: records what this machine's Slurm says of a fixed set of jobs, for
# the job map's tests (jobmap/recorded_test.go): a 2-node test cluster (scripts/cluster.sh)
# runs them in /tmp/persyst-record, and DIR (default jobmap/testdata/slurm-<series>) gets
# slurmrestd's jobs and nodes, `scontrol --json` (24.11 and later) or `squeue --json`,
# `scontrol show job -o -d`, `sinfo` node addresses, and truth.txt: for each job the files
# Slurm wrote its standard output and error to (found by a marker line each job prints),
# the ground truth the parsed paths are compared with. Run it on each Debian release's
# Slurm: SUITE=trixie scripts/fresh-check.sh record-slurm (then copy the directory out of
# build/_fresh-trixie/root/src/persyst). Needs root.
set -euo pipefail
cd "$(dirname "$0")/.."
series=$(scripts/slurmseries.sh)
out=${1:-jobmap/testdata/slurm-$series}
work=/tmp/persyst-record
log() { echo "record-slurm: $*" >&2; }

ACCOUNTING=0 scripts/cluster.sh up 2 >/dev/null
trap 'scripts/cluster.sh down >/dev/null 2>&1 || true' EXIT
# shellcheck disable=SC1091
source build/cluster/env
rm -rf "$work" && mkdir -p "$work/out" && chmod 1777 "$work" "$work/out"
mark='echo out-marker-$SLURM_JOB_ID; echo err-marker-$SLURM_JOB_ID >&2'
sb() { sbatch --parsable --uid "$PERSYST_JOB_USER" --gid "$PERSYST_JOB_USER" -D "$work" "$@" | cut -d';' -f1; }
state() { scontrol show job -o "$1" | grep -o 'JobState=[A-Z_]*' | sort -u | cut -d= -f2 | tr '\n' ' '; }
wait_state() { # wait_state ID WORD...: until every record of job ID is in one of the states
	local id=$1 i s ok
	shift
	for i in $(seq 1 600); do
		ok=1
		for s in $(state "$id"); do [[ " $* " == *" $s "* ]] || ok=0; done
		[ "$ok" = 1 ] && return 0
		sleep 0.1
	done
	log "job $id is $(state "$id"), not $*"
	exit 1
}

log "Slurm $(slurmctld -V | awk '{print $2}') -> $out"
# Jobs that end before the recording: output patterns, several nodes, arrays, a failure.
done_jobs=(
	"$(sb -N2 -o 'o-%N-%n-%s-%t-%j.txt' --wrap "$mark")"
	"$(sb -N2 -n3 --wrap "$mark")"
	"$(sb -a 3 --wrap "$mark")"
	"$(sb --mem=100 --wrap "$mark; exit 3")"
	"$(sb -a 11-12 -o 'b-%b-%a-%A.out' --wrap "$mark")"
	"$(sb -o 'p5-%%j-%%%j.out' -e 'err-%u-%%-%n-%t-%s.txt' --wrap "$mark")"
)
for id in "${done_jobs[@]}"; do wait_state "$id" COMPLETED FAILED; done
# Jobs running while it is recorded (4 cores: the cluster's), then pending ones, held.
run_jobs=(
	"$(sb -N2 -J 'my job' --mem-per-cpu=50 -o 'out/%x-%j-%N.txt' --wrap "$mark; sleep 300")"
	"$(sb -a 1-2 --wrap "$mark; sleep 300")"
)
held_jobs=(
	"$(sb -H -a 5 -o '%3a-%A.%a.out' -e 'err-%x.txt' --wrap "$mark")"
	"$(sb -H -o "$work/abs-%10j.log" --wrap "$mark")"
)
for id in "${run_jobs[@]}"; do wait_state "$id" RUNNING; done
for i in $(seq 1 100); do # every task has printed its marker: 7 ended, 3 running
	n=$(grep -rhx 'out-marker-[0-9]*' "$work" 2>/dev/null | wc -l)
	[ "$n" -ge 10 ] && break
	sleep 0.1
done

rm -rf "$out" && mkdir -p "$out"
api=v0.0.38
if scripts/slurmseries.sh | awk -F. '{exit !($1 > 24 || ($1 == 24 && $2 >= 11))}'; then api=v0.0.42; fi
scontrol show job -o -d >"$out/scontrol-show-job-o-d.txt"
if [ "$api" = v0.0.42 ]; then
	scontrol --json=v0.0.42 show job >"$out/scontrol-json.json"
else
	squeue --json >"$out/squeue.json"
fi
sock=${PERSYST_SLURMRESTD#unix:}
for what in jobs nodes; do
	curl -sSf --unix-socket "$sock" "http://localhost/slurm/$api/$what" >"$out/restd-$what.json"
done
sinfo -N -h -o "%N %o" >"$out/sinfo-addrs.txt"

# The truth: where each job's lines went, once the held jobs ran too.
scancel "${run_jobs[@]}"
scontrol release "${held_jobs[@]}"
for id in "${held_jobs[@]}"; do wait_state "$id" COMPLETED; done
for id in "${run_jobs[@]}"; do wait_state "$id" CANCELLED COMPLETED; done
{
	echo "# job id, then the files Slurm wrote its standard output and error to (under $work)"
	grep -rlx 'out-marker-[0-9]*' "$work" | while IFS= read -r f; do
		id=$(grep -hx 'out-marker-[0-9]*' "$f" | head -n1 | sed 's/out-marker-//')
		e=$(grep -rlx "err-marker-$id" "$work" | head -n1)
		printf '%s\t%s\t%s\n' "$id" "$f" "$e"
	done | sort -n
} >"$out/truth.txt"
log "recorded $(($(wc -l <"$out/truth.txt") - 1)) jobs"
