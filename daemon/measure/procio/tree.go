package procio

import (
	"os"
	"strconv"

	"github.com/persyst/persyst/hostfs"
)

// Descendants returns pid and all its living descendants (from the parent links in
// <root>/proc/*/stat): the process tree of a command when no cgroup holds it.
func Descendants(h hostfs.FS, pid int) []int {
	ents, err := os.ReadDir(h.Path("proc"))
	if err != nil {
		return []int{pid}
	}
	children := map[int][]int{}
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(h.Path("proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		st, err := parseStatBytes(b)
		if err != nil {
			continue
		}
		children[st.PPID] = append(children[st.PPID], p)
	}
	out := []int{pid}
	for i := 0; i < len(out); i++ {
		out = append(out, children[out[i]]...)
	}
	return out
}
