package hostfs

import "math"

// Splitting and reading the kernel's text files without allocating: the readers of
// cgroup statistics and of /proc parse the same way.

// Field returns the next white-space-separated field of b and what follows it; nil, nil
// when b holds no more fields.
func Field(b []byte) (field, rest []byte) {
	i := 0
	for i < len(b) && IsSpace(b[i]) {
		i++
	}
	j := i
	for j < len(b) && !IsSpace(b[j]) {
		j++
	}
	if i == j {
		return nil, nil
	}
	return b[i:j], b[j:]
}

// IsSpace says whether c is ASCII white space.
func IsSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'
}

// TrimSpace returns b without its leading and trailing ASCII white space.
func TrimSpace(b []byte) []byte {
	for len(b) > 0 && IsSpace(b[0]) {
		b = b[1:]
	}
	for len(b) > 0 && IsSpace(b[len(b)-1]) {
		b = b[:len(b)-1]
	}
	return b
}

// ParseUint parses a decimal uint64: digits only, no sign, no overflow.
func ParseUint(b []byte) (uint64, bool) {
	if len(b) == 0 || len(b) > 20 {
		return 0, false
	}
	var n uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		d := uint64(c - '0')
		if n > (math.MaxUint64-d)/10 {
			return 0, false
		}
		n = n*10 + d
	}
	return n, true
}
