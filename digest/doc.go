// Package digest is the end-of-job digest appended to a job's output file: what it says,
// and Append, which writes it there as the job's user.
//
// # Appending as the user
//
// The node daemon runs as root, and the job's stdout file is a path the user controls:
// they chose it (sbatch -o) and can replace it, or any directory on the way to it, with a
// symlink, a FIFO or a hard link while the job runs. A root process that opened that
// path would write wherever the user points it. So the daemon never opens it with its
// own rights.
//
// Append does the write on a thread of its own that holds the user's rights and nothing
// else: the goroutine locks its OS thread (and never unlocks it, so the thread ends with
// it), sets that thread's supplementary groups, filesystem gid and filesystem uid to the
// user's (raw setgroups, setfsgid and setfsuid act on the calling thread only), and drops
// every capability from it (capset). The kernel then checks every directory search, the
// open and the write as the user's, with the user's groups and no capability. No process
// of the user's is started: there is nothing the user could trace, signal or inspect in
// /proc (the thread's real and effective uid stay root's, so the user cannot ptrace it).
// On that thread, Append:
//
//   - lstats the path and refuses, without opening it, anything but a regular file or a
//     symlink (FIFOs, devices such as /dev/null, sockets, directories);
//   - opens it O_WRONLY|O_APPEND|O_NOFOLLOW|O_NOCTTY|O_CLOEXEC|O_NONBLOCK with openat2
//     and RESOLVE_NO_MAGICLINKS (no /proc/PID/fd/N link on the way), without O_CREAT:
//     the file must exist (slurmstepd created it). O_NOFOLLOW refuses a symlink as the
//     last component (ELOOP), even a symlink to a file of the user's own: the job's
//     output file is never a symlink unless someone made it one, and refusing is the
//     simple safe rule. O_NONBLOCK keeps a FIFO swapped in after the lstat from blocking
//     the open (ENXIO without a reader); O_NOCTTY keeps a terminal from becoming the
//     daemon's controlling terminal;
//   - fstats the descriptor and refuses unless it is a regular file, owned by the user,
//     with at least one link;
//   - clears O_NONBLOCK and writes the text (at most MaxText bytes) with write(2), so it
//     lands at the end of the file, in one piece unless the file system splits it.
//
// The security comes from three things together: the thread's credentials (it can reach
// nothing the user cannot reach already), O_NOFOLLOW on the last component, and the
// regular-file and owner checks on the opened descriptor (which also refuse a root-owned
// file that happens to be writable by the user, such as a 0666 file, and any hard link to
// a file the user does not own; fs.protected_hardlinks, on by default, already keeps
// users from linking to files they cannot write). Symlinks in the directory components
// are followed, deliberately: they are resolved with the user's rights, so the worst a
// user can do is point the digest at another regular file they own, which is theirs to
// spoil.
//
// Append refuses before trying: a relative path, a path ending in /, . or .., a path
// with a NUL byte or longer than PATH_MAX, empty text or text longer than MaxText. It
// refuses /dev/null (sbatch -o /dev/null) with ErrNotRegular, which the daemon should log
// at debug level only.
//
// Append waits for the write at most AppendOptions.Timeout. A write stuck in the kernel
// (a hung network file system) cannot be interrupted: its thread stays blocked, and may
// still complete the write later; the daemon must not retry (the digest is written at
// most once). Errors are *AppendError values wrapping ErrNotRegular, ErrSymlink,
// ErrNotOwner, ErrUnlinked, fs.ErrNotExist, fs.ErrPermission or context.DeadlineExceeded.
//
// What remains:
//
//   - The directories down to the output file must be searchable by the user, with the
//     supplementary groups of Target.Groups (looked up with os/user when nil; none when
//     that fails or takes longer than half the timeout).
//   - A file owned by the user but shared with others (group-writable) still gets the
//     digest: it is the user's file.
package digest
