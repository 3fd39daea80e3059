package digest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/persyst/persyst/internal/testenv"

	"golang.org/x/sys/unix"
)

const nobody = 65534 // nobody:nogroup

// ptraceEnv makes the test binary a would-be tracer: it tries to attach to the thread
// named in it, prints the outcome and exits. The tests run it as uid 65534.
const ptraceEnv = "PERSYST_TEST_PTRACE_TID"

func TestMain(m *testing.M) {
	if tid := os.Getenv(ptraceEnv); tid != "" {
		n, _ := strconv.Atoi(tid)
		if err := unix.PtraceAttach(n); err != nil {
			fmt.Println("refused:", err)
			os.Exit(0)
		}
		fmt.Println("attached")
		unix.PtraceDetach(n)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func copyFile(from, to string, mode os.FileMode) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// scratch is a root-owned 0777 directory under /tmp (no sticky bit, so that
// fs.protected_symlinks and protected_regular do not help: only persyst's checks do).
func scratch(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("/tmp", "persyst-digest-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	return dir
}

// file creates path with content, mode and owner.
func file(t *testing.T, path, content string, mode os.FileMode, uid, gid int) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil { // despite the umask
		t.Fatal(err)
	}
	if err := os.Lchown(path, uid, gid); err != nil {
		t.Fatal(err)
	}
}

func symlink(t *testing.T, target, path string, uid int) {
	t.Helper()
	if err := os.Symlink(target, path); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(path, uid, uid); err != nil {
		t.Fatal(err)
	}
}

func content(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func nobodyTarget(path string) Target {
	return Target{Path: path, UID: nobody, GID: nobody}
}

const digestText = "persyst: 2 findings\n  - low IPC\n"

func TestAppend(t *testing.T) {
	testenv.Root(t, "writes as uid 65534")
	type check func(t *testing.T)
	// unchanged checks that path still has content, mode and owner uid.
	unchanged := func(path, want string, mode os.FileMode, uid uint32) check {
		return func(t *testing.T) {
			t.Helper()
			if got := content(t, path); got != want {
				t.Errorf("%s now holds %q, want %q", path, got, want)
			}
			fi, err := os.Lstat(path)
			if err != nil {
				t.Fatal(err)
			}
			if fi.Mode() != mode {
				t.Errorf("%s: mode %v, want %v", path, fi.Mode(), mode)
			}
			if st := fi.Sys().(*syscall.Stat_t); st.Uid != uid {
				t.Errorf("%s: owner %d, want %d", path, st.Uid, uid)
			}
		}
	}
	for _, tc := range []struct {
		name string
		// setup makes the files in dir and returns the target and the checks to run after.
		setup   func(t *testing.T, dir string) (Target, []check)
		wantErr error  // nil: success
		wantMsg string // in the error
	}{{
		name: "regular file of the user",
		setup: func(t *testing.T, dir string) (Target, []check) {
			out := filepath.Join(dir, "slurm-1.out")
			file(t, out, "job output\n", 0o640, nobody, nobody)
			return nobodyTarget(out), []check{unchanged(out, "job output\n"+digestText, 0o640, nobody)}
		},
	}, {
		name: "through a directory symlink to the user's own directory",
		setup: func(t *testing.T, dir string) (Target, []check) {
			real := filepath.Join(dir, "real")
			os.Mkdir(real, 0o755)
			os.Chown(real, nobody, nobody)
			out := filepath.Join(real, "job.out")
			file(t, out, "x\n", 0o644, nobody, nobody)
			symlink(t, "real", filepath.Join(dir, "link"), nobody)
			return nobodyTarget(filepath.Join(dir, "link", "job.out")), []check{unchanged(out, "x\n"+digestText, 0o644, nobody)}
		},
	}, {
		name: "root-owned 0644 file",
		setup: func(t *testing.T, dir string) (Target, []check) {
			out := filepath.Join(dir, "root.out")
			file(t, out, "root's\n", 0o644, 0, 0)
			return nobodyTarget(out), []check{unchanged(out, "root's\n", 0o644, 0)}
		},
		wantErr: fs.ErrPermission,
		wantMsg: "permission denied",
	}, {
		name: "root-owned 0666 file (writable, refused by the owner check)",
		setup: func(t *testing.T, dir string) (Target, []check) {
			out := filepath.Join(dir, "root.out")
			file(t, out, "root's\n", 0o666, 0, 0)
			return nobodyTarget(out), []check{unchanged(out, "root's\n", 0o666, 0)}
		},
		wantErr: ErrNotOwner,
		wantMsg: "owned by uid 0, not 65534",
	}, {
		// The key case: a job that, while running, replaces its own output file with a
		// symlink to a root-owned file leaves that file untouched — even a 0666 one that
		// the user could open for writing through the link.
		name: "output replaced by a symlink to a root-owned 0666 file",
		setup: func(t *testing.T, dir string) (Target, []check) {
			root := filepath.Join(dir, "rootfile")
			file(t, root, "root's\n", 0o666, 0, 0)
			out := filepath.Join(dir, "slurm-2.out")
			file(t, out, "job output\n", 0o644, nobody, nobody)
			if err := os.Remove(out); err != nil {
				t.Fatal(err)
			}
			symlink(t, root, out, nobody)
			return nobodyTarget(out), []check{unchanged(root, "root's\n", 0o666, 0)}
		},
		wantErr: ErrSymlink,
		wantMsg: "too many levels of symbolic links (a symlink)",
	}, {
		name: "symlink to a file of the user's own (refused too)",
		setup: func(t *testing.T, dir string) (Target, []check) {
			mine := filepath.Join(dir, "mine")
			file(t, mine, "mine\n", 0o644, nobody, nobody)
			out := filepath.Join(dir, "job.out")
			symlink(t, "mine", out, nobody)
			return nobodyTarget(out), []check{unchanged(mine, "mine\n", 0o644, nobody)}
		},
		wantErr: ErrSymlink,
	}, {
		name: "directory symlink to a root directory with a 0666 root file",
		setup: func(t *testing.T, dir string) (Target, []check) {
			rootDir := filepath.Join(dir, "rootdir")
			os.Mkdir(rootDir, 0o755)
			root := filepath.Join(rootDir, "job.out")
			file(t, root, "root's\n", 0o666, 0, 0)
			symlink(t, rootDir, filepath.Join(dir, "link"), nobody)
			return nobodyTarget(filepath.Join(dir, "link", "job.out")), []check{unchanged(root, "root's\n", 0o666, 0)}
		},
		wantErr: ErrNotOwner,
	}, {
		name: "read-only file of the user",
		setup: func(t *testing.T, dir string) (Target, []check) {
			out := filepath.Join(dir, "ro.out")
			file(t, out, "x\n", 0o444, nobody, nobody)
			return nobodyTarget(out), []check{unchanged(out, "x\n", 0o444, nobody)}
		},
		wantErr: fs.ErrPermission,
	}, {
		name: "FIFO of the user, no reader",
		setup: func(t *testing.T, dir string) (Target, []check) {
			out := filepath.Join(dir, "fifo")
			if err := unix.Mkfifo(out, 0o666); err != nil {
				t.Fatal(err)
			}
			os.Lchown(out, nobody, nobody)
			return nobodyTarget(out), nil
		},
		wantErr: ErrNotRegular,
		wantMsg: "not a regular file (fifo)",
	}, {
		name: "/dev/null",
		setup: func(t *testing.T, dir string) (Target, []check) {
			return nobodyTarget("/dev/null"), nil
		},
		wantErr: ErrNotRegular,
	}, {
		name: "a null device of the user's",
		setup: func(t *testing.T, dir string) (Target, []check) {
			out := filepath.Join(dir, "null")
			if err := unix.Mknod(out, unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))); err != nil {
				t.Fatal(err)
			}
			os.Lchown(out, nobody, nobody)
			return nobodyTarget(out), nil
		},
		wantErr: ErrNotRegular,
		wantMsg: "not a regular file (char device)",
	}, {
		name: "missing file",
		setup: func(t *testing.T, dir string) (Target, []check) {
			out := filepath.Join(dir, "missing.out")
			return nobodyTarget(out), []check{func(t *testing.T) {
				if _, err := os.Lstat(out); !errors.Is(err, fs.ErrNotExist) {
					t.Errorf("%s: %v, want it still missing", out, err)
				}
			}}
		},
		wantErr: fs.ErrNotExist,
		wantMsg: "no such file",
	}, {
		name: "directory",
		setup: func(t *testing.T, dir string) (Target, []check) {
			out := filepath.Join(dir, "d")
			os.Mkdir(out, 0o777)
			os.Chown(out, nobody, nobody)
			return nobodyTarget(out), nil
		},
		wantErr: ErrNotRegular,
		wantMsg: "(directory)",
	}, {
		name: "supplementary group given: group-only directory is reachable",
		setup: func(t *testing.T, dir string) (Target, []check) {
			g := filepath.Join(dir, "g")
			os.Mkdir(g, 0o770)
			os.Chmod(g, 0o770)
			os.Chown(g, 0, 4242)
			out := filepath.Join(g, "job.out")
			file(t, out, "x\n", 0o644, nobody, nobody)
			tg := nobodyTarget(out)
			tg.Groups = []uint32{4242}
			return tg, []check{unchanged(out, "x\n"+digestText, 0o644, nobody)}
		},
	}, {
		name: "groups looked up: nobody is not in the directory's group",
		setup: func(t *testing.T, dir string) (Target, []check) {
			g := filepath.Join(dir, "g")
			os.Mkdir(g, 0o770)
			os.Chmod(g, 0o770)
			os.Chown(g, 0, 4242)
			out := filepath.Join(g, "job.out")
			file(t, out, "x\n", 0o644, nobody, nobody)
			return nobodyTarget(out), []check{unchanged(out, "x\n", 0o644, nobody)}
		},
		wantErr: fs.ErrPermission,
	}, {
		name: "root job appends as root to root's file",
		setup: func(t *testing.T, dir string) (Target, []check) {
			out := filepath.Join(dir, "root.out")
			file(t, out, "r\n", 0o600, 0, 0)
			return Target{Path: out}, []check{unchanged(out, "r\n"+digestText, 0o600, 0)}
		},
	}, {
		name: "root job refuses a symlink too",
		setup: func(t *testing.T, dir string) (Target, []check) {
			other := filepath.Join(dir, "other")
			file(t, other, "o\n", 0o600, 0, 0)
			out := filepath.Join(dir, "root.out")
			symlink(t, other, out, 0)
			return Target{Path: out}, []check{unchanged(other, "o\n", 0o600, 0)}
		},
		wantErr: ErrSymlink,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			dir := scratch(t)
			target, checks := tc.setup(t, dir)
			start := time.Now()
			err := Append(context.Background(), target, []byte(digestText), AppendOptions{})
			if d := time.Since(start); d > 3*time.Second {
				t.Errorf("Append took %v", d)
			}
			switch {
			case tc.wantErr == nil && err != nil:
				t.Errorf("Append: %v", err)
			case tc.wantErr != nil && !errors.Is(err, tc.wantErr):
				t.Errorf("Append: %v, want %v", err, tc.wantErr)
			case tc.wantMsg != "" && !strings.Contains(err.Error(), tc.wantMsg):
				t.Errorf("Append: %v, want it to say %q", err, tc.wantMsg)
			}
			var ae *AppendError
			if err != nil && !errors.As(err, &ae) {
				t.Errorf("Append: %T, want *AppendError", err)
			}
			t.Logf("Append: %v (%v)", err, time.Since(start).Round(time.Millisecond))
			for _, c := range checks {
				c(t)
			}
		})
	}
}

