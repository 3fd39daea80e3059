// Package digest is the end-of-job digest appended to a job's output file: what it says,
// and Append, which writes it there as the job's user.
//
// # Appending as the user
//
// The node daemon runs as root, and the job's stdout file is a path the user controls:
// they chose it (sbatch -o) and can replace it, or any directory on the way to it, with a
// symlink, a FIFO or a hard link while the job runs. A root process that opened that
// path would write wherever the user points it. So the daemon never opens it.
// Append re-executes persyst (AppendOptions.Self, /proc/self/exe by default) as the
// hidden subcommand AppendCommand with the job user's credentials from the start:
// exec.Cmd's SysProcAttr.Credential makes the forked child call setgroups, setgid and
// setuid before execve, so no Go code of the child ever runs as root and nothing needs to
// be dropped inside Go. The path is the child's only argument and the text comes on its
// stdin; its environment is empty and its working directory is /. The child
// (AppendChild) then:
//
//   - lstats the path and refuses, without opening it, anything but a regular file or a
//     symlink (FIFOs, devices such as /dev/null, sockets, directories);
//   - opens it O_WRONLY|O_APPEND|O_NOFOLLOW|O_NOCTTY|O_CLOEXEC|O_NONBLOCK, without
//     O_CREAT: the file must exist (slurmstepd created it). O_NOFOLLOW refuses a symlink
//     as the last component (ELOOP), even a symlink to a file of the user's own: the
//     job's output file is never a symlink unless someone made it one, and refusing is
//     the simple safe rule. O_NONBLOCK keeps a FIFO swapped in after the lstat from
//     blocking the open (ENXIO without a reader); O_NOCTTY keeps a terminal from becoming
//     the child's controlling terminal;
//   - fstats the descriptor and refuses unless it is a regular file, owned by the child's
//     effective uid, with at least one link;
//   - clears O_NONBLOCK and writes the text (at most MaxText bytes) with write(2), so it
//     lands at the end of the file, in one piece unless the file system splits it.
//
// The security comes from three things together: the child's credentials (the kernel
// checks every directory search and the write permission as the user, with the user's
// groups and no capability, so the child can reach nothing the user cannot reach
// already), O_NOFOLLOW on the last component, and the regular-file and owner checks on
// the opened descriptor (which also refuse a root-owned file that happens to be writable
// by the user, such as a 0666 file, and any hard link to a file the user does not own;
// fs.protected_hardlinks, on by default, already keeps users from linking to files they
// cannot write). Symlinks in the directory components are followed, deliberately: they
// are resolved with the user's rights, so the worst a user can do is point the digest
// at another regular file they own, which is theirs to spoil.
//
// Append refuses before starting anything: a relative path, a path ending in /, . or
// .., a path with a NUL byte or longer than PATH_MAX, empty text or text longer than
// MaxText. It refuses /dev/null (sbatch -o /dev/null) without starting a child, with
// ErrNotRegular, which the daemon should log at debug level only.
//
// The child is bounded: it is killed (its whole process group, SIGKILL) after
// AppendOptions.Timeout, and Append does not wait for its pipes more than a second after
// that. Its errors are one line on stderr and an exit code, which Append turns into an
// *AppendError wrapping ErrNotRegular, ErrSymlink, ErrNotOwner, ErrUnlinked,
// fs.ErrNotExist, fs.ErrPermission or context.DeadlineExceeded. A timed-out child may
// already have written: the daemon must not retry (the digest is written at most once).
//
// What remains:
//
//   - The child is an ordinary process of the user while it lives (a few milliseconds):
//     the user can signal it (the digest is then missing, nothing else), open what
//     /proc/PID/fd shows (its stdin, the digest of their own job; /dev/null; its stderr
//     pipe, into which they could write a false reason, which Append reduces to one
//     printable line), and, where the kernel lets users trace their own processes (no
//     Yama, or ptrace_scope=0), trace it. So it inherits nothing else of the daemon's:
//     before each start Append marks every descriptor of the daemon from 3 up
//     close-on-exec (close_range(CLOSE_RANGE_CLOEXEC)), in case one was inherited or
//     opened without O_CLOEXEC. The child makes itself non-dumpable first thing, which
//     ends /proc access and tracing after the Go runtime's start, not before. A user who
//     traces it in that window can make it fork a process that escapes the process-group
//     kill and lives on as the user, outside any job's cgroup (in the daemon's). Closing
//     that needs Yama's ptrace_scope >= 1 on the nodes, or starting the child in a cgroup
//     of its own that the daemon empties with cgroup.kill (SysProcAttr.UseCgroupFD).
//   - The persyst binary must be executable by every user (it is re-executed with their
//     credentials), and the directories down to the output file must be searchable by
//     the user, with the supplementary groups of Target.Groups (looked up with os/user
//     when nil; none when that fails or takes longer than half the timeout).
//   - A file owned by the user but shared with others (group-writable) still gets the
//     digest: it is the user's file.
package digest
