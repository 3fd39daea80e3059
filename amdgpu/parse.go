package amdgpu

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// maxLines bounds the lines a parser reads of one sysfs file (a RAS count, a KFD node's
// properties: some tens of lines).
const maxLines = 256

// ParseUint reads a file holding one unsigned integer ("12345\n").
func ParseUint(r io.Reader) (uint64, error) {
	b, err := io.ReadAll(io.LimitReader(r, 64))
	if err != nil {
		return 0, err
	}
	s := strings.TrimSpace(string(b))
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("want an unsigned integer, got %q", s)
	}
	return v, nil
}

// RAS is one block's error counts (ras/<block>_err_count): uncorrectable and
// correctable, since the driver loaded.
type RAS struct{ Uncorrectable, Correctable uint64 }

// ParseRAS reads a RAS error count file: "ue: N" and "ce: M" lines.
func ParseRAS(r io.Reader) (RAS, error) {
	var out RAS
	seen := 0
	sc := bufio.NewScanner(io.LimitReader(r, 4096))
	for n := 1; sc.Scan(); n++ {
		if n > maxLines {
			break
		}
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		x, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
		switch strings.TrimSpace(k) {
		case "ue":
			if err != nil {
				return RAS{}, fmt.Errorf("line %d: ue: want a count, got %q", n, strings.TrimSpace(v))
			}
			out.Uncorrectable, seen = x, seen|1
		case "ce":
			if err != nil {
				return RAS{}, fmt.Errorf("line %d: ce: want a count, got %q", n, strings.TrimSpace(v))
			}
			out.Correctable, seen = x, seen|2
		}
	}
	if err := sc.Err(); err != nil {
		return RAS{}, err
	}
	if seen != 3 {
		return RAS{}, fmt.Errorf("want \"ue: N\" and \"ce: N\" lines")
	}
	return out, nil
}

// ParseProperties reads a KFD topology node's properties file: "key value" lines of
// unsigned integers (a key whose value is not one is left out).
func ParseProperties(r io.Reader) (map[string]uint64, error) {
	out := map[string]uint64{}
	sc := bufio.NewScanner(io.LimitReader(r, 64<<10))
	for n := 1; sc.Scan(); n++ {
		if n > maxLines {
			return nil, fmt.Errorf("more than %d lines", maxLines)
		}
		f := strings.Fields(sc.Text())
		if len(f) != 2 {
			continue
		}
		if v, err := strconv.ParseUint(f[1], 10, 64); err == nil {
			out[f[0]] = v
		}
	}
	return out, sc.Err()
}
