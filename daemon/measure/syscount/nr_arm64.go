package syscount

import "golang.org/x/sys/unix"

// syscallNumbers are this architecture's system call numbers, for the raw tracepoint
// (arm64 has no open(2) or creat(2)).
var syscallNumbers = map[string]int64{
	"openat": unix.SYS_OPENAT, "openat2": unix.SYS_OPENAT2, "close": unix.SYS_CLOSE, "futex": unix.SYS_FUTEX,
}