// TestAppendCredentials: the write happens on a thread with the user's filesystem uid,
// gid and groups and no capability, which the user cannot trace; the daemon's other
// threads keep root's rights.
func TestAppendCredentials(t *testing.T) {
	testenv.Root(t, "writes as uid 65534")
	dir := scratch(t)
	out := filepath.Join(dir, "job.out")
	file(t, out, "x\n", 0o644, nobody, nobody)
	tracer := filepath.Join(dir, "tracer")
	if err := copyFile(os.Args[0], tracer, 0o755); err != nil {
		t.Fatal(err)
	}
	type seen struct {
		fsuid, fsgid int
		groups       []int
		caps         [2]unix.CapUserData
		trace        string
	}
	var got seen
	tids, traced := make(chan int), make(chan string)
	// The user tries to trace the writing thread while it works (started from another
	// thread: the writing one has no right to start a process as someone else).
	go func() {
		cmd := exec.Command(tracer)
		cmd.Env = []string{ptraceEnv + "=" + strconv.Itoa(<-tids)}
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
		b, err := cmd.CombinedOutput()
		traced <- strings.TrimSpace(string(b)) + fmt.Sprint(err)
	}()
	opts := AppendOptions{write: func(path string, text []byte, uid uint32) (int, string) {
		got.fsuid, _ = unix.SetfsuidRetUid(-1)
		got.fsgid, _ = unix.SetfsgidRetGid(-1)
		got.groups, _ = unix.Getgroups()
		slices.Sort(got.groups)
		hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
		unix.Capget(&hdr, &got.caps[0])
		tids <- unix.Gettid()
		got.trace = <-traced
		return appendFile(path, text, uid)
	}}
	tg := nobodyTarget(out)
	tg.Groups = []uint32{4242, 7}
	if err := Append(context.Background(), tg, []byte(digestText), opts); err != nil {
		t.Fatal(err)
	}
	if got.fsuid != nobody || got.fsgid != nobody || !slices.Equal(got.groups, []int{7, 4242}) {
		t.Errorf("writing thread: fsuid %d, fsgid %d, groups %v; want 65534, 65534, [7 4242]", got.fsuid, got.fsgid, got.groups)
	}
	if got.caps != [2]unix.CapUserData{} {
		t.Errorf("writing thread's capabilities: %+v, want none", got.caps)
	}
	t.Logf("the user tracing the writing thread: %s", got.trace)
	if !strings.HasPrefix(got.trace, "refused:") {
		t.Errorf("the user tracing the writing thread: %q, want refused", got.trace)
	}
	if content(t, out) != "x\n"+digestText {
		t.Errorf("%s: %q", out, content(t, out))
	}
	// This goroutine (and every other thread) is still root: it may write where only
	// root may.
	private := filepath.Join(t.TempDir(), "root-only")
	if err := os.WriteFile(private, []byte("x"), 0o600); err != nil {
		t.Errorf("after Append the daemon is no longer root: %v", err)
	}
}

