package digest

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

const nobody = 65534 // nobody:nogroup

// testSelf is a copy of the test binary that nobody can execute (the one go test built
// lives in a 0700 directory); set by TestMain when running as root.
var testSelf string

func TestMain(m *testing.M) {
	// Append runs `Self __append-digest PATH`: the child's args are os.Args[2:], as in
	// cmd/persyst.
	if len(os.Args) > 1 && os.Args[1] == AppendCommand {
		os.Exit(AppendChild(os.Args[2:]))
	}
	code := func() int {
		if os.Geteuid() != 0 {
			return m.Run()
		}
		dir, err := os.MkdirTemp("/tmp", "persyst-digest-bin-")
		if err != nil {
			panic(err)
		}
		defer os.RemoveAll(dir)
		if err := os.Chmod(dir, 0o755); err != nil {
			panic(err)
		}
		testSelf = filepath.Join(dir, "digest.test")
		if err := copyFile(os.Args[0], testSelf, 0o755); err != nil {
			panic(err)
		}
		return m.Run()
	}()
	os.Exit(code)
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

// needRoot skips without root (switching users needs it), except in CI.
func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv("CI") != "" {
		t.Fatal("the digest tests switch to uid 65534 and need root; CI runs them as root")
	}
	t.Skip("needs root to start the child as uid 65534")
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
	needRoot(t)
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
		name: "a null device of the user's (refused by the child)",
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
			err := Append(context.Background(), target, []byte(digestText), AppendOptions{Self: testSelf})
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

// TestAppendChildArgs checks what the child gets: its arguments (as AppendChild and
// cmd/persyst expect them), the credentials and groups (none of the daemon's), an empty
// environment, / as working directory, the text on stdin.
func TestAppendChildArgs(t *testing.T) {
	needRoot(t)
	dir := scratch(t)
	script := filepath.Join(dir, "self")
	file(t, script, `#!/bin/sh
d=$(dirname "$0")
printf '%s\n' "$@" > "$d/args"
{ /usr/bin/id -u; /usr/bin/id -g; /usr/bin/id -G; pwd; } > "$d/id"
/usr/bin/env > "$d/env"
cat > "$d/stdin"
`, 0o755, 0, 0)
	out := filepath.Join(dir, "job.out")
	tg := nobodyTarget(out)
	tg.Groups = []uint32{4242}
	if err := Append(context.Background(), tg, []byte(digestText), AppendOptions{Self: script}); err != nil {
		t.Fatal(err)
	}
	if got, want := content(t, filepath.Join(dir, "args")), AppendCommand+"\n"+out+"\n"; got != want {
		t.Errorf("args %q, want %q", got, want)
	}
	if got, want := content(t, filepath.Join(dir, "id")), "65534\n65534\n65534 4242\n/\n"; got != want {
		t.Errorf("uid, gid, groups, cwd %q, want %q", got, want)
	}
	for _, l := range strings.Split(content(t, filepath.Join(dir, "env")), "\n") {
		// The shell sets PWD (and dash may set nothing else): nothing of ours may show.
		if l != "" && !strings.HasPrefix(l, "PWD=") && !strings.HasPrefix(l, "SHLVL=") && !strings.HasPrefix(l, "_=") && !strings.HasPrefix(l, "OLDPWD=") {
			t.Errorf("child environment has %q", l)
		}
	}
	if got := content(t, filepath.Join(dir, "stdin")); got != digestText {
		t.Errorf("stdin %q, want %q", got, digestText)
	}
}

func TestAppendTimeout(t *testing.T) {
	needRoot(t)
	dir := scratch(t)
	script := filepath.Join(dir, "self")
	// The sleep is a grandchild holding the pipes: the whole group must be killed.
	file(t, script, "#!/bin/sh\nsleep 60\n", 0o755, 0, 0)
	out := filepath.Join(dir, "job.out")
	file(t, out, "x\n", 0o644, nobody, nobody)
	start := time.Now()
	err := Append(context.Background(), nobodyTarget(out), []byte(digestText), AppendOptions{Self: script, Timeout: 300 * time.Millisecond})
	d := time.Since(start)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Append: %v, want a timeout", err)
	}
	if d > 1200*time.Millisecond {
		t.Errorf("Append returned after %v, want about 300ms", d)
	}
	t.Logf("Append: %v (after %v)", err, d.Round(time.Millisecond))
}

