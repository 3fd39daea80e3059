package syscount

import (
	"github.com/cilium/ebpf/asm"
	"golang.org/x/sys/unix"
)

// syscallNumbers are this architecture's system call numbers, for the raw tracepoint
// (arm64 has no open(2) or creat(2)).
var syscallNumbers = map[string]int64{
	"openat": unix.SYS_OPENAT, "openat2": unix.SYS_OPENAT2, "close": unix.SYS_CLOSE, "futex": unix.SYS_FUTEX,
	"read": unix.SYS_READ, "pread64": unix.SYS_PREAD64, "write": unix.SYS_WRITE, "pwrite64": unix.SYS_PWRITE64,
}

// exitRegs: arm64 keeps the number in syscallno (32 bits) and the first argument in
// orig_x0 (x0 holds the return value).
var exitRegs = regsLayout{nr: "syscallno", nrSize: asm.Word, arg0: "orig_x0"}