func TestAppendTimeout(t *testing.T) {
	testenv.Root(t, "writes as uid 65534")
	dir := scratch(t)
	out := filepath.Join(dir, "job.out")
	file(t, out, "x\n", 0o644, nobody, nobody)
	release := make(chan struct{})
	defer close(release)
	hang := func(string, []byte, uint32) (int, string) { <-release; return exitOK, "" } // a hung file system
	start := time.Now()
	err := Append(context.Background(), nobodyTarget(out), []byte(digestText), AppendOptions{write: hang, Timeout: 300 * time.Millisecond})
	d := time.Since(start)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "may still complete") {
		t.Errorf("Append: %v, want a timeout", err)
	}
	if d > 1200*time.Millisecond {
		t.Errorf("Append returned after %v, want about 300ms", d)
	}
}

// TestAppendInput: refused before anything is tried (the write would fail the test).
func TestAppendInput(t *testing.T) {
	opts := AppendOptions{write: func(string, []byte, uint32) (int, string) {
		t.Error("written")
		return exitFailed, "written"
	}}
	for _, tc := range []struct {
		path string
		text []byte
		msg  string
	}{
		{"job.out", []byte("x"), "not an absolute path"},
		{"", []byte("x"), "not an absolute path"},
		{"/tmp/job.out/", []byte("x"), "ends in /"},
		{"/tmp/..", []byte("x"), "ends in .."},
		{"/tmp/a\x00b", []byte("x"), "NUL"},
		{"/" + strings.Repeat("a", 5000), []byte("x"), "longer than"},
		{"/tmp/job.out", nil, "empty text"},
		{"/tmp/job.out", make([]byte, MaxText+1), "more than 65536"},
	} {
		err := Append(context.Background(), nobodyTarget(tc.path), tc.text, opts)
		if !errors.Is(err, ErrInput) || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("Append(%q, %d bytes): %v, want ErrInput saying %q", tc.path, len(tc.text), err, tc.msg)
		}
	}
	if err := Append(context.Background(), nobodyTarget("/dev/null"), []byte("x"), opts); !errors.Is(err, ErrNotRegular) {
		t.Errorf("Append(/dev/null): %v, want ErrNotRegular", err)
	}
}

