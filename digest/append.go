package digest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os/user"
	"runtime"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"golang.org/x/sys/unix"
)

// MaxText is the most Append writes.
const MaxText = 64 << 10

// DefaultTimeout bounds the write when AppendOptions.Timeout is zero.
const DefaultTimeout = 5 * time.Second

// Target is the file to append to and whose it is.
type Target struct {
	Path     string // absolute path of the job's stdout file
	UID, GID uint32
	// Groups are the user's supplementary groups. If nil, they are looked up with os/user
	// by UID; if that fails, the write has none.
	Groups []uint32
}

// AppendOptions tune Append.
type AppendOptions struct {
	Timeout time.Duration // how long Append waits for the write (DefaultTimeout)
	// write replaces appendFile on the writing thread (tests).
	write func(path string, text []byte, uid uint32) (int, string)
}

// Reasons an append is refused, wrapped by *AppendError. A missing file wraps
// fs.ErrNotExist, a permission error fs.ErrPermission, a timeout
// context.DeadlineExceeded.
var (
	// ErrNotRegular: not a regular file (a FIFO, a device such as /dev/null, a socket,
	// a directory). Expected with sbatch -o /dev/null: log it at debug level.
	ErrNotRegular = errors.New("not a regular file")
	// ErrSymlink: the path's last component is a symlink.
	ErrSymlink = errors.New("a symlink")
	// ErrNotOwner: the file is not owned by the user.
	ErrNotOwner = errors.New("not owned by the user")
	// ErrUnlinked: the file was deleted between the open and the check.
	ErrUnlinked = errors.New("deleted")
	// ErrInput: Append's arguments are unusable (relative path, empty or too long text);
	// nothing was started.
	ErrInput = errors.New("bad input")
)

// AppendError is the error of Append.
type AppendError struct {
	Path   string
	UID    uint32
	Reason string // one line
	Err    error  // one of the Err* above, fs.ErrNotExist, fs.ErrPermission, a context error, or the start or wait error
}

func (e *AppendError) Error() string {
	return fmt.Sprintf("digest: append as uid %d: %s", e.UID, e.Reason)
}

func (e *AppendError) Unwrap() error { return e.Err }

// The writing thread's outcomes.
const (
	exitOK         = 0
	exitFailed     = 1
	exitUsage      = 2
	exitNotRegular = 3
	exitNotOwner   = 4
	exitSymlink    = 5
	exitNotExist   = 6
	exitPermission = 7
	exitUnlinked   = 8
)

var exitErrs = map[int]error{
	exitUsage:      ErrInput,
	exitNotRegular: ErrNotRegular,
	exitNotOwner:   ErrNotOwner,
	exitSymlink:    ErrSymlink,
	exitNotExist:   fs.ErrNotExist,
	exitPermission: fs.ErrPermission,
	exitUnlinked:   ErrUnlinked,
}

// Append writes text at the end of t.Path as the user t.UID, t.GID (see the package
// documentation): on a thread of its own that takes the user's filesystem credentials and
// supplementary groups and drops every capability, and then dies. It waits for it at most
// opts.Timeout. Root jobs (UID 0) go the same way, with uid 0. A nil error means the
// whole text was written.
func Append(ctx context.Context, t Target, text []byte, opts AppendOptions) error {
	fail := func(err error, format string, a ...any) error {
		return &AppendError{Path: t.Path, UID: t.UID, Reason: fmt.Sprintf(format, a...), Err: err}
	}
	if err := checkPath(t.Path); err != nil {
		return fail(ErrInput, "refused: %s: %v", quotePath(t.Path), err)
	}
	if len(text) == 0 {
		return fail(ErrInput, "refused: %s: empty text", quotePath(t.Path))
	}
	if len(text) > MaxText {
		return fail(ErrInput, "refused: %s: text of %d bytes, more than %d", quotePath(t.Path), len(text), MaxText)
	}
	if t.Path == "/dev/null" {
		return fail(ErrNotRegular, "refused: /dev/null: not a regular file (char device)")
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	groups := t.Groups
	if groups == nil {
		groups = lookupGroups(t.UID, opts.Timeout/2)
	}
	write := opts.write
	if write == nil {
		write = appendFile
	}
	text = bytes.Clone(text) // the thread may outlive this call
	type result struct {
		code int
		msg  string
	}
	done := make(chan result, 1)
	go func() {
		// Never unlocked: the thread ends with this goroutine, and its credentials with it;
		// no other goroutine ever runs on it.
		runtime.LockOSThread()
		if err := becomeUser(t.UID, t.GID, groups); err != nil {
			done <- result{exitFailed, fmt.Sprintf("take the credentials of uid %d: %v", t.UID, err)}
			return
		}
		code, msg := write(t.Path, text, t.UID)
		done <- result{code, msg}
	}()
	ctx, cancel := context.WithTimeout(ctx, opts.Timeout)
	defer cancel()
	select {
	case r := <-done:
		if r.code == exitOK {
			return nil
		}
		return fail(exitErrs[r.code], "%s", r.msg)
	case <-ctx.Done():
		what := "canceled"
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			what = fmt.Sprintf("timed out after %v", opts.Timeout)
		}
		return fail(ctx.Err(), "append to %s: %s (the write may still complete)", quotePath(t.Path), what)
	}
}

