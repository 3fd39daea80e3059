package digest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"os/exec"
	"os/user"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode"
	"unicode/utf8"

	"golang.org/x/sys/unix"
)

// AppendCommand is the hidden persyst subcommand that appends as the user.
const AppendCommand = "__append-digest"

// MaxText is the most Append writes.
const MaxText = 64 << 10

// DefaultTimeout bounds the child when AppendOptions.Timeout is zero.
const DefaultTimeout = 5 * time.Second

// Target is the file to append to and whose it is.
type Target struct {
	Path     string // absolute path of the job's stdout file
	UID, GID uint32
	// Groups are the user's supplementary groups. If nil, they are looked up with os/user
	// by UID; if that fails, the child has none.
	Groups []uint32
}

// AppendOptions tune Append.
type AppendOptions struct {
	Self    string        // persyst executable to re-exec ("/proc/self/exe")
	Timeout time.Duration // bound on the child (DefaultTimeout); it is killed after it
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
	Reason string // one line, from the child when it ran (sanitized)
	Err    error  // one of the Err* above, fs.ErrNotExist, fs.ErrPermission, a context error, or the start or wait error
}

func (e *AppendError) Error() string {
	return fmt.Sprintf("digest: append as uid %d: %s", e.UID, e.Reason)
}

func (e *AppendError) Unwrap() error { return e.Err }

// The child's exit codes (2 is a usage error, or a Go panic).
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
// documentation): it starts `Self __append-digest PATH` with those credentials, the text
// on its stdin, and waits for it at most opts.Timeout. Root jobs (UID 0) go the same way,
// with uid 0. A nil error means the whole text was written.
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
	if opts.Self == "" {
		opts.Self = "/proc/self/exe"
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	groups := t.Groups
	if groups == nil {
		groups = lookupGroups(t.UID, opts.Timeout/2)
	}
	inheritNothing()

	ctx, cancel := context.WithTimeout(ctx, opts.Timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, opts.Self, AppendCommand, t.Path)
	cmd.Env = []string{} // not nil: nil would be the daemon's environment
	cmd.Dir = "/"
	cmd.Stdin = bytes.NewReader(text)
	stderr := &lineBuffer{max: 4 << 10}
	cmd.Stderr = stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{
		// nil or empty Groups: setgroups(0) — none of the daemon's groups are kept.
		Credential: &syscall.Credential{Uid: t.UID, Gid: t.GID, Groups: groups},
		Setpgid:    true,
		Pdeathsig:  syscall.SIGKILL,
	}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = time.Second
	// Pdeathsig fires when the thread that started the child exits: keep it.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := cmd.Start(); err != nil {
		return fail(err, "start %s %s: %v", opts.Self, AppendCommand, err)
	}
	err := cmd.Wait()
	if err == nil || errors.Is(err, exec.ErrWaitDelay) {
		// ErrWaitDelay: exited 0, something it started holds its stderr.
		return nil
	}
	if ctx.Err() != nil {
		what := "canceled"
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			what = fmt.Sprintf("timed out after %v", opts.Timeout)
		}
		return fail(ctx.Err(), "append to %s: %s (child killed; it may have written)", quotePath(t.Path), what)
	}
	reason := stderr.firstLine()
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return fail(err, "append to %s: %v", quotePath(t.Path), err)
	}
	code := ee.ExitCode()
	if reason == "" {
		reason = fmt.Sprintf("append to %s: child %v", quotePath(t.Path), ee)
	}
	if e, ok := exitErrs[code]; ok {
		return fail(e, "%s", reason)
	}
	return fail(err, "%s", reason)
}

// AppendChild is the child of Append: args is the path, stdin the text. It returns the
// exit code, after a one-line reason on stderr when it is not 0.
func AppendChild(args []string) int {
	// No /proc/self access or tracing by the user from here on (see the package doc).
	_ = unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
	if len(args) != 1 {
		fmt.Fprintln(os.Stderr, "persyst: "+AppendCommand+" is internal to the persyst daemon")
		return exitUsage
	}
	path := args[0]
	if err := checkPath(path); err != nil {
		fmt.Fprintf(os.Stderr, "refused: %s: %v\n", quotePath(path), err)
		return exitUsage
	}
	text, err := io.ReadAll(io.LimitReader(os.Stdin, MaxText+1))
	switch {
	case err != nil:
		fmt.Fprintf(os.Stderr, "read text: %v\n", err)
		return exitFailed
	case len(text) == 0:
		fmt.Fprintf(os.Stderr, "refused: %s: empty text\n", quotePath(path))
		return exitUsage
	case len(text) > MaxText:
		fmt.Fprintf(os.Stderr, "refused: %s: text longer than %d bytes\n", quotePath(path), MaxText)
		return exitUsage
	}
	code, msg := appendFile(path, text)
	if code != exitOK {
		fmt.Fprintln(os.Stderr, msg)
	}
	return code
}

// appendFile is the child's work, with the credentials it was started with.
func appendFile(path string, text []byte) (int, string) {
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
	fd, code, msg := openChecked(path)
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

// openChecked opens path for appending, without following a final symlink or blocking on
// a FIFO, and checks that it is a regular file of the effective uid, back in blocking
// mode. On failure it returns the exit code and the reason.
func openChecked(path string) (int, int, string) {
	q := quotePath(path)
	var st unix.Stat_t
	const flags = unix.O_WRONLY | unix.O_APPEND | unix.O_NOFOLLOW | unix.O_NOCTTY | unix.O_CLOEXEC | unix.O_NONBLOCK
	fd, err := unix.Open(path, flags, 0)
	for err == unix.EINTR {
		fd, err = unix.Open(path, flags, 0)
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
	case st.Uid != uint32(unix.Geteuid()):
		code, msg = exitNotOwner, fmt.Sprintf("refused: %s: owned by uid %d, not %d", q, st.Uid, unix.Geteuid())
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

// inheritNothing marks every descriptor of this process from 3 up close-on-exec, so
// that the user's child cannot get one that was inherited or opened without O_CLOEXEC.
// Go opens its own with O_CLOEXEC and passes ExtraFiles by dup2 in the child, so this
// changes nothing for Go's children.
func inheritNothing() {
	if unix.CloseRange(3, math.MaxUint32, unix.CLOSE_RANGE_CLOEXEC) == nil {
		return
	}
	// Kernels before 5.11.
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return
	}
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil || fd < 3 {
			continue
		}
		if fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err == nil && fl&unix.FD_CLOEXEC == 0 {
			unix.FcntlInt(uintptr(fd), unix.F_SETFD, fl|unix.FD_CLOEXEC)
		}
	}
}

// lineBuffer keeps the first max bytes written to it.
type lineBuffer struct {
	max int
	buf []byte
}

func (b *lineBuffer) Write(p []byte) (int, error) {
	if room := b.max - len(b.buf); room > 0 {
		b.buf = append(b.buf, p[:min(len(p), room)]...)
	}
	return len(p), nil
}

// firstLine is the first non-empty line, without control characters, at most 512 bytes.
func (b *lineBuffer) firstLine() string {
	for _, l := range strings.Split(string(b.buf), "\n") {
		l = strings.Map(func(r rune) rune {
			if r == utf8.RuneError || !unicode.IsPrint(r) && r != ' ' {
				return -1
			}
			return r
		}, l)
		if l = strings.TrimSpace(l); l != "" {
			if len(l) > 512 {
				l = strings.ToValidUTF8(l[:512], "") + "…"
			}
			return l
		}
	}
	return ""
}
