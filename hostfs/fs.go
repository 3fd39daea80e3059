// Package hostfs is the host's filesystem as persyst's readers see it: one root ("/" in
// production, a directory of fixtures in tests), path helpers, the facts every stage
// needs about the node (CPUs, their topology, processor, memory), and pure parsers
// (ParseMemInfo, ParseCPUInfo) that take an io.Reader so they can be tested on fixtures.
//
// Every reader of /proc and /sys (the cgroup, perf, process and network readers, the
// calibration, the node facts of the property engine) takes an FS instead of a path of
// its own, so a test roots them all in one place and no code names /proc or /sys
// outside the root.
package hostfs

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// FS is a filesystem root. The zero value is the real root, "/".
type FS struct{ root string }

// New returns the FS rooted at root ("" is "/").
func New(root string) FS {
	if root == "" || root == "/" {
		return FS{}
	}
	return FS{root: filepath.Clean(root)}
}

// Root returns the root directory.
func (f FS) Root() string {
	if f.root == "" {
		return "/"
	}
	return f.root
}

// Path joins elem under the root: Path("proc", "self", "cgroup"). An element that is an
// absolute path (a cgroup directory as the kernel names it) is still taken under the root.
func (f FS) Path(elem ...string) string {
	return filepath.Join(append([]string{f.Root()}, elem...)...)
}

// Rel returns p (a path under the root, from Path) as the host names it.
func (f FS) Rel(p string) string {
	if f.root == "" {
		return p
	}
	r := strings.TrimPrefix(p, f.root)
	if r == "" {
		return "/"
	}
	return r
}

// ReadFile reads the regular file at elem under the root, never blocking on it
// (ReadRegular); the error names the path.
func (f FS) ReadFile(elem ...string) ([]byte, error) {
	return ReadRegular(f.Path(elem...))
}

// ReadString reads the file at elem under the root, without surrounding white space.
func (f FS) ReadString(elem ...string) (string, error) {
	b, err := f.ReadFile(elem...)
	return strings.TrimSpace(string(b)), err
}

// Open opens the file at elem under the root.
func (f FS) Open(elem ...string) (*os.File, error) {
	return os.Open(f.Path(elem...))
}

// Dir returns the root as an io/fs file system (paths relative to the root, without a
// leading slash), for code written against fs.FS.
func (f FS) Dir() fs.FS { return os.DirFS(f.Root()) }
