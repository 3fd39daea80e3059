#!/usr/bin/env bash
# accounting.sh — what keeping the digest's summary in Slurm's accounting (AdminComment)
# costs a job's end, on the real test cluster with slurmdbd.
#
#   bench/accounting.sh [RUNS]        (default 15 jobs each way; needs root and `make build`)
#
# The job's end waits for the batch step's end event at the node daemon (the plugin holds
# the batch step until the daemon answers; the digest is made then). The daemon logs how
# long it took to handle each event ("took", ms). This script runs RUNS one-node jobs with
# AccountingSummary=off, then RUNS with AccountingSummary=on (the daemon restarted with
# it), and prints the median handling time of the batch step's end each way, and the
# median time of the AdminComment write itself (scontrol update).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
RUNS=${1:-15}
cd "$ROOT"

ACCOUNTING=1 PERSYST_CONF_EXTRA="AccountingSummary=off" scripts/cluster.sh up 1 >/dev/null
trap 'scripts/cluster.sh down >/dev/null 2>&1 || true' EXIT
# shellcheck disable=SC1091
source build/cluster/env
work=$(mktemp -d)
chmod 1777 "$work"
log=$PERSYST_CLUSTER_DIR/log/persyst-node1.log

median() { # the median of the numbers on stdin
	sort -n | awk '{a[NR]=$1} END {if (NR == 0) {print "none"; exit} m=(NR%2)?a[(NR+1)/2]:(a[NR/2]+a[NR/2+1])/2; printf "%.1f ms (n=%d, min %.1f, max %.1f)\n", m, NR, a[1], a[NR]}'
}

# run LABEL: RUNS jobs; print the median handling time of their batch step ends.
run() {
	local first i
	first=$(wc -l <"$log")
	for i in $(seq 1 "$RUNS"); do
		sbatch --wait --uid 65534 --gid 65534 -D "$work" -o "$work/%j.out" --wrap "sleep 1" >/dev/null
	done
	echo "$1: batch step end handled in $(tail -n +"$first" "$log" | jq -r 'select(.event == "step_end" and .step == "batch") | .took' | median)"
}

run "AccountingSummary=off"
sed -i 's/^AccountingSummary=off$/AccountingSummary=on/' "$PERSYST_CLUSTER_DIR/etc/persyst.conf"
scripts/cluster.sh daemon-start node1
first=$(wc -l <"$log")
run "AccountingSummary=on "
echo "AdminComment write (scontrol update): $(tail -n +"$first" "$log" | jq -r 'select(.message | test("summary kept")) | .took' | median)"
n=$(sacct -a -X -n -P -o AdminComment | grep -c 'persyst:v1:' || true)
echo "jobs whose summary sacct shows: $n of $RUNS"
