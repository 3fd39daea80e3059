# bench/lib.sh — helpers shared by the bench scripts; source it, do not run it.
#
# Fake Slurm jobs without Slurm (the cgroups Slurm's cgroup/v1 plugin makes, one idle
# `sleep` in each), a process's CPU time and memory from /proc, and cgroup clean-up.
# The caller sets CG (the cgroup mount root, /sys/fs/cgroup), NODE (the fake node's name)
# and keeps the sleeps' PIDs in the array sleep_pids.
# shellcheck shell=bash

# The cgroup v1 hierarchies a fake job gets, as Slurm's cgroup/v1 plugin makes them.
V1_CTRLS=(cpuacct memory pids cpuset)
# shellcheck disable=SC2034 # used by the scripts that source this
HZ=$(getconf CLK_TCK)

# cpu_ticks PID: utime+stime (fields 14, 15 of /proc/PID/stat; the comm may hold spaces);
# 0 for a process that is gone.
cpu_ticks() { { sed 's/.*) //' "/proc/$1/stat" 2>/dev/null || echo; } | awk '{print $12 + $13 + 0}'; }
# sum_ticks PID...: utime+stime of all of them, in clock ticks (HZ a second).
sum_ticks() {
	local t=0 p
	for p in "$@"; do t=$((t + $(cpu_ticks "$p"))); done
	echo "$t"
}
# status_kb PID KEY: a field of /proc/PID/status in kB (VmRSS, VmHWM); 0 if gone.
status_kb() {
	[ -r "/proc/$1/status" ] || { echo 0; return; }
	awk -v k="$2:" '$1 == k {v = $2} END {print v + 0}' "/proc/$1/status" 2>/dev/null || echo 0
}
# sum_rss_kb PID...: VmRSS of all of them, kB.
sum_rss_kb() {
	local t=0 p
	for p in "$@"; do t=$((t + $(status_kb "$p" VmRSS))); done
	echo "$t"
}
now_us() { echo "${EPOCHREALTIME/./}"; }

# mkcg CTRL PATH...: create nested cgroup directories in hierarchy CTRL, copying
# cpuset.cpus/mems from the parent in the cpuset hierarchy.
mkcg() {
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

# fake_job J: job J's cgroups (slurm_NODE/uid_0/job_J/step_0 in every V1_CTRLS hierarchy)
# with one idle sleep in the step; its PID is appended to sleep_pids.
fake_job() {
	local j=$1 c sp
	for c in "${V1_CTRLS[@]}"; do mkcg "$c" "slurm_$NODE" uid_0 "job_$j" step_0; done
	sleep 100000 &
	sp=$!
	sleep_pids+=("$sp")
	for c in "${V1_CTRLS[@]}"; do echo "$sp" >"$CG/$c/slurm_$NODE/uid_0/job_$j/step_0/cgroup.procs"; done
}

# node_cgroups: every cgroup directory of the fake node (slurm_NODE in the v1
# hierarchies, persyst_NODE in the unified one), deepest first.
node_cgroups() {
	{
		for c in "${V1_CTRLS[@]}"; do [ -d "$CG/$c/slurm_$NODE" ] && find "$CG/$c/slurm_$NODE" -type d; done
		[ -d "$CG/unified/persyst_$NODE" ] && find "$CG/unified/persyst_$NODE" -type d
	} | awk '{print length($0) " " $0}' | sort -rn | cut -d' ' -f2-
}

# rm_cgroups DIR...: rmdir each (deepest first as given); a cgroup can stay busy for a
# moment after its last task exited.
rm_cgroups() {
	local d
	for d in "$@"; do
		for _ in $(seq 50); do rmdir "$d" 2>/dev/null && break; [ -d "$d" ] || break; sleep 0.1; done
	done
}

# kill_sleeps: end the fake jobs' sleeps and empty sleep_pids.
kill_sleeps() {
	local p
	for p in "${sleep_pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${sleep_pids[@]}"; do wait "$p" 2>/dev/null || true; done
	sleep_pids=()
}

# stop_pid NAME PID: SIGTERM, up to 5 s, then SIGKILL; reaps it if it is our child.
stop_pid() {
	local name=$1 pid=$2
	[ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 0
	kill -TERM "$pid" 2>/dev/null || true
	for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
	if kill -0 "$pid" 2>/dev/null && [ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" != Z ]; then
		echo "$name $pid ignored SIGTERM, killing it" >&2
		kill -KILL "$pid" 2>/dev/null || true
	fi
	wait "$pid" 2>/dev/null || true
}
