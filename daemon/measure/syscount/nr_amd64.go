package syscount

import "golang.org/x/sys/unix"

// syscallNumbers are this architecture's system call numbers, for the raw tracepoint.
var syscallNumbers = map[string]int64{
	"openat": unix.SYS_OPENAT, "open": unix.SYS_OPEN, "openat2": unix.SYS_OPENAT2,
	"creat": unix.SYS_CREAT, "close": unix.SYS_CLOSE, "futex": unix.SYS_FUTEX,
}