// becomeUser gives the calling thread, and it alone, the user's filesystem uid and gid
// and supplementary groups, and drops every capability from it: from then on the kernel
// checks every path search, open and write of this thread as the user's (raw syscalls:
// glibc and Go's syscall package would change every thread of the daemon). The caller
// has locked the thread and never unlocks it.
func becomeUser(uid, gid uint32, groups []uint32) error {
	gs := make([]int, len(groups))
	for i, g := range groups {
		gs[i] = int(g)
	}
	if err := unix.Setgroups(gs); err != nil { // setgroups(2) on this thread (x/sys: RawSyscall)
		return fmt.Errorf("setgroups: %w", err)
	}
	unix.Setfsgid(int(gid))
	unix.Setfsuid(int(uid))
	// setfs*id report no error: check that they took (called with -1, they only return
	// the current value).
	if cur, _ := unix.SetfsgidRetGid(-1); cur != int(gid) {
		return fmt.Errorf("setfsgid %d: still %d", gid, cur)
	}
	if cur, _ := unix.SetfsuidRetUid(-1); cur != int(uid) {
		return fmt.Errorf("setfsuid %d: still %d", uid, cur)
	}
	// No capability at all on this thread (a change of fsuid away from 0 already clears
	// the filesystem ones; this also covers uid 0 and the others, such as overriding
	// quotas).
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var none [2]unix.CapUserData
	if err := unix.Capset(&hdr, &none[0]); err != nil {
		return fmt.Errorf("capset: %w", err)
	}
	return nil
}

// appendFile is the writing thread's work, with the user's credentials: uid is the
// user's, who must own the file.
func appendFile(path string, text []byte, uid uint32) (int, string) {
	q := quotePath(path)
	var st unix.Stat_t
	// Not even open a FIFO, device or socket: opening some devices does things.
	if err := unix.Lstat(path, &st); err == nil {
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFREG, unix.S_IFLNK: // the open decides (a symlink: ELOOP)
		default:
			return exitNotRegular, fmt.Sprintf("refused: %s: not a regular file (%s)", q, fileKind(st.Mode))
		}
	}
	fd, code, msg := openChecked(path, uid)
	if code != exitOK {
		return code, msg
	}
	defer unix.Close(fd)
	for len(text) > 0 {
		n, err := unix.Write(fd, text)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return exitFailed, fmt.Sprintf("write %s: %v (%d bytes not written)", q, err, len(text))
		}
		if n == 0 {
			return exitFailed, fmt.Sprintf("write %s: %v (%d bytes not written)", q, io.ErrShortWrite, len(text))
		}
		text = text[n:]
	}
	return exitOK, ""
}

