//go:build !amd64 && !arm64

package syscount

// syscallNumbers: none known here; only fentry programs count.
var syscallNumbers = map[string]int64{}

// exitRegs: not known here.
var exitRegs regsLayout
