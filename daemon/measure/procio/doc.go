// Package procio measures the I/O a Slurm job's processes did, from /proc/PID/io, summed
// over the job's process tree and kept across process exits.
//
// # What is measured
//
// /proc/PID/io (kernel task I/O accounting, CONFIG_TASK_IO_ACCOUNTING) holds, per process
// (all its threads, live and exited, plus the totals of every child it reaped):
//
//   - RChar, WChar: bytes passed to read(2)/write(2) and friends (pread, readv, sendfile,
//     splice, ...) on any file: disks, pipes, sockets, ttys, page-cache hits. What the
//     program asked for, not what reached a device.
//   - SyscR, SyscW: the number of such read and write system calls.
//   - ReadBytes, WriteBytes: bytes the process caused to be fetched from / sent towards the
//     block layer (page-cache misses, dirtied pages at the time they are dirtied). Zero on
//     tmpfs; on network filesystems (NFS, Lustre) it depends on the client and kernel, so
//     there RChar and WChar are the portable measure.
//   - CancelledWriteBytes: dirtied bytes that were never written because the file was
//     truncated or deleted first.
//
// This complements the cgroup block I/O counters of package cgstats, which see only the
// block layer: RChar/WChar/SyscR/SyscW show network filesystems, pipes and sockets, and
// the size of the calls (WChar/SyscW) a job uses.
//
// # Input
//
// ListProcs lists the processes of a job's cgroup directory and all its descendants
// (Slurm puts tasks into step_*/task_* children), as cgroup.procs reports them. Tracker
// then follows those processes across reads. PIDs are those of the reader's PID
// namespace: the daemon must see the host's /proc.
//
// # Tracker accounting
//
// Tracker.Update returns the cumulative I/O of the process set since tracking began; it
// never decreases. Processes are identified by (pid, starttime from /proc/PID/stat), so a
// reused pid is a new process.
//
//   - A process seen for the first time contributes its whole counters, its I/O since it
//     was born (including what it inherited from children it already reaped), if it was
//     born at or after TrackerOptions.Since, when the measured work began: it is wholly
//     the work's, and what it did before the first read counts however late that read
//     came (a task's first write, made before it execs the job's program, is counted
//     whether or not a read came in between). A process born before Since (running
//     before the work began: after a daemon restart, every process of the job) counts
//     from the first read that sees it.
//   - A process seen before contributes the difference since its last read (per field;
//     were a counter ever to go down, nothing is subtracted and the old high-water mark
//     stays the reference).
//   - Every process tracked before is read again even if it is no longer in the list
//     passed to Update, for as long as /proc/PID exists with the same starttime: a zombie
//     has left cgroup.procs (v1 and v2 drop a task when it exits, checked on 6.18) but its
//     /proc/PID/io still holds its final totals until it is reaped, and a process that moved to another cgroup is
//     still a process the job started.
//   - A process that is gone (no /proc/PID, or another starttime) keeps its last-read
//     counters counted. When the kernel reaps a child (wait_task_zombie), it adds the
//     child's totals (the child's own I/O plus all it absorbed) into the reaper's
//     /proc/PID/io. To count that once, for each gone process G, Update walks up G's
//     remembered parent chain, through other processes gone in the same Update, to the
//     first ancestor A that is tracked and present, and subtracts G's last-read counters
//     from A's difference. The subtraction is capped per field at A's difference, so a
//     parent that did not absorb (it set SIGCHLD to SIG_IGN or SA_NOCLDWAIT, so the kernel
//     autoreaped the child and added nothing) cannot push the total down. If no such A
//     exists (the parent is outside the set, e.g. slurmstepd reaping a task), nothing is
//     subtracted and nothing is double counted.
//
// An ancestor that is tracked but could not be read in this Update (permission, malformed
// content) keeps the subtraction pending until its next successful read.
//
// # What is lost or approximate
//
//   - The I/O a process did between its last read and its exit, when no tracked ancestor
//     reaps it: a task whose parent is outside the set (slurmstepd, or a subreaper after
//     its parent died), or whose parent is tracked but autoreaps (then also up to the
//     child's last-read counters of the parent's own I/O in that interval, by the cap).
//     Shorter read intervals lose less.
//   - A process that is born and exits between two reads counts only if a tracked
//     ancestor reaps it (then its totals arrive through the ancestor, which is exact).
//   - The parent chain is the one last read. A process reparented (its parent died) and
//     gone before it was read again is subtracted from its old ancestor line, which did
//     not absorb it; the cap bounds the error to that ancestor's difference.
//   - A process first seen after it reaped children that were tracked before (it moved
//     into the set) counts those children twice.
//   - Since is compared with starttime, which has a resolution of one clock tick (10 ms):
//     a process born up to 10 ms before Since may count from its birth. Whatever else
//     the set lists counts as the work's: on cgroup v2, Slurm's slurmstepd sits in the
//     job's cgroup (step_*/slurm) and counts like a task (it is born after the job's
//     start when a prolog event started it).
//
// # Not measured is not zero
//
// Update returns the count of processes it read. A process that could not be read
// (permission denied: not root and another user's process; malformed content) contributes
// nothing this time and is reported in the error; it stays tracked, and its difference is
// counted when it can be read again. A process that vanished while being read (ENOENT,
// ESRCH, empty file) is an ordinary exit. A kernel without task I/O accounting has no
// /proc/PID/io at all, which would look like every process exiting at once: call
// CheckAccounting once at startup and report procio as not measured if it fails.
//
// # Why no library
//
// github.com/prometheus/procfs has /proc/PID/io and /proc/PID/stat parsers and takes an
// injected mount point (procfs.NewFS), so it was considered. It does not fit the per-read
// path: Proc.IO reads the file into a fresh buffer and parses it with fmt.Sscanf against
// a fixed key order (allocating per call, an error names neither line nor key, and
// CancelledWriteBytes is an int64); Proc.Stat runs fmt.Fscan over some 40 fields to give
// us three; FS.Proc stats /proc/PID first. Neither lets us read both files through one
// directory handle, which is what makes "stat and io belong to the same process" hold
// when a pid is reused between the two reads. Measured here (procfs v0.23.0): Proc, Stat
// and IO cost 44 µs and 60 allocations per process, this package's read 22 µs and none.
// The parsers here are about as long as the glue would be, and the Tracker (the part
// that matters) is ours either way.
//
// # Cost
//
// Per process and Update: open /proc/PID, open+read+close stat and io, close: 8 system
// calls, and no allocation once the process is known (BenchmarkUpdate). Nearly all the
// time is the kernel generating the two files: on the 2-vCPU VM this was developed on
// (getpid 0.23 µs, open+read+close of /proc/PID/stat 11 µs, of io 7 µs) a process costs
// 20-27 µs, 128 processes about 3 ms per Update.
//
// # Concurrency
//
// A Tracker holds per-process state and reused buffers and is not safe for concurrent use;
// use one per job from one goroutine. The functions and the parse functions have no state.
package procio
