package secret

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRead(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good", "pa ss\n", 0o600)
	if pw, err := Read(good); err != nil || pw != "pa ss" {
		t.Errorf("a good file: %q, %v", pw, err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(good, link); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ path, err string }{
		{write("open", "pw\n", 0o644), "mode 0644"},
		{write("empty", "", 0o600), "alone on one line"},
		{write("two", "a\nb\n", 0o600), "alone on one line"},
		{link, "symbolic link"},
		{dir, "not a regular file"},
		{filepath.Join(dir, "missing"), "no such file"},
	} {
		pw, err := Read(tc.path)
		if err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%s: %q, error %v; want one with %q", tc.path, pw, err, tc.err)
		}
	}
}
