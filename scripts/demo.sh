#!/usr/bin/env bash
# demo.sh — start a real 2-node Slurm cluster with
# persyst on this machine, run a 2-node job (as the unprivileged user nobody) and an
# opted-out one and one with a bottleneck, and show what each node's persyst daemon
# recorded and the digests at the end of the jobs' output. KEEP=1 leaves the
# cluster running (stop it with `make cluster-down`).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
[ "$(id -u)" = 0 ] || { echo "demo: run as root (it starts slurmd in network namespaces)" >&2; exit 1; }

scripts/cluster.sh up 2
[ "${KEEP:-0}" = 1 ] || trap 'scripts/cluster.sh down' EXIT
# shellcheck disable=SC1091
source build/cluster/env
work=$(mktemp -d /tmp/persyst-demo-XXXX)
chmod 1777 "$work"

echo
echo "== a 2-node job with two srun steps (as nobody)"
sbatch --uid nobody --gid nogroup -D "$work" -N2 -o "$work/slurm-%j.out" --wait \
	--wrap 'srun -N2 hostname; srun -N1 sleep 1; echo done'
echo "== an opted-out job: sbatch --persyst=off"
sbatch --uid nobody --gid nogroup -D "$work" -N2 -o /dev/null --persyst=off --wait --wrap 'srun -N2 true'
echo "== a job with a bottleneck: 2 CPUs for one thread that writes in 64-byte pieces"
sbatch --uid nobody --gid nogroup -D "$work" -c 2 -o "$work/bottleneck-%j.out" --wait \
	--wrap "$PWD/build/persyst-workload write -file $work/data -bytes 200000000 -size 64; sleep 1"
sleep 1 # the epilog's job_end event follows the job's end by a few milliseconds
for n in $PERSYST_NODES; do
	echo
	echo "== persyst jobs --node $n"
	build/persyst jobs --node "$n"
done
echo
echo "== the first job's output file, ending with its persyst digest"
cat "$work"/slurm-*.out
echo
echo "== the bottleneck job's output file: its digest"
cat "$work"/bottleneck-*.out
echo
echo "== persyst jobmap: the jobs as slurmrestd reports them, with the files their output went to"
build/persyst jobmap
echo
echo "(JSON: build/persyst jobs --node node1 --json, build/persyst jobmap --json; logs: $PERSYST_CLUSTER_DIR/log/)"
