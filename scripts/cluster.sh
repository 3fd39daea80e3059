#!/usr/bin/env bash
# cluster.sh — a real Slurm 22.05 cluster on one machine, for persyst's tests and demos.
#
#   scripts/cluster.sh up [N]     start munged, accounting (a private MariaDB and slurmdbd),
#                                 slurmctld and N slurmd (one network namespace each), plus
#                                 one persyst daemon per node; returns when sinfo shows every
#                                 node idle. Idempotent: a previous (possibly crashed)
#                                 cluster is torn down first.
#   scripts/cluster.sh down       stop everything this script started (by PID), remove the
#                                 namespaces and the bridge.
#   scripts/cluster.sh status     print what is running.
#   scripts/cluster.sh check [N]  check, starting nothing, that every program and Slurm plugin
#                                 the cluster's configuration uses is installed; name the
#                                 Debian package of each one missing. `up` runs it first.
#   scripts/cluster.sh daemon-stop NODE | daemon-start NODE
#                                 stop or (re)start one node's persyst daemon.
#
# An `up` that fails at any step stops everything it started (by PID), removes the
# namespaces and the bridge, and says which step failed with the last lines of its logs.
#
# Accounting (ACCOUNTING=0 leaves it out: AccountingStorageType=accounting_storage/none):
# mariadbd runs as the mysql user on a unix socket only (skip-networking), its data
# directory build/cluster/mariadb made once and kept, like the munge key; slurmdbd's
# database is dropped at every `up`, so sacct starts empty. slurmdbd (port 16819,
# PERSYST_DBD_PORT) reaches it through MYSQL_UNIX_PORT; slurmctld adds the cluster
# `persyst` when it registers. No account or user is added and nothing is enforced (no
# AccountingStorageEnforce): jobs are accounted with an empty Account.
# PERSYST_MAILPROG=PATH sets slurm.conf's MailProg (default: no MailProg line, so Slurm's
# /bin/mail); slurmctld runs it as root on this host. PERSYST_CONF_EXTRA adds lines to the
# cluster's persyst.conf.
#
# GPUs (a FAKE NVIDIA driver, for tests on machines without a GPU): PERSYST_GPUS=N gives
# every node N GPUs in Slurm (GresTypes=gpu, gres.conf File= lines naming character
# devices under build/cluster/dev, major 195 as NVIDIA's), and PERSYST_FAKE_NVML_LIB=DIR
# (a directory holding the fake libnvidia-ml.so.1, nvml/helper/fake.c) with
# PERSYST_FAKE_NVML=FILE (its scenario) and PERSYST_FAKE_NVML_PROCS=FILE make the
# daemons' NVML helper load it. PERSYST_AMD_GPUS=N gives every node N AMD GPUs in Slurm
# (render nodes under build/cluster/dev/dri, major 226 and minors from 128 as the DRM's,
# after NVIDIA's in gres.conf); with both kinds, each has a Type (nvidia, amd) that jobs
# ask for. Tests point the daemons at a FAKE amdgpu sysfs with persyst.conf's AMDGPUSysfs
# (PERSYST_CONF_EXTRA).
#
# PERSYST_CLUSTER_INSTANCE=I (0 to 9, default 0) keeps up to ten clusters apart, so that
# tests can run side by side: instance I > 0 lives in build/cluster-I, on 10.213.(47+I).0/24,
# with its own bridge, namespaces (persyst<L>-*), veths (ps<L>-*), node names (<L>node1...,
# so that Slurm's and persyst's cgroups of its nodes differ from the others') and host ports
# (slurmctld, slurmdbd, the JWT slurmrestd: 100 × I above instance 0's), L being the I-th
# letter from b. Instance 0 is the one people use: build/cluster, node1, node2...
#
# Everything lives under build/cluster/ (configs, spool, logs, state), never in /etc.
# Must run as root. Namespaces are entered with nsenter --net, not ip netns exec:
# `ip netns exec` remounts /sys, which hides the cgroup mounts slurmd needs.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
INSTANCE=${PERSYST_CLUSTER_INSTANCE:-0}
[[ "$INSTANCE" =~ ^[0-9]$ ]] || { echo "cluster: error: PERSYST_CLUSTER_INSTANCE must be 0 to 9, got '$INSTANCE'" >&2; exit 2; }
# L: the instance's letter ("" for instance 0); instance I's ports are 100 × I higher.
L="" OFF=$((100 * INSTANCE))
[ "$INSTANCE" = 0 ] || L=$(printf "\\$(printf %o $((97 + INSTANCE)))")
DIR=${PERSYST_CLUSTER_DIR:-$ROOT/build/cluster${L:+-$INSTANCE}}
BIN=${PERSYST_BIN:-$ROOT/build/persyst}
SPANK=${PERSYST_SPANK:-$ROOT/build/spank_persyst.so}
# Private addresses used only inside the namespaces this script creates. 10.213.47.0/24 is
# an arbitrary, rarely used block; override with PERSYST_CLUSTER_NET=a.b.c if it clashes.
NET=${PERSYST_CLUSTER_NET:-10.213.$((47 + INSTANCE))}
BRIDGE=${PERSYST_CLUSTER_BRIDGE:-persystbr$INSTANCE}
NSPREFIX=persyst$L-
VETH=ps$L-
# The nodes' names: NODE1, NODE2... (node1... in instance 0).
NODE=${L}node
CTLD_PORT=${PERSYST_CTLD_PORT:-$((16817 + OFF))}
SLURMD_PORT=${PERSYST_SLURMD_PORT:-16818}
# slurmrestd runs as this dedicated system user (it refuses to run as root); RESTD=0 skips it.
RESTD_USER=${PERSYST_RESTD_USER:-persyst-restd}
# An ordinary user for test jobs (digests must be written as the job's user).
JOB_USER=${PERSYST_JOB_USER:-persyst-job}
# A second slurmrestd with rest_auth/jwt on loopback TCP (the JWT path sites use).
RESTD_JWT_PORT=${PERSYST_RESTD_JWT_PORT:-$((16820 + OFF))}
RESTD=${RESTD:-1}
# ACCOUNTING=0 starts no MariaDB and no slurmdbd (accounting_storage/none).
ACCOUNTING=${ACCOUNTING:-1}
DBD_PORT=${PERSYST_DBD_PORT:-$((16819 + OFF))}
# slurm.conf's MailProg; empty: no MailProg line.
MAILPROG=${PERSYST_MAILPROG:-}
# PERSYST_CONF_EXTRA: lines added to the cluster's persyst.conf (e.g. MailProg=...).
CONF_EXTRA=${PERSYST_CONF_EXTRA:-}
# PLUGIN=0 starts the cluster with an empty plugstack.conf (used to measure plugin cost).
PLUGIN=${PLUGIN:-1}
# DAEMONS=0 starts no persyst daemons.
DAEMONS=${DAEMONS:-1}
# Measurement cycle of the node daemons (production default: 60s).
CYCLE=${PERSYST_CYCLE:-1s}
# The agent tree: PERSYST_COLLECTORS collectors and a frontend, each in its own network
# namespace (0: none; the daemons keep every job on the node). PERSYST_LMAX is the
# frontend's l_max in nodes (0: a collector's own nodes).
COLLECTORS=${PERSYST_COLLECTORS:-0}
LMAX=${PERSYST_LMAX:-0}
# PERSYST_LOADS is what the frontend charges a job: measured (the default) or max.
LOADS=${PERSYST_LOADS:-measured}
# PERSYST_SYNCS sync agents between the frontend and the collectors (0: the collectors hang
# below the frontend, a flat tree). With sync agents the frontend reads an explicit tree:
# the nodes cut evenly over the collectors, the collectors over the sync agents.
SYNCS=${PERSYST_SYNCS:-0}
# PERSYST_TREEAUTH is how the tree's agents authenticate each other: munge (the default,
# this cluster's munged) or tls (a test CA and one certificate per agent, made by openssl,
# named in persyst.conf as $DIR/tls/%n.crt).
TREEAUTH=${PERSYST_TREEAUTH:-munge}
TIMEOUT_UP=${PERSYST_CLUSTER_TIMEOUT:-60}
GPUS=${PERSYST_GPUS:-0}
AMD_GPUS=${PERSYST_AMD_GPUS:-0}