func TestAppendChildFails(t *testing.T) {
	needRoot(t)
	dir := scratch(t)
	out := filepath.Join(dir, "job.out")
	file(t, out, "x\n", 0o644, nobody, nobody)
	// A Self that nobody cannot execute.
	self := filepath.Join(dir, "self")
	file(t, self, "#!/bin/sh\n", 0o700, 0, 0)
	err := Append(context.Background(), nobodyTarget(out), []byte(digestText), AppendOptions{Self: self})
	if !errors.Is(err, fs.ErrPermission) {
		t.Errorf("Append with a Self nobody cannot run: %v, want permission denied", err)
	}
	// A child that dies without a word.
	file(t, self, "#!/bin/sh\nkill -9 $$\n", 0o755, 0, 0)
	err = Append(context.Background(), nobodyTarget(out), []byte(digestText), AppendOptions{Self: self})
	if err == nil || !strings.Contains(err.Error(), "killed") {
		t.Errorf("Append with a child killed: %v, want an error saying so", err)
	}
	// A child that writes garbage on stderr: one sanitized line.
	file(t, self, "#!/bin/sh\nprintf '\\n\\033[31mforged\\rline\\nsecond\\n' >&2; exit 9\n", 0o755, 0, 0)
	err = Append(context.Background(), nobodyTarget(out), []byte(digestText), AppendOptions{Self: self})
	if err == nil || !strings.HasSuffix(err.Error(), ": [31mforgedline") {
		t.Errorf("Append with a child writing control characters: %q", err)
	}
	if got := content(t, out); got != "x\n" {
		t.Errorf("%s: %q", out, got)
	}
}

// TestAppendInput: refused before anything is started (Self does not exist).
func TestAppendInput(t *testing.T) {
	opts := AppendOptions{Self: "/nonexistent/persyst"}
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
	needRoot(t)
	dir := scratch(t)
	out := filepath.Join(dir, "job.out")
	file(t, out, "x\n", 0o644, nobody, nobody)
	text := bytes.Repeat([]byte("0123456789abcde\n"), MaxText/16)
	if err := Append(context.Background(), nobodyTarget(out), text, AppendOptions{Self: testSelf}); err != nil {
		t.Fatal(err)
	}
	if got := content(t, out); got != "x\n"+string(text) {
		t.Errorf("%s: %d bytes, want %d", out, len(got), 2+len(text))
	}
}

// TestInheritNothing: a descriptor opened without O_CLOEXEC is not passed to the child.
func TestInheritNothing(t *testing.T) {
	needRoot(t)
	dir := scratch(t)
	fd, err := unix.Open("/etc/hostname", unix.O_RDONLY, 0)
	if err != nil {
		t.Skip(err)
	}
	defer unix.Close(fd)
	script := filepath.Join(dir, "self")
	file(t, script, "#!/bin/sh\nls /proc/self/fd > \"$(dirname \"$0\")/fds\"\n", 0o755, 0, 0)
	if err := Append(context.Background(), nobodyTarget(filepath.Join(dir, "x")), []byte("x"), AppendOptions{Self: script}); err != nil {
		t.Fatal(err)
	}
	fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
	if err != nil || fl&unix.FD_CLOEXEC == 0 {
		t.Errorf("fd %d: flags %#x, %v: want FD_CLOEXEC", fd, fl, err)
	}
	// ls's own directory descriptor is 3.
	if got := strings.Fields(content(t, filepath.Join(dir, "fds"))); len(got) > 4 {
		t.Errorf("child's descriptors %v, want 0-2 and ls's own", got)
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
	needRoot(t) // the owner check compares with the euid: files here are root's
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
			fd, code, msg := openChecked(path)
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
	fd, code, msg := openChecked(reg)
	if code != exitOK {
		t.Fatalf("regular file: %d %q", code, msg)
	}
	defer unix.Close(fd)
	fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
	if err != nil || fl&unix.O_NONBLOCK != 0 || fl&unix.O_APPEND == 0 || fl&unix.O_ACCMODE != unix.O_WRONLY {
		t.Errorf("regular file: flags %#o, %v: want O_WRONLY|O_APPEND, blocking", fl, err)
	}
}

// TestAppendDefaultSelf: the daemon's way, re-executing /proc/self/exe (here the test
// binary, wherever go test put it: a magic link is not resolved through its directories).
func TestAppendDefaultSelf(t *testing.T) {
	needRoot(t)
	if fi, err := os.Stat("/proc/self/exe"); err != nil || fi.Mode().Perm()&0o001 == 0 {
		t.Skipf("the test binary is not executable by others (%v, %v)", fi.Mode(), err)
	}
	dir := scratch(t)
	out := filepath.Join(dir, "job.out")
	file(t, out, "x\n", 0o644, nobody, nobody)
	if err := Append(context.Background(), nobodyTarget(out), []byte(digestText), AppendOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := content(t, out); got != "x\n"+digestText {
		t.Errorf("%s: %q", out, got)
	}
}