// TestAppendMax: MaxText bytes go through in one piece.
func TestAppendMax(t *testing.T) {
	testenv.Root(t, "writes as uid 65534")
	dir := scratch(t)
	out := filepath.Join(dir, "job.out")
	file(t, out, "x\n", 0o644, nobody, nobody)
	text := bytes.Repeat([]byte("0123456789abcde\n"), MaxText/16)
	if err := Append(context.Background(), nobodyTarget(out), text, AppendOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := content(t, out); got != "x\n"+string(text) {
		t.Errorf("%s: %d bytes, want %d", out, len(got), 2+len(text))
	}
}

func TestQuotePath(t *testing.T) {
	for in, want := range map[string]string{
		"/home/u/slurm-1.out": "/home/u/slurm-1.out",
		"/home/ü/x":           "/home/ü/x",
		"/a b":                `"/a b"`,
		"/a\nb":               `"/a\nb"`,
		"/a\xffb":             `"/a\xffb"`,
	} {
		if got := quotePath(in); got != want {
			t.Errorf("quotePath(%q) = %s, want %s", in, got, want)
		}
	}
}

// TestOpenChecked covers what the child's lstat normally refuses first, as when the
// user swaps the file between the lstat and the open: the open neither blocks on a FIFO
// nor follows a symlink, and the descriptor is checked.
func TestOpenChecked(t *testing.T) {
	testenv.Root(t, "writes as uid 65534") // the owner check compares with the euid: files here are root's
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	reg := filepath.Join(dir, "reg")
	file(t, reg, "x\n", 0o600, 0, 0)
	other := filepath.Join(dir, "other")
	file(t, other, "x\n", 0o666, nobody, nobody)

	type result struct {
		code int
		msg  string
	}
	open := func(path string) result {
		done := make(chan result, 1)
		go func() {
			fd, code, msg := openChecked(path, uint32(os.Geteuid()))
			if fd >= 0 {
				unix.Close(fd)
			}
			done <- result{code, msg}
		}()
		select {
		case r := <-done:
			return r
		case <-time.After(3 * time.Second):
			t.Fatalf("openChecked(%s) blocks", path)
			return result{}
		}
	}
	if r := open(fifo); r.code != exitNotRegular || !strings.Contains(r.msg, "no such device or address") {
		t.Errorf("FIFO without a reader: %d %q", r.code, r.msg)
	}
	rd, err := unix.Open(fifo, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(rd)
	if r := open(fifo); r.code != exitNotRegular || !strings.HasSuffix(r.msg, "not a regular file (fifo)") {
		t.Errorf("FIFO with a reader: %d %q", r.code, r.msg)
	}
	if r := open(sock); r.code != exitNotRegular {
		t.Errorf("socket: %d %q", r.code, r.msg)
	}
	if r := open(other); r.code != exitNotOwner || !strings.HasSuffix(r.msg, "owned by uid 65534, not 0") {
		t.Errorf("file of another user: %d %q", r.code, r.msg)
	}
	fd, code, msg := openChecked(reg, uint32(os.Geteuid()))
	if code != exitOK {
		t.Fatalf("regular file: %d %q", code, msg)
	}
	defer unix.Close(fd)
	fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
	if err != nil || fl&unix.O_NONBLOCK != 0 || fl&unix.O_APPEND == 0 || fl&unix.O_ACCMODE != unix.O_WRONLY {
		t.Errorf("regular file: flags %#o, %v: want O_WRONLY|O_APPEND, blocking", fl, err)
	}
}