log() { echo "cluster: $*" >&2; }
die() { echo "cluster: error: $*" >&2; exit 1; }
# shellcheck source=need.sh
. "$ROOT/scripts/need.sh"

[ "$(id -u)" = 0 ] || die "must run as root (it creates network namespaces and starts slurmd)"

nodes_file="$DIR/nodes"

# What the instances share on the host (users, tracefs) is changed under one lock, so that
# clusters brought up side by side do not race.
TRACEFS_MARK=$ROOT/build/tracefs.mounted
host_lock() {
	mkdir -p "$ROOT/build"
	exec 9>"$ROOT/build/.cluster.lock"
	flock 9
}
host_unlock() { flock -u 9; }

node_names() { # the node names of the current (or last) cluster
	[ -f "$nodes_file" ] && cat "$nodes_file"
	return 0
}

# kill_pidfile FILE: stop the process whose PID is in FILE (only if it is still the process
# we started: its start time is recorded next to the pid), wait, then SIGKILL.
# alive PID: the process exists and is not a zombie (our daemons are orphans reaped by
# PID 1, which may take seconds; a zombie has already exited).
alive() {
	local st
	# An empty PID would read /proc//stat, the kernel's /proc/stat, as a live process.
	[[ "${1:-}" =~ ^[0-9]+$ ]] || return 1
	# Builtins only: the waits call this every 50 ms. The state follows the command's
	# name, which ends with the line's last ") ".
	read -r st 2>/dev/null <"/proc/$1/stat" || return 1
	st=${st##*) }
	st=${st%% *}
	[ -n "$st" ] && [ "$st" != Z ] && [ "$st" != X ]
}

kill_pid() {
	local pid=$1 name=$2
	[ -n "$pid" ] || return 0
	alive "$pid" || return 0
	kill -TERM "$pid" 2>/dev/null || true
	for _ in $(seq 1 100); do
		alive "$pid" || return 0
		sleep 0.05
	done
	log "$name (pid $pid) did not stop on SIGTERM; sending SIGKILL"
	kill -KILL "$pid" 2>/dev/null || true
	# Gone before anything takes its place (its ports, its socket).
	for _ in $(seq 1 100); do
		alive "$pid" || return 0
		sleep 0.05
	done
	log "$name (pid $pid) still there after SIGKILL"
}

kill_pidfile() {
	local f=$1
	[ -f "$f" ] || return 0
	# A stale pid file after a reboot or crash may name an unrelated process: only kill it
	# if its command line has what we expect (second line of our pid files, or the
	# daemon's own pid file whose name tells the program). Builtins only: down reads a
	# dozen of these.
	local pid="" want="" name=${f##*/} args=()
	{ read -r pid && read -r want; } 2>/dev/null <"$f" || true
	[ -n "$want" ] || want=${name%%[-.]*}
	if [[ "$pid" =~ ^[0-9]+$ ]] && mapfile -d '' -t args 2>/dev/null <"/proc/$pid/cmdline" &&
		[[ "${args[*]}" == *"$want"* ]]; then
		kill_pid "$pid" "$name"
	fi
	rm -f "$f"
}

down() {
	local n
	# persyst daemons and slurmd first (they talk to slurmctld), then everything left in the
	# namespaces (slurmstepd of jobs still running), then slurmctld and munged.
	# All nodes at once: a slurmd that lost its slurmctld takes seconds to stop.
	# (Only these are waited for: up's own daemons are background jobs of this shell too.)
	local killers=()
	for n in $(node_names); do
		{
			kill_pidfile "$DIR/run/persyst-$n.pid"
			kill_pidfile "$DIR/run/slurmd-$n.pid"
		} &
		killers+=($!)
	done
	[ ${#killers[@]} -eq 0 ] || wait "${killers[@]}"
	local ns pids
	for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^$NSPREFIX" || true); do
		pids=$(ip netns pids "$ns" 2>/dev/null || true)
		for p in $pids; do kill -TERM "$p" 2>/dev/null || true; done
		for _ in $(seq 1 60); do
			local any=0
			for p in $(ip netns pids "$ns" 2>/dev/null); do alive "$p" && any=1; done
			[ "$any" = 0 ] && break
			sleep 0.05
		done
		pids=$(ip netns pids "$ns" 2>/dev/null || true)
		for p in $pids; do kill -KILL "$p" 2>/dev/null || true; done
		ip netns del "$ns" 2>/dev/null || true
	done
	kill_pidfile "$DIR/run/frontend.pid"
	for f in "$DIR"/run/collector-*.pid "$DIR"/run/sync-*.pid; do
		[ -e "$f" ] && kill_pidfile "$f"
	done
	kill_pidfile "$DIR/run/slurmrestd.pid"
	kill_pidfile "$DIR/run/slurmrestd-jwt.pid"
	kill_pidfile "$DIR/run/slurmctld.pid"
	kill_pidfile "$DIR/run/slurmdbd.pid"
	kill_pidfile "$DIR/run/mariadb.pid"
	kill_pidfile "$DIR/run/munged.pid"
	if ip link show "$BRIDGE" >/dev/null 2>&1; then ip link del "$BRIDGE" || true; fi
	# Every veth of the cluster (nodes' and agents'): the kernel would delete them with
	# their namespaces, but in the background, after the next up may have begun.
	local l
	for l in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1 | grep "^$VETH" || true); do
		ip link del "$l" 2>/dev/null || true
	done
	# Empty job cgroups left by a crashed slurmd (cgroup/v1 names them slurm_<node>) and the
	# daemons' own per-job perf cgroups (persyst_<node>).
	for n in $(node_names); do
		for c in /sys/fs/cgroup/*/slurm_"$n" /sys/fs/cgroup/*/persyst_"$n"; do
			[ -d "$c" ] && find "$c" -depth -type d -exec rmdir {} \; 2>/dev/null || true
		done
	done
	rm -f "$DIR/env"
	# tracefs, if this script mounted it (file-open tracepoints need it) and no other
	# instance's cluster uses it (one coming up included).
	host_lock
	rm -f "$DIR/uses-tracefs"
	if [ -f "$TRACEFS_MARK" ] && ! compgen -G "$ROOT/build/cluster*/uses-tracefs" >/dev/null; then
		umount /sys/kernel/tracing 2>/dev/null || true
		rm -f "$TRACEFS_MARK"
	fi
	host_unlock
}

# make_keys: the munge key (kept between clusters) and a fresh JWT key.
make_keys() {
	mkdir -p "$DIR"/{etc,munge}
	# Jobs run as ordinary users must reach the munge socket; the key stays 0400 root.
	chmod 0755 "$DIR/munge"
	if [ ! -s "$DIR/munge/munge.key" ]; then
		dd if=/dev/urandom of="$DIR/munge/munge.key" bs=1024 count=1 status=none
	fi
	chmod 0400 "$DIR/munge/munge.key"
	# JWT (AuthAltTypes=auth/jwt) for slurmrestd over TCP; slurmctld signs and checks tokens.
	dd if=/dev/urandom of="$DIR/etc/jwt_hs256.key" bs=32 count=1 status=none
	chmod 0600 "$DIR/etc/jwt_hs256.key"
}

# node_gres: a node's Gres= in slurm.conf (" Gres=gpu:N", typed with both kinds; "": none).
node_gres() {
	if [ "$GPUS" -gt 0 ] && [ "$AMD_GPUS" -gt 0 ]; then
		echo " Gres=gpu:nvidia:$GPUS,gpu:amd:$AMD_GPUS"
	elif [ $((GPUS + AMD_GPUS)) -gt 0 ]; then
		echo " Gres=gpu:$((GPUS + AMD_GPUS))"
	fi
}

# make_gpus: PERSYST_GPUS character devices for gres.conf, and the daemons' fake NVML
# (kept in run/gpu.env for a daemon restarted later).
make_gpus() {
	rm -rf "$DIR/dev"
	if [ "$GPUS" -gt 0 ]; then
		mkdir -p "$DIR/dev"
		local i
		for i in $(seq 0 $((GPUS - 1))); do mknod -m 0666 "$DIR/dev/nvidia$i" c 195 "$i"; done
	fi
	if [ "$AMD_GPUS" -gt 0 ]; then
		mkdir -p "$DIR/dev/dri"
		local r
		for r in $(seq 128 $((127 + AMD_GPUS))); do mknod -m 0666 "$DIR/dev/dri/renderD$r" c 226 "$r"; done
	fi
	: >"$DIR/run/gpu.env"
	if [ -n "${PERSYST_FAKE_NVML_LIB:-}" ]; then
		printf 'export LD_LIBRARY_PATH=%q PERSYST_FAKE_NVML=%q PERSYST_FAKE_NVML_PROCS=%q\n' \
			"$PERSYST_FAKE_NVML_LIB" "${PERSYST_FAKE_NVML:-}" "${PERSYST_FAKE_NVML_PROCS:-}" >"$DIR/run/gpu.env"
	fi
}

# make_tls N: with PERSYST_TREEAUTH=tls, a test CA and a certificate for every agent of the
# tree (nodes, collectors, sync agents, the frontend), naming it in a URI SAN
# persyst://ROLE/NAME as persyst's mutual TLS requires.
make_tls() {
	local n=$1 k
	[ "$TREEAUTH" = tls ] || return 0
	local tls="$DIR/tls"
	rm -rf "$tls"
	mkdir -p "$tls"
	chmod 0700 "$tls"
	openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
		-subj /CN=persyst-test-ca -keyout "$tls/ca.key" -out "$tls/ca.crt" 2>/dev/null || die "openssl: the test CA"
	for k in $(seq 1 "$n"); do tls_issue node "$NODE$k"; done
	for k in $(seq 1 "$COLLECTORS"); do tls_issue collector "col$k"; done
	for k in $(seq 1 "$SYNCS"); do tls_issue sync "sync$k"; done
	tls_issue frontend frontend
}

# tls_issue ROLE NAME: NAME's key and certificate, signed by the test CA.
tls_issue() {
	local role=$1 name=$2 tls="$DIR/tls"
	printf 'subjectAltName=URI:persyst://%s/%s\nextendedKeyUsage=serverAuth,clientAuth\nkeyUsage=digitalSignature\n' \
		"$role" "$name" >"$tls/$name.ext"
	openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=$name" \
		-keyout "$tls/$name.key" -out "$tls/$name.csr" 2>/dev/null &&
		openssl x509 -req -in "$tls/$name.csr" -CA "$tls/ca.crt" -CAkey "$tls/ca.key" -CAcreateserial \
			-days 2 -extfile "$tls/$name.ext" -out "$tls/$name.crt" 2>/dev/null || die "openssl: $name's certificate"
	rm -f "$tls/$name.csr" "$tls/$name.ext"
}

# write_configs N ETC: the cluster's slurm.conf, cgroup.conf, plugstack.conf and
# persyst.conf (and slurmdbd.conf with ACCOUNTING=1) for N nodes, written into ETC (they
# name paths under $DIR).
write_configs() {
	local n=$1 etc=$2 host mem acct=
	host=$(hostname -s)
	# Slurm's commands and slurmctld authenticate to slurmdbd with the munge socket named
	# by AccountingStoragePass (AuthInfo is not used for it).
	[ "$ACCOUNTING" = 1 ] && acct="AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=$NET.1
AccountingStoragePort=$DBD_PORT
AccountingStoragePass=$DIR/munge/munge.sock"
	# Each node offers the machine's memory, less some for the machine itself (slurmd
	# drains a node that claims more than it has). Memory is a consumable resource and
	# jobs are held to what they were given (CR_Core_Memory, cgroup.conf
	# ConstrainRAMSpace=yes), so --mem and OOM kills are real. A job that asks for no
	# memory gets its CPUs' share of the node (DefMemPerCPU), so jobs share nodes by CPUs
	# as they would without memory accounting.
	mem=$(( $(awk '/^MemTotal:/ {print $2}' /proc/meminfo) / 1024 - 512 ))
	mkdir -p "$etc"
	{
		cat <<EOF
# Generated by scripts/cluster.sh — a test cluster, not a production template.
ClusterName=persyst
SlurmctldHost=$host($NET.1)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$DIR/munge/munge.sock
AuthAltTypes=auth/jwt
AuthAltParameters=jwt_key=$DIR/etc/jwt_hs256.key
CredType=cred/munge
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool/%n
SlurmctldPidFile=$DIR/run/slurmctld.pid
SlurmdPidFile=$DIR/run/slurmd-%n.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=debug
PlugStackConfig=$DIR/etc/plugstack.conf
ProctrackType=proctrack/cgroup
TaskPlugin=task/cgroup
PrologFlags=Alloc,Contain
JobAcctGatherType=jobacct_gather/cgroup
$acct
MpiDefault=none
$([ $((GPUS + AMD_GPUS)) -gt 0 ] && echo "GresTypes=gpu")
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=$((mem / $(nproc)))
ReturnToService=2
MinJobAge=600
KillWait=5
InactiveLimit=0
SlurmdTimeout=60
SlurmctldTimeout=60
MessageTimeout=20
# Jobs of the partition "urgent" preempt those of "debug" (requeued): the scheduler-event
# tests. No other test submits there.
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
EOF
		local k
		for k in $(seq 1 "$n"); do
			echo "NodeName=$NODE$k NodeAddr=$NET.$((10 + k)) NodeHostname=$NODE$k CPUs=$(nproc) RealMemory=$mem State=UNKNOWN$(node_gres)"
		done
		echo "PartitionName=debug Nodes=$NODE[1-$n] Default=YES MaxTime=INFINITE State=UP PriorityTier=1"
		echo "PartitionName=urgent Nodes=$NODE[1-$n] MaxTime=INFINITE State=UP PriorityTier=2 PreemptMode=OFF"
		[ -z "$MAILPROG" ] || echo "MailProg=$MAILPROG"
	} >"$etc/slurm.conf"

	if [ "$ACCOUNTING" = 1 ]; then
		# slurmdbd refuses a slurmdbd.conf that others can read or that SlurmUser (root
		# here) does not own. StorageHost=localhost: the MySQL client library then takes
		# the socket from MYSQL_UNIX_PORT (slurmdbd_start); root logs in over it by
		# unix_socket authentication, with no password.
		(
			umask 077
			cat >"$etc/slurmdbd.conf" <<EOF
# Generated by scripts/cluster.sh — a test cluster, not a production template.
AuthType=auth/munge
AuthInfo=socket=$DIR/munge/munge.sock
DbdHost=$host
DbdAddr=$NET.1
DbdPort=$DBD_PORT
SlurmUser=root
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageLoc=slurm_acct_db
StorageUser=root
PidFile=$DIR/run/slurmdbd-own.pid
LogFile=$DIR/log/slurmdbd.log
DebugLevel=info
EOF
		)
		chmod 0600 "$etc/slurmdbd.conf"
	fi

	# The daemons' persyst.conf: test jobs last seconds, so findings that need a longer
	# run (memory trends) are assessed from 3 s on (production default: 300 s).
	# Every agent serves Prometheus metrics in its own namespace, to this host only (the
	# tests' Prometheus scrapes them over the bridge). The site's store is the cluster's
	# own file, unless PERSYST_CONF_EXTRA names another.
	cat >"$etc/persyst.conf" <<EOF
DigestMinSeconds=${PERSYST_DIGEST_MIN:-3}
CalibrationDir=$DIR/calibration
MungeSocket=$DIR/munge/munge.sock
DaemonMetricsAddr=0.0.0.0:16840
CollectorMetricsAddr=0.0.0.0:16841
SyncMetricsAddr=0.0.0.0:16842
FrontendMetricsAddr=0.0.0.0:16843
MetricsAllow=$NET.1
EOF
	if [ "$TREEAUTH" = tls ]; then
		printf 'TLSCert=%s\nTLSKey=%s\nTLSCA=%s\n' "$DIR/tls/%n.crt" "$DIR/tls/%n.key" "$DIR/tls/ca.crt" >>"$etc/persyst.conf"
	fi
	[ -z "$CONF_EXTRA" ] || printf '%s\n' "$CONF_EXTRA" >>"$etc/persyst.conf"
	case "$CONF_EXTRA" in
	*SiteStore=*) ;;
	*) echo "SiteStore=$DIR/run/frontend.db" >>"$etc/persyst.conf" ;;
	esac
	rm -f "$etc/gres.conf"
	local nvtype="" amdtype=""
	if [ "$GPUS" -gt 0 ] && [ "$AMD_GPUS" -gt 0 ]; then
		nvtype=" Type=nvidia" amdtype=" Type=amd"
	fi
	if [ "$GPUS" -gt 0 ]; then
		echo "NodeName=$NODE[1-$n] Name=gpu$nvtype File=$DIR/dev/nvidia[0-$((GPUS - 1))]" >>"$etc/gres.conf"
	fi
	if [ "$AMD_GPUS" -gt 0 ]; then
		echo "NodeName=$NODE[1-$n] Name=gpu$amdtype File=$DIR/dev/dri/renderD[128-$((127 + AMD_GPUS))]" >>"$etc/gres.conf"
	fi
	cat >"$etc/cgroup.conf" <<EOF
CgroupPlugin=cgroup/v1
ConstrainCores=yes
ConstrainRAMSpace=yes
EOF

	if [ "$PLUGIN" = 1 ]; then
		# Every node's slurmd sees its own run directory at $DIR/run/local (see up()), as
		# every real node has its own /run/persyst.
		echo "optional $SPANK default=on socket=$DIR/run/local/persyst.sock timeout=5 report=$BIN" >"$etc/plugstack.conf"
	else
		: >"$etc/plugstack.conf"
	fi
}

# slurm_version: the installed Slurm's major.minor (slurmctld -V: "slurm-wlm 24.11.5";
# 22.05 when it cannot say, e.g. before Slurm is installed).
slurm_version() {
	local v
	v=$(slurmctld -V 2>/dev/null | awk '{print $2}')
	[[ "$v" =~ ^([0-9]+)\.([0-9]+) ]] && { echo "${BASH_REMATCH[1]}.${BASH_REMATCH[2]}"; return; }
	echo 22.05
}

# slurm_at_least X.Y: the installed Slurm is release X.Y or later.
slurm_at_least() {
	local have want=$1
	have=$(slurm_version)
	[ "$(printf '%s\n%s\n' "$want" "$have" | sort -V | head -n1)" = "$want" ]
}

# The plugins slurmrestd is started with (restd_start): 22.05 serves OpenAPI v0.0.38 from
# its own plugin; from 23.11 one content plugin serves the data parsers, of which persyst
# speaks v0.0.42 (24.11 to 26.05; docs/admin.md).
RESTD_AUTH_LOCAL=rest_auth/local RESTD_AUTH_JWT=rest_auth/jwt
restd_plugins() {
	if slurm_at_least 23.11; then
		RESTD_OPENAPI=openapi/slurmctld RESTD_PARSER=data_parser/v0.0.42
	else
		RESTD_OPENAPI=openapi/v0.0.38 RESTD_PARSER=
	fi
}
restd_plugins

# check_installed ETC: every program the cluster runs and every Slurm plugin its
# configuration in ETC names is installed, and persyst is built; else name what is missing.
check_installed() {
	local etc=$1 c
	need_cmd munged munge
	need_cmd slurmctld slurmctld
	need_cmd slurmd slurmd
	for c in sinfo sbatch srun scontrol squeue; do need_cmd "$c" slurm-client; done
	[ "$RESTD" = 1 ] && need_cmd slurmrestd slurmrestd
	if [ "$ACCOUNTING" = 1 ]; then
		need_cmd mariadbd mariadb-server
		need_cmd mariadb-install-db mariadb-server
		need_cmd mariadb mariadb-client
		need_cmd mariadb-admin mariadb-client
		id mysql >/dev/null 2>&1 || need_missing+=("the system user mysql (Debian package mariadb-server)")
		need_cmd slurmdbd slurmdbd
		for c in sacct sacctmgr; do need_cmd "$c" slurm-client; done
	fi
	for c in nsenter unshare setpriv setsid flock; do need_cmd "$c" util-linux; done
	need_cmd ip iproute2
	need_cmd ss iproute2
	need_cmd useradd passwd
	[ "$TREEAUTH" = tls ] && need_cmd openssl openssl
	local plugdir
	plugdir=$(slurm_plugin_dir "$etc/slurm.conf")
	need_slurm_plugins "$plugdir" "$etc/slurm.conf" "$etc/cgroup.conf"
	[ "$ACCOUNTING" = 1 ] && need_slurm_plugins "$plugdir" "$etc/slurmdbd.conf"
	if [ "$RESTD" = 1 ]; then
		printf 'slurmrestd=%s\n' "$RESTD_OPENAPI" $RESTD_PARSER "$RESTD_AUTH_LOCAL" "$RESTD_AUTH_JWT" >"$etc/slurmrestd.plugins"
		need_slurm_plugins "$plugdir" "$etc/slurmrestd.plugins"
	fi
	local built=()
	[ -x "$BIN" ] || built+=("$BIN")
	[ "$PLUGIN" = 1 ] && [ ! -f "$SPANK" ] && built+=("$SPANK")
	if ! need_report cluster; then
		[ ${#built[@]} -eq 0 ] || log "also not built: ${built[*]} (run make build)"
		return 1
	fi
	[ ${#built[@]} -eq 0 ] || { log "not built: ${built[*]} (run make build)"; return 1; }
}

# check N: check_installed for the configuration of an N-node cluster, written to a
# temporary directory (a running cluster's files are left alone).
check() {
	local n=$1 tmp rc=0
	tmp=$(mktemp -d)
	write_configs "$n" "$tmp"
	check_installed "$tmp" || rc=1
	rm -rf "$tmp"
	return $rc
}

setup_network() {
	local n=$1 k
	ip link add "$BRIDGE" type bridge
	ip addr add "$NET.1/24" dev "$BRIDGE"
	ip link set "$BRIDGE" up
	for k in $(seq 1 "$n"); do
		add_ns "${NSPREFIX}$NODE$k" "$VETH$NODE$k" "$NET.$((10 + k))"
	done
	for k in $(seq 1 "$COLLECTORS"); do
		add_ns "${NSPREFIX}col$k" "${VETH}col$k" "$NET.$((100 + k))"
	done
	for k in $(seq 1 "$SYNCS"); do
		add_ns "${NSPREFIX}sync$k" "${VETH}sync$k" "$NET.$((90 + k))"
	done
	if [ "$COLLECTORS" -gt 0 ]; then
		add_ns "${NSPREFIX}front" "${VETH}front" "$NET.99"
	fi
}

# add_ns NS VETH ADDR: a network namespace on the bridge with address ADDR. The kernel
# destroys a deleted namespace, and the veth pair in it, in the background: a previous
# cluster's veth of the same name may still be there, and is deleted first.
add_ns() {
	local ns=$1 veth=$2 addr=$3
	ip link del "$veth" 2>/dev/null || true
	ip netns add "$ns"
	ip link add "$veth" type veth peer name eth0 netns "$ns"
	ip link set "$veth" master "$BRIDGE" up
	ip -n "$ns" addr add "$addr/24" dev eth0
	ip -n "$ns" link set eth0 up
	ip -n "$ns" link set lo up
}

# agent_start ROLE NAME ADDR PORT: start persyst ROLE (collector or sync) NAME in its
# namespace, listening on ADDR:PORT, and wait until it listens.
agent_start() {
	local role=$1 name=$2 addr=$3 port=$4
	local ns="/run/netns/${NSPREFIX}$name"
	[ -e "$ns" ] || die "no namespace for $name (is the cluster up with PERSYST_COLLECTORS or PERSYST_SYNCS?)"
	kill_pidfile "$DIR/run/$role-$name.pid"
	SLURM_CONF="$DIR/etc/slurm.conf" start_bg "$DIR/run/$role-$name.pid" "persyst $role" "$DIR/log/$role-$name.log" \
		nsenter --net="$ns" "$BIN" "$role" --listen "$addr:$port" --db "$DIR/run/$name.db" --name "$name" \
		--config "$DIR/etc/persyst.conf"
	for _ in $(seq 1 50); do
		nsenter --net="$ns" ss -Hltn "sport = :$port" | grep -q . && return 0
		sleep 0.1
	done
	die "$role $name did not start; see $DIR/log/$role-$name.log"
}

# collector_start colK, sync_start syncK: start collector or sync agent K.
collector_start() { agent_start collector "$1" "$NET.$((100 + ${1#col}))" 16830; }
sync_start() { agent_start sync "$1" "$NET.$((90 + ${1#sync}))" 16833; }

# write_tree N: the explicit agent tree for N nodes (persyst's tree description, with
# the agents' addresses): nodes cut evenly over the collectors, collectors over the sync
# agents.
write_tree() {
	local n=$1 k a b
	{
		echo "Frontend=front Syncs=sync[1-$SYNCS]"
		for k in $(seq 1 "$SYNCS"); do
			a=$(((k - 1) * COLLECTORS / SYNCS + 1)) b=$((k * COLLECTORS / SYNCS))
			[ "$a" -le "$b" ] || die "PERSYST_SYNCS=$SYNCS: more sync agents than collectors"
			echo "Sync=sync$k Collectors=col[$a-$b] Addr=$NET.$((90 + k)):16833"
		done
		for k in $(seq 1 "$COLLECTORS"); do
			a=$(((k - 1) * n / COLLECTORS + 1)) b=$((k * n / COLLECTORS))
			[ "$a" -le "$b" ] || die "PERSYST_COLLECTORS=$COLLECTORS: more collectors than nodes"
			echo "Collector=col$k Nodes=$NODE[$a-$b] Addr=$NET.$((100 + k)):16830"
		done
	} >"$DIR/etc/tree.conf"
}

# tree_start N: the collectors, the sync agents and the frontend, for N nodes.
tree_start() {
	local n=$1 k cols="" addrs="" where
	for k in $(seq 1 "$COLLECTORS"); do
		collector_start "col$k"
		cols="${cols:+$cols,}col$k=$NET.$((100 + k)):16830"
	done
	for k in $(seq 1 "$n"); do
		addrs="${addrs:+$addrs,}$NODE$k=$NET.$((10 + k)):16831"
	done
	where=(--collectors "$cols" --nodes "$NODE[1-$n]")
	if [ "$SYNCS" -gt 0 ]; then
		write_tree "$n"
		for k in $(seq 1 "$SYNCS"); do sync_start "sync$k"; done
		where=(--tree "$DIR/etc/tree.conf")
	fi
	local args=("${where[@]}" --node-addrs "$addrs" --cycle "$CYCLE" --lmax "$LMAX" --listen "$NET.99:16832"
		--config "$DIR/etc/persyst.conf")
	# Kept for frontend-restart.
	printf '%q ' "${args[@]}" >"$DIR/run/frontend.args"
	frontend_start "$LOADS" "${args[@]}"
	echo "$cols" >"$DIR/run/collectors"
}

# frontend_start LOADS ARGS...: start the frontend charging jobs LOADS (measured or max).
frontend_start() {
	local loads=$1
	shift
	SLURM_CONF="$DIR/etc/slurm.conf" start_bg "$DIR/run/frontend.pid" "persyst frontend" "$DIR/log/frontend.log" \
		nsenter --net="/run/netns/${NSPREFIX}front" "$BIN" frontend "$@" --loads "$loads"
}

# frontend_restart LOADS: restart the frontend with the tree it was started with, charging
# jobs LOADS.
frontend_restart() {
	local args
	[ -f "$DIR/run/frontend.args" ] || die "no frontend was started (PERSYST_COLLECTORS=0?)"
	kill_pidfile "$DIR/run/frontend.pid"
	eval "args=($(cat "$DIR/run/frontend.args"))"
	frontend_start "$1" "${args[@]}"
}

# start_bg PIDFILE MATCH CMD...: start CMD in the background in its own session, record its
# PID and a string that must appear in its command line (for kill_pidfile's stale check).
start_bg() {
	local pidfile=$1 match=$2 logfile=$3
	shift 3
	setsid "$@" </dev/null >>"$logfile" 2>&1 &
	printf '%s\n%s\n' "$!" "$match" >"$pidfile"
}

# daemon_start NODE: start NODE's persyst daemon in NODE's network namespace and wait until
# its socket answers.
daemon_start() {
	local node=$1 ns="/run/netns/${NSPREFIX}$1"
	[ -x "$BIN" ] || die "$BIN not built (run make)"
	[ -e "$ns" ] || die "no namespace for $node (is the cluster up?)"
	kill_pidfile "$DIR/run/persyst-$node.pid"
	local grpc="" cols=$COLLECTORS
	# A daemon restarted later (daemon-start) keeps the tree the cluster was started with.
	[ -f "$DIR/run/tree" ] && cols=$(cat "$DIR/run/tree")
	if [ "$cols" -gt 0 ]; then
		grpc="--grpc-listen $NET.$((10 + ${node#"$NODE"})):16831"
	fi
	# The daemon asks Slurm's commands for job facts: they need this cluster's slurm.conf
	# however this script was called. A fake NVML (make_gpus) reaches its GPU helper.
	(
		if [ -s "$DIR/run/gpu.env" ]; then
			# shellcheck disable=SC1091
			. "$DIR/run/gpu.env"
		fi
		SLURM_CONF="$DIR/etc/slurm.conf" start_bg "$DIR/run/persyst-$node.pid" "persyst daemon" "$DIR/log/persyst-$node.log" \
			nsenter --net="$ns" "$BIN" daemon --node "$node" --cycle "$CYCLE" --config "$DIR/etc/persyst.conf" \
			--socket "$DIR/run/$node/persyst.sock" --state-dir "$DIR/run/$node" $grpc
	)
	local pid
	pid=$(head -n1 "$DIR/run/persyst-$node.pid")
	for _ in $(seq 1 150); do
		"$BIN" jobs --socket "$DIR/run/$node/persyst.sock" --timeout 1s >/dev/null 2>&1 && return 0
		alive "$pid" || break
		sleep 0.1
	done
	tail -n 5 "$DIR/log/persyst-$node.log" >&2 || true
	die "persyst daemon of $node did not answer; see $DIR/log/persyst-$node.log"
}

# restd_start: slurmrestd (OpenAPI v0.0.38, rest_auth/local) on a unix socket, as the
# dedicated user, created here if missing (a system account with no home and no shell).
restd_start() {
	mkdir -p "$DIR/restd"
	chown "$RESTD_USER:" "$DIR/restd"
	chmod 0755 "$DIR/restd"
	start_bg "$DIR/run/slurmrestd.pid" slurmrestd "$DIR/log/slurmrestd.log" \
		setpriv --reuid "$RESTD_USER" --regid "$RESTD_USER" --clear-groups \
		slurmrestd -f "$SLURM_CONF" -s "$RESTD_OPENAPI" ${RESTD_PARSER:+-d "$RESTD_PARSER"} -a "$RESTD_AUTH_LOCAL" "unix:$DIR/restd/slurmrestd.sock"
	# SLURM_JWT=daemon: slurmrestd then talks to slurmctld with the caller's token (without
	# it, the munge plugin refuses every token: "Rejecting thread config token").
	start_bg "$DIR/run/slurmrestd-jwt.pid" slurmrestd "$DIR/log/slurmrestd-jwt.log" \
		setpriv --reuid "$RESTD_USER" --regid "$RESTD_USER" --clear-groups env SLURM_JWT=daemon \
		slurmrestd -f "$SLURM_CONF" -s "$RESTD_OPENAPI" ${RESTD_PARSER:+-d "$RESTD_PARSER"} -a "$RESTD_AUTH_JWT" "127.0.0.1:$RESTD_JWT_PORT"
	local unix tcp f
	unix=$(head -n1 "$DIR/run/slurmrestd.pid") tcp=$(head -n1 "$DIR/run/slurmrestd-jwt.pid")
	for _ in $(seq 1 100); do
		for f in slurmrestd slurmrestd-jwt; do
			alive "$(head -n1 "$DIR/run/$f.pid")" || { STEP_LOGS=("$DIR/log/$f.log"); die "$f exited"; }
		done
		# The port must be the JWT slurmrestd's own, not another program's.
		[ -S "$DIR/restd/slurmrestd.sock" ] && ss -Hltnp "sport = :$RESTD_JWT_PORT" | grep -q "pid=$tcp," && return 0
		sleep 0.05
	done
	die "slurmrestd (pids $unix, $tcp) did not listen within 5 s; see $DIR/log/slurmrestd*.log"
}

# The private MariaDB server's socket (its directory belongs to the mysql user).
MARIADB_SOCK="$DIR/run/mariadb/mysqld.sock"

# mariadb_start: a private MariaDB server for slurmdbd, as the mysql user, listening only on
# $MARIADB_SOCK. Its data directory $DIR/mariadb is made once (about 1 s; root logs in over
# the socket by unix_socket authentication) and kept between clusters; slurmdbd's database
# is dropped, so every cluster's accounting starts empty. Test data: nothing is synced.
mariadb_start() {
	local data="$DIR/mariadb" pid
	if [ ! -d "$data/mysql" ]; then
		# Made twice at most: a bootstrap that stopped half-way (once in a CI run, beside
		# five other clusters) is made again from nothing; its errors are kept and shown.
		local try
		for try in 1 2; do
			rm -rf "$data" "$data.new"
			mkdir -p "$data.new"
			chown mysql: "$data.new"
			if mariadb-install-db --no-defaults --user=mysql --datadir="$data.new" \
				--auth-root-authentication-method=socket --skip-test-db --skip-name-resolve \
				>"$DIR/log/mariadb-install.log" 2>&1; then
				break
			fi
			cp "$DIR/log/mariadb-install.log" "$DIR/log/mariadb-install-$try.log"
			log "mariadb-install-db failed (try $try); its errors: $(grep -iE 'error|fail|abort|killed|denied|space' "$DIR/log/mariadb-install.log" | head -n 8 | tr '\n' ' ')"
			[ "$try" = 2 ] && die "mariadb-install-db failed twice; see $DIR/log/mariadb-install-1.log and -2.log"
		done
		mv "$data.new" "$data"
	fi
	mkdir -p "$DIR/run/mariadb"
	chown mysql: "$DIR/run/mariadb"
	setpriv --reuid mysql --regid mysql --clear-groups test -w "$data" -a -w "$DIR/run/mariadb" ||
		die "the mysql user cannot write $data or $DIR/run/mariadb (a parent directory closed to others?)"
	# mariadbd writes its log to stderr (the mysql user cannot write $DIR/log).
	start_bg "$DIR/run/mariadb.pid" mariadbd "$DIR/log/mariadb.log" \
		mariadbd --no-defaults --user=mysql --datadir="$data" --socket="$MARIADB_SOCK" \
		--skip-networking --skip-name-resolve --pid-file="$DIR/run/mariadb/mariadbd.pid" \
		--character-set-server=utf8mb4 --collation-server=utf8mb4_general_ci \
		--innodb-buffer-pool-size=512M --innodb-lock-wait-timeout=900 \
		--innodb-flush-log-at-trx-commit=0 --innodb-doublewrite=0 \
		--innodb-buffer-pool-load-at-startup=0 --innodb-buffer-pool-dump-at-shutdown=0
	pid=$(head -n1 "$DIR/run/mariadb.pid")
	for _ in $(seq 1 200); do
		alive "$pid" || die "mariadbd exited"
		if mariadb-admin --no-defaults --socket="$MARIADB_SOCK" -uroot ping >/dev/null 2>&1; then
			# Dropped, and made again empty: slurmdbd then connects to a database that
			# exists. Debian 13's libmariadb (MariaDB Connector/C of 11.8) breaks a
			# connection that first failed on a missing database, and slurmdbd 24.11 that
			# makes its database then dies ("Number of columns in result (=1) set exceeds
			# maximum allowed number of columns (=0)"; docs/admin.md).
			mariadb --no-defaults --socket="$MARIADB_SOCK" -uroot \
				-e 'DROP DATABASE IF EXISTS slurm_acct_db; CREATE DATABASE slurm_acct_db' ||
				die "could not make slurm_acct_db afresh"
			return 0
		fi
		sleep 0.05
	done
	die "mariadbd (pid $pid) did not answer on $MARIADB_SOCK within 10 s"
}

# slurmdbd_start: slurmdbd (it reads $DIR/etc/slurmdbd.conf, beside SLURM_CONF), waiting
# until it listens. slurmctld adds its cluster when it registers (Slurm 22.05 does). No
# account or user is added (with sacctmgr that took 1.8 s: each of its RPCs waits about
# 40 ms for a delayed ACK), so jobs are accounted with an empty Account; nothing enforces one.
slurmdbd_start() {
	local pid
	start_bg "$DIR/run/slurmdbd.pid" slurmdbd "$DIR/log/slurmdbd.out" \
		env MYSQL_UNIX_PORT="$MARIADB_SOCK" slurmdbd -D
	pid=$(head -n1 "$DIR/run/slurmdbd.pid")
	for _ in $(seq 1 300); do
		alive "$pid" || die "slurmdbd exited"
		ss -Hltnp "sport = :$DBD_PORT" | grep -q "pid=$pid," && return 0
		sleep 0.05
	done
	die "slurmdbd (pid $pid) did not listen on port $DBD_PORT within 15 s"
}

# step NAME [LOG...]: what up does next, and the logs that tell why, should it fail.
STEP="" STEP_LOGS=()
step() {
	STEP=$1
	shift
	STEP_LOGS=("$@")
}

# up_failed: the EXIT trap of up. After a failure: say which step failed, show the last
# lines of its logs, and stop everything up started.
up_failed() {
	local rc=$? pat f
	trap - EXIT INT TERM
	[ "$rc" = 0 ] && return 0
	set +e
	log "up failed at step: $STEP"
	for pat in "${STEP_LOGS[@]}"; do
		while IFS= read -r f; do
			[ -s "$f" ] || continue
			log "last lines of $f:"
			tail -n 15 "$f" | sed 's/^/cluster:   /' >&2
		done < <(compgen -G "$pat")
	done
	log "stopping everything up started"
	down
	exit "$rc"
}

# port NAME VALUE: VALUE must be a TCP port number.
port() {
	[[ "$2" =~ ^[0-9]+$ ]] && [ "$2" -ge 1 ] && [ "$2" -le 65535 ] || die "$1 must be a TCP port (1-65535), got '$2'"
}

# wait_idle N: wait until sinfo shows N idle nodes; fail at once if slurmctld or a slurmd
# exits meanwhile.
wait_idle() {
	local n=$1 deadline=$((SECONDS + TIMEOUT_UP)) idle=0 f
	while [ $SECONDS -lt $deadline ]; do
		for f in "$DIR/run/slurmctld.pid" "$DIR"/run/slurmd-*.pid; do
			f=$(basename "$f" .pid)
			if ! alive "$(head -n1 "$DIR/run/$f.pid")"; then
				STEP_LOGS=("$DIR/log/$f.log")
				die "${f/-/ on } exited"
			fi
		done
		# sinfo fails (and retries for seconds) while slurmctld does not answer yet, or
		# never will: bounded, and not fatal, so that a slurmctld that exited is named.
		idle=$(timeout 5 sinfo -h -N -o '%N %t' 2>/dev/null | awk '$2=="idle"' | sort -u | wc -l || true)
		[ "$idle" -ge "$n" ] && return 0
		sleep 0.5
	done
	sinfo -N 2>&1 | sed 's/^/cluster:   /' >&2 || true
	die "only $idle of $n nodes idle after ${TIMEOUT_UP}s"
}

up() {
	local n=$1
	[[ "$n" =~ ^[1-9][0-9]*$ ]] || die "NODES must be a positive integer, got '$n'"
	[ "$n" -le 79 ] || die "NODES=$n: at most 79 nodes fit in this /24 (.11-.89; the tree's agents use .91-.99 and .101-)"
	port PERSYST_CTLD_PORT "$CTLD_PORT"
	port PERSYST_SLURMD_PORT "$SLURMD_PORT"
	port PERSYST_RESTD_JWT_PORT "$RESTD_JWT_PORT"
	port PERSYST_DBD_PORT "$DBD_PORT"
	[[ "$NET" =~ ^[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}$ ]] || die "PERSYST_CLUSTER_NET must be the first three bytes of an IPv4 address (a.b.c), got '$NET'"
	for v in COLLECTORS LMAX SYNCS; do
		[[ "${!v}" =~ ^[0-9]+$ ]] || die "PERSYST_$v must be a number, got '${!v}'"
	done
	# Nothing is started, and a running cluster is left alone, unless everything is there.
	check "$n" || die "not starting the cluster: install what is missing (above)"
	down
	trap up_failed EXIT
	trap 'exit 130' INT TERM
	step "preparing $DIR"
	# A fresh cluster every time: no Slurm state, spool, logs or registries of a previous
	# run (the munge key is kept).
	rm -rf "$DIR"/{etc,log,run,state,spool,restd}
	mkdir -p "$DIR"/{etc,log,run,state,spool,munge}
	make_keys
	make_tls "$n"
	write_configs "$n" "$DIR/etc"
	echo "$COLLECTORS" >"$DIR/run/tree"
	make_gpus
	host_lock
	if ! id "$JOB_USER" >/dev/null 2>&1; then
		useradd --no-create-home --shell /bin/sh --user-group "$JOB_USER"
	fi
	if ! id "$RESTD_USER" >/dev/null 2>&1; then
		useradd --system --no-create-home --shell /usr/sbin/nologin "$RESTD_USER"
	fi
	: >"$nodes_file"
	for k in $(seq 1 "$n"); do echo "$NODE$k" >>"$nodes_file"; done
	step "creating the bridge $BRIDGE and the namespaces"
	setup_network "$n"
	# The daemons read tracepoint ids from tracefs (file open/close rates). A systemd host
	# mounts it at boot; this machine may not: mount it, and unmount it in down.
	if [ ! -e /sys/kernel/tracing/events ] && [ -d /sys/kernel/tracing ]; then
		mount -t tracefs tracefs /sys/kernel/tracing && : >"$TRACEFS_MARK" ||
			echo "cluster: tracefs not mounted; file open/close rates will not be measured" >&2
	fi
	: >"$DIR/uses-tracefs"
	host_unlock

	export SLURM_CONF="$DIR/etc/slurm.conf"
	step "starting munged" "$DIR/log/munged.out" "$DIR/log/munged.log"
	start_bg "$DIR/run/munged.pid" munged "$DIR/log/munged.out" \
		munged --foreground --force --key-file="$DIR/munge/munge.key" --socket="$DIR/munge/munge.sock" \
		--pid-file="$DIR/munge/munged.pid" --log-file="$DIR/log/munged.log" --seed-file="$DIR/munge/munged.seed"
	for _ in $(seq 1 50); do [ -S "$DIR/munge/munge.sock" ] && break; sleep 0.1; done
	[ -S "$DIR/munge/munge.sock" ] || die "munged did not start"

	if [ "$ACCOUNTING" = 1 ]; then
		step "starting MariaDB" "$DIR/log/mariadb-install.log" "$DIR/log/mariadb.log"
		mariadb_start
		step "starting slurmdbd" "$DIR/log/slurmdbd.out" "$DIR/log/slurmdbd.log"
		slurmdbd_start
	fi

	step "starting slurmctld" "$DIR/log/slurmctld.log"
	# slurmctld writes its own pid file (SlurmctldPidFile); we track our own copy with -D.
	start_bg "$DIR/run/slurmctld.pid" slurmctld "$DIR/log/slurmctld.out" slurmctld -D -i -f "$SLURM_CONF"
	for k in $(seq 1 "$n"); do
		local node="$NODE$k" ns="/run/netns/${NSPREFIX}$NODE$k"
		mkdir -p "$DIR/spool/$node" "$DIR/run/$node" "$DIR/run/local"
		if [ "$DAEMONS" = 1 ]; then
			step "starting the persyst daemon of $node" "$DIR/log/persyst-$node.log"
			daemon_start "$node"
		fi
		step "starting slurmd on $node" "$DIR/log/slurmd-$node.out" "$DIR/log/slurmd-$node.log"
		# slurmd (and the slurmstepd and prolog it starts) get a private mount namespace in
		# which $DIR/run/local is this node's run directory: the plugin's socket= path then
		# reaches this node's daemon, as /run/persyst/persyst.sock does on a real node. A
		# private UTS namespace gives the node its own host name, as on a real cluster
		# (Slurm expands %N in output file names with it).
		# unshare, sh and nsenter each exec the next, so the recorded PID is slurmd's.
		start_bg "$DIR/run/slurmd-$node.pid" "slurmd -D -N $node" "$DIR/log/slurmd-$node.out" \
			unshare --mount --uts --propagation slave sh -c \
			'hostname "$4" && mount --bind "$1" "$2" && exec nsenter --net="$3" slurmd -D -N "$4" -f "$5"' \
			sh "$DIR/run/$node" "$DIR/run/local" "$ns" "$node" "$SLURM_CONF"
	done

	if [ "$COLLECTORS" -gt 0 ]; then
		step "starting the agent tree" "$DIR/log/collector-*.log" "$DIR/log/sync-*.log" "$DIR/log/frontend.log"
		tree_start "$n"
	fi
	if [ "$RESTD" = 1 ]; then
		step "starting slurmrestd" "$DIR/log/slurmrestd.log" "$DIR/log/slurmrestd-jwt.log"
		restd_start
	fi

	{
		echo "export SLURM_CONF=$DIR/etc/slurm.conf"
		echo "export PERSYST_CLUSTER_DIR=$DIR"
		echo "export PERSYST_NODES=\"$(tr '\n' ' ' <"$nodes_file" | sed 's/ $//')\""
		echo "export PERSYST_NODE_LIST=$NODE[1-$n]"
		echo "export PERSYST_CLUSTER_INSTANCE=$INSTANCE"
		echo "export PERSYST_NETNS_PREFIX=$NSPREFIX"
		echo "export PERSYST_CLUSTER_NET=$NET"
		echo "export PERSYST_JOB_USER=$JOB_USER"
		echo "export PERSYST_ACCOUNTING=$ACCOUNTING"
		[ -z "$MAILPROG" ] || echo "export PERSYST_MAILPROG=$(printf %q "$MAILPROG")"
		[ "$COLLECTORS" -gt 0 ] && echo "export PERSYST_COLLECTOR_ADDRS=$(cat "$DIR/run/collectors")"
		echo "export PERSYST_SOCKET=$DIR/run/%n/persyst.sock"
		if [ "$RESTD" = 1 ]; then
			echo "export PERSYST_SLURMRESTD=unix:$DIR/restd/slurmrestd.sock"
			echo "export PERSYST_SLURMRESTD_JWT=http://127.0.0.1:$RESTD_JWT_PORT"
		fi
	} >"$DIR/env.tmp"

	step "waiting for $n idle node(s)" "$DIR/log/slurmctld.log" "$DIR/log/slurmd-*.log"
	wait_idle "$n"
	mv "$DIR/env.tmp" "$DIR/env"
	trap - EXIT INT TERM
	log "up: Slurm $(slurmctld -V 2>/dev/null | awk '{print $2}'), $n node(s) idle; source $DIR/env"
}

status() {
	[ -f "$DIR/env" ] || { echo "no cluster"; return 0; }
	cat "$DIR/env"
	SLURM_CONF="$DIR/etc/slurm.conf" sinfo -N || true
	local f
	for f in mariadb slurmdbd; do
		[ -f "$DIR/run/$f.pid" ] && alive "$(head -n1 "$DIR/run/$f.pid")" && echo "$f: pid $(head -n1 "$DIR/run/$f.pid")"
	done
	if [ -f "$DIR/run/slurmdbd.pid" ]; then
		SLURM_CONF="$DIR/etc/slurm.conf" sacctmgr -n -P show cluster format=Cluster,ControlHost,ControlPort 2>&1 | sed 's/^/accounting cluster: /' || true
	fi
	ip netns list | grep "^$NSPREFIX" || true
}

case "${1:-}" in
up) up "${2:-${NODES:-2}}" ;;
down) down; log "down" ;;
status) status ;;
check) check "${2:-${NODES:-2}}" && log "check: everything the cluster uses is installed" ;;
daemon-stop) [ -n "${2:-}" ] || die "usage: $0 daemon-stop NODE"; kill_pidfile "$DIR/run/persyst-$2.pid" ;;
daemon-start) [ -n "${2:-}" ] || die "usage: $0 daemon-start NODE"; daemon_start "$2" ;;
collector-stop) [ -n "${2:-}" ] || die "usage: $0 collector-stop colK"; kill_pidfile "$DIR/run/collector-$2.pid" ;;
collector-start) [ -n "${2:-}" ] || die "usage: $0 collector-start colK"; collector_start "$2" ;;
sync-stop) [ -n "${2:-}" ] || die "usage: $0 sync-stop syncK"; kill_pidfile "$DIR/run/sync-$2.pid" ;;
sync-start) [ -n "${2:-}" ] || die "usage: $0 sync-start syncK"; sync_start "$2" ;;
frontend-restart) case "${2:-}" in measured | max) frontend_restart "$2" ;; *) die "usage: $0 frontend-restart measured|max" ;; esac ;;
*) die "usage: $0 up [N] | down | status | check [N] | daemon-stop NODE | daemon-start NODE | collector-stop colK | collector-start colK | sync-stop syncK | sync-start syncK | frontend-restart measured|max" ;;
esac