// openChecked opens path for appending, without following a final symlink or any magic
// link (/proc/PID/fd/N) or blocking on a FIFO, and checks that it is a regular file owned
// by uid, back in blocking mode. On failure it returns the exit code and the reason.
func openChecked(path string, uid uint32) (int, int, string) {
	q := quotePath(path)
	var st unix.Stat_t
	const flags = unix.O_WRONLY | unix.O_APPEND | unix.O_NOFOLLOW | unix.O_NOCTTY | unix.O_CLOEXEC | unix.O_NONBLOCK
	open := func() (int, error) {
		fd, err := unix.Openat2(unix.AT_FDCWD, path, &unix.OpenHow{Flags: flags, Resolve: unix.RESOLVE_NO_MAGICLINKS})
		if err == unix.ENOSYS { // kernels before 5.6
			fd, err = unix.Open(path, flags, 0)
		}
		return fd, err
	}
	fd, err := open()
	for err == unix.EINTR {
		fd, err = open()
	}
	if err != nil {
		code, what := exitFailed, ""
		switch err {
		case unix.ELOOP:
			if unix.Lstat(path, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK {
				code, what = exitSymlink, " (a symlink)"
			}
		case unix.ENOENT:
			code = exitNotExist
		case unix.EACCES, unix.EPERM:
			code = exitPermission
		case unix.EISDIR:
			code = exitNotRegular
		case unix.ENXIO: // a FIFO without a reader or a socket, swapped in after the lstat
			code, what = exitNotRegular, " (not a regular file)"
		}
		return -1, code, fmt.Sprintf("open %s: %v%s", q, err, what)
	}
	code, msg := exitOK, ""
	err = unix.Fstat(fd, &st)
	switch {
	case err != nil:
		code, msg = exitFailed, fmt.Sprintf("fstat %s: %v", q, err)
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		code, msg = exitNotRegular, fmt.Sprintf("refused: %s: not a regular file (%s)", q, fileKind(st.Mode))
	case st.Uid != uid:
		code, msg = exitNotOwner, fmt.Sprintf("refused: %s: owned by uid %d, not %d", q, st.Uid, uid)
	case st.Nlink < 1:
		code, msg = exitUnlinked, fmt.Sprintf("refused: %s: deleted (no links)", q)
	default:
		var fl int
		if fl, err = unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0); err == nil {
			_, err = unix.FcntlInt(uintptr(fd), unix.F_SETFL, fl&^unix.O_NONBLOCK)
		}
		if err != nil {
			code, msg = exitFailed, fmt.Sprintf("fcntl %s: %v", q, err)
		}
	}
	if code != exitOK {
		unix.Close(fd)
		return -1, code, msg
	}
	return fd, exitOK, ""
}

// checkPath refuses paths that cannot name an existing file's last component.
func checkPath(p string) error {
	switch {
	case !strings.HasPrefix(p, "/"):
		return errors.New("not an absolute path")
	case strings.IndexByte(p, 0) >= 0:
		return errors.New("contains a NUL byte")
	case len(p) >= unix.PathMax:
		return fmt.Errorf("longer than %d bytes", unix.PathMax-1)
	case strings.HasSuffix(p, "/"):
		// A trailing slash makes even O_NOFOLLOW follow a final symlink.
		return errors.New("ends in /")
	}
	if base := p[strings.LastIndexByte(p, '/')+1:]; base == "." || base == ".." {
		return fmt.Errorf("ends in %s", base)
	}
	return nil
}

func fileKind(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFIFO:
		return "fifo"
	case unix.S_IFCHR:
		return "char device"
	case unix.S_IFBLK:
		return "block device"
	case unix.S_IFDIR:
		return "directory"
	case unix.S_IFSOCK:
		return "socket"
	case unix.S_IFLNK:
		return "symlink"
	case unix.S_IFREG:
		return "regular file"
	}
	return fmt.Sprintf("mode %#o", mode&unix.S_IFMT)
}

// quotePath quotes a user-controlled path when it has spaces, control characters or
// invalid UTF-8, so that it cannot forge log lines.
func quotePath(p string) string {
	for _, r := range p {
		if r == utf8.RuneError || r == ' ' || !unicode.IsPrint(r) {
			return strconv.Quote(p)
		}
	}
	return p
}

// lookupGroups returns uid's supplementary groups from os/user, or nil when the lookup
// fails or takes longer than wait (NSS may hang: the goroutine is then abandoned).
func lookupGroups(uid uint32, wait time.Duration) []uint32 {
	ch := make(chan []uint32, 1)
	go func() {
		var gids []uint32
		defer func() { ch <- gids }()
		u, err := user.LookupId(strconv.FormatUint(uint64(uid), 10))
		if err != nil {
			return
		}
		ids, err := u.GroupIds()
		if err != nil {
			return
		}
		for _, s := range ids {
			if g, err := strconv.ParseUint(s, 10, 32); err == nil {
				gids = append(gids, uint32(g))
			}
		}
	}()
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case g := <-ch:
		return g
	case <-timer.C:
		return nil
	}
}
