package hostfs

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestReadInto(t *testing.T) {
	dir := t.TempDir()
	big := strings.Repeat("0123456789abcdef", 1000) // 16000 bytes: the buffer grows
	for _, tt := range []struct {
		name, content string
		buf           []byte
	}{
		{"empty", "", nil},
		{"small, no buffer", "pids 1\n", nil},
		{"small, buffer reused", "pids 1\n", make([]byte, 3, 8)},
		{"larger than the buffer", big, make([]byte, 0, 4096)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := filepath.Join(dir, strings.ReplaceAll(tt.name, " ", "_"))
			if err := os.WriteFile(p, []byte(tt.content), 0o644); err != nil {
				t.Fatal(err)
			}
			got, err := ReadInto(p, tt.buf)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.content, string(got)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
	if _, err := ReadInto(dir, nil); !errors.Is(err, ErrNotRegular) {
		t.Errorf("a directory: %v, want ErrNotRegular", err)
	}
	if _, err := ReadInto(filepath.Join(dir, "none"), nil); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("no file: %v, want not exist", err)
	}
}

func TestSubdirs(t *testing.T) {
	dir := t.TempDir()
	var want []string
	for i := range 300 { // more entries than one getdents64 of the buffer returns
		name := "step_" + strings.Repeat("x", 40) + string(rune('a'+i%26)) + strings.Repeat("y", i%7) + string(rune('0'+i/26%10)) + string(rune('0'+i/260))
		if err := os.Mkdir(filepath.Join(dir, name), 0o755); err != nil && !os.IsExist(err) {
			t.Fatal(err)
		} else if err == nil {
			want = append(want, name)
		}
	}
	for _, f := range []string{"cgroup.procs", "cpu.stat"} {
		if err := os.WriteFile(filepath.Join(dir, f), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(dir, filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	var got []string
	if _, err := Subdirs(dir, make([]byte, 512), func(name string) { got = append(got, name) }); err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	slices.Sort(want)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if _, err := Subdirs(filepath.Join(dir, "none"), nil, func(string) {}); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("no directory: %v, want not exist", err)
	}
}
