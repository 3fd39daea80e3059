package syscount

import (
	"github.com/cilium/ebpf/asm"
	"golang.org/x/sys/unix"
)

// syscallNumbers are this architecture's system call numbers, for the raw tracepoint.
var syscallNumbers = map[string]int64{
	"openat": unix.SYS_OPENAT, "open": unix.SYS_OPEN, "openat2": unix.SYS_OPENAT2,
	"creat": unix.SYS_CREAT, "close": unix.SYS_CLOSE, "futex": unix.SYS_FUTEX,
	"read": unix.SYS_READ, "pread64": unix.SYS_PREAD64, "write": unix.SYS_WRITE, "pwrite64": unix.SYS_PWRITE64,
}

// exitRegs: x86-64 keeps the number in orig_ax and the first argument in di.
var exitRegs = regsLayout{nr: "orig_ax", nrSize: asm.DWord, arg0: "di"}
