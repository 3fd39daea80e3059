package hostfs

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// MemInfo is what /proc/meminfo says about the node's memory, in bytes.
type MemInfo struct {
	Total     int64
	Available int64 // 0 where the kernel does not say (before 3.14)
}

// MemInfo reads <root>/proc/meminfo.
func (f FS) MemInfo() (MemInfo, error) {
	r, err := f.Open("proc/meminfo")
	if err != nil {
		return MemInfo{}, err
	}
	defer r.Close()
	m, err := ParseMemInfo(r)
	if err != nil {
		return MemInfo{}, fmt.Errorf("read %s: %w", r.Name(), err)
	}
	return m, nil
}

// ParseMemInfo reads MemTotal and MemAvailable from /proc/meminfo; a missing
// MemAvailable is 0, a missing MemTotal an error.
func ParseMemInfo(r io.Reader) (MemInfo, error) {
	var m MemInfo
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 {
			continue
		}
		var dst *int64
		switch f[0] {
		case "MemTotal:":
			dst = &m.Total
		case "MemAvailable:":
			dst = &m.Available
		default:
			continue
		}
		kb, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			return MemInfo{}, fmt.Errorf("meminfo: %s %q: %w", f[0], f[1], err)
		}
		*dst = kb * 1024
	}
	if err := sc.Err(); err != nil {
		return MemInfo{}, fmt.Errorf("meminfo: %w", err)
	}
	if m.Total == 0 {
		return MemInfo{}, fmt.Errorf("meminfo: no MemTotal")
	}
	return m, nil
}
