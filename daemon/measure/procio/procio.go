package procio

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"github.com/persyst/persyst/hostfs"
)

// CheckAccounting reports whether the kernel has task I/O accounting: nil if
// <root>/proc/self/io can be read, else an error (wrapping fs.ErrNotExist when the kernel
// was built without CONFIG_TASK_IO_ACCOUNTING). Without it nothing here is measured.
func CheckAccounting(h hostfs.FS) error {
	p := h.Path("proc/self/io")
	b, err := os.ReadFile(p)
	if err != nil {
		return fmt.Errorf("procio: no task I/O accounting: %w", err)
	}
	if _, err := parseIOBytes(b); err != nil {
		return fmt.Errorf("procio: %s: %w", p, err)
	}
	return nil
}

// IO is one process's /proc/PID/io, or a sum of them. Fields are in bytes, except SyscR
// and SyscW, which count system calls.
type IO struct {
	RChar, WChar        uint64 // bytes passed to read/write-like system calls, any file
	SyscR, SyscW        uint64 // number of read/write-like system calls
	ReadBytes           uint64 // bytes fetched from the block layer
	WriteBytes          uint64 // bytes dirtied towards the block layer
	CancelledWriteBytes uint64 // dirtied bytes never written (truncated or deleted first)
}

// Add returns a+b per field.
func (a IO) Add(b IO) IO {
	return IO{
		RChar: a.RChar + b.RChar, WChar: a.WChar + b.WChar,
		SyscR: a.SyscR + b.SyscR, SyscW: a.SyscW + b.SyscW,
		ReadBytes: a.ReadBytes + b.ReadBytes, WriteBytes: a.WriteBytes + b.WriteBytes,
		CancelledWriteBytes: a.CancelledWriteBytes + b.CancelledWriteBytes,
	}
}

// Sub returns a-b per field, 0 where b is larger.
func (a IO) Sub(b IO) IO {
	return IO{
		RChar: sat(a.RChar, b.RChar), WChar: sat(a.WChar, b.WChar),
		SyscR: sat(a.SyscR, b.SyscR), SyscW: sat(a.SyscW, b.SyscW),
		ReadBytes: sat(a.ReadBytes, b.ReadBytes), WriteBytes: sat(a.WriteBytes, b.WriteBytes),
		CancelledWriteBytes: sat(a.CancelledWriteBytes, b.CancelledWriteBytes),
	}
}

// max returns the per-field maximum of a and b.
func (a IO) max(b IO) IO {
	return IO{
		RChar: max(a.RChar, b.RChar), WChar: max(a.WChar, b.WChar),
		SyscR: max(a.SyscR, b.SyscR), SyscW: max(a.SyscW, b.SyscW),
		ReadBytes: max(a.ReadBytes, b.ReadBytes), WriteBytes: max(a.WriteBytes, b.WriteBytes),
		CancelledWriteBytes: max(a.CancelledWriteBytes, b.CancelledWriteBytes),
	}
}

func sat(a, b uint64) uint64 {
	if a < b {
		return 0
	}
	return a - b
}

// Parsers are pure: they take the file's content and return values or an error naming the
// line; the caller adds the file name. The []byte variants are the allocation-free
// versions the Tracker uses on buffers it reuses; they allocate only to build an error.

// ioKeys are the keys of /proc/PID/io, in the kernel's order; bit i of a mask is key i.
var ioKeys = [...]string{"rchar", "wchar", "syscr", "syscw", "read_bytes", "write_bytes", "cancelled_write_bytes"}

const allIOKeys = 1<<len(ioKeys) - 1

// parseIO parses /proc/PID/io: "key: value" lines. All seven keys are required; unknown
// keys (a future kernel) are skipped.
func parseIO(r io.Reader) (IO, error) {
	b, err := io.ReadAll(r)
	if err != nil {
		return IO{}, err
	}
	return parseIOBytes(b)
}

func parseIOBytes(b []byte) (IO, error) {
	var v IO
	var seen uint
	for line := 1; len(b) > 0; line++ {
		var l []byte
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			l, b = b[:i], b[i+1:]
		} else {
			l, b = b, nil
		}
		if len(hostfs.TrimSpace(l)) == 0 {
			continue
		}
		c := bytes.IndexByte(l, ':')
		if c < 0 {
			return IO{}, fmt.Errorf("line %d: want \"key: value\", got %q", line, l)
		}
		key, val := hostfs.TrimSpace(l[:c]), hostfs.TrimSpace(l[c+1:])
		var dst *uint64
		var bit uint
		switch string(key) {
		case "rchar":
			dst, bit = &v.RChar, 1<<0
		case "wchar":
			dst, bit = &v.WChar, 1<<1
		case "syscr":
			dst, bit = &v.SyscR, 1<<2
		case "syscw":
			dst, bit = &v.SyscW, 1<<3
		case "read_bytes":
			dst, bit = &v.ReadBytes, 1<<4
		case "write_bytes":
			dst, bit = &v.WriteBytes, 1<<5
		case "cancelled_write_bytes":
			dst, bit = &v.CancelledWriteBytes, 1<<6
		default:
			continue
		}
		if seen&bit != 0 {
			return IO{}, fmt.Errorf("line %d: duplicate key %s", line, key)
		}
		n, ok := hostfs.ParseUint(val)
		if !ok {
			return IO{}, fmt.Errorf("line %d: %s: want a number, got %q", line, key, val)
		}
		*dst, seen = n, seen|bit
	}
	if seen != allIOKeys {
		var missing []byte
		for i, k := range ioKeys {
			if seen&(1<<i) == 0 {
				if len(missing) > 0 {
					missing = append(missing, ", "...)
				}
				missing = append(missing, k...)
			}
		}
		return IO{}, fmt.Errorf("missing keys: %s", missing)
	}
	return v, nil
}

// UserHZ is the unit of the times in /proc/PID/stat (USER_HZ: 100 on every architecture
// Go runs Linux on).
const UserHZ = 100

// Ticks returns a time since boot (on CLOCK_BOOTTIME, the clock of a process's
// task->start_boottime, which /proc/PID/stat prints as starttime) in USER_HZ clock ticks,
// rounded down like starttime: a process born at or after that moment has a starttime of
// at least Ticks. 0 for a time at or before boot.
func Ticks(sinceBoot time.Duration) uint64 {
	if sinceBoot <= 0 {
		return 0
	}
	return uint64(sinceBoot / (time.Second / UserHZ))
}

// procStat is what we use of /proc/PID/stat.
type procStat struct {
	PPID      int
	StartTime uint64 // clock ticks after boot; with the pid, identifies the process
	State     byte   // R, S, D, Z, ...
}

// parseStat parses /proc/PID/stat: "pid (comm) state ppid ... starttime ...". comm is
// printed raw and may contain spaces, parentheses and even newlines, so the fields are
// taken after the last ')'.
func parseStat(r io.Reader) (procStat, error) {
	b, err := io.ReadAll(r)
	if err != nil {
		return procStat{}, err
	}
	return parseStatBytes(b)
}

// Field indexes after "(comm)": state is field 3 of proc(5), so field n is index n-3.
const (
	statState     = 0
	statPPID      = 1
	statStartTime = 19
)

func parseStatBytes(b []byte) (procStat, error) {
	open := bytes.IndexByte(b, '(')
	end := bytes.LastIndexByte(b, ')')
	if open < 0 || end < open {
		return procStat{}, fmt.Errorf("line 1: want \"pid (comm) state ...\", got %q", clip(b))
	}
	if _, ok := hostfs.ParseUint(hostfs.TrimSpace(b[:open])); !ok {
		return procStat{}, fmt.Errorf("line 1: pid: want a number, got %q", hostfs.TrimSpace(b[:open]))
	}
	var st procStat
	rest := b[end+1:]
	i := 0
	for ; i <= statStartTime; i++ {
		var f []byte
		f, rest = hostfs.Field(rest)
		if f == nil {
			break
		}
		switch i {
		case statState:
			if len(f) != 1 {
				return procStat{}, fmt.Errorf("line 1: state: want one letter, got %q", f)
			}
			st.State = f[0]
		case statPPID:
			n, ok := hostfs.ParseUint(f)
			if !ok || n > 1<<31-1 {
				return procStat{}, fmt.Errorf("line 1: ppid: want a number, got %q", f)
			}
			st.PPID = int(n)
		case statStartTime:
			n, ok := hostfs.ParseUint(f)
			if !ok {
				return procStat{}, fmt.Errorf("line 1: starttime: want a number, got %q", f)
			}
			st.StartTime = n
		}
	}
	if i <= statStartTime {
		return procStat{}, fmt.Errorf("line 1: %d fields after comm, want at least %d", i, statStartTime+1)
	}
	return st, nil
}

// clip shortens b for an error message.
func clip(b []byte) []byte {
	b = hostfs.TrimSpace(b)
	if len(b) > 64 {
		return append(b[:61:61], "..."...)
	}
	return b
}

// pidPath is the file name of /proc/<pid>/<name> as seen in the mount namespace, for
// errors.
func pidPath(pid int, name string) string {
	if name == "" {
		return "/proc/" + strconv.Itoa(pid)
	}
	return "/proc/" + strconv.Itoa(pid) + "/" + name
}

// ReadSelf reads the calling process's /proc/self/io (under the FS root). A parent that
// reaps its children gets their totals added here: `persyst run` without privileges uses
// this for what /proc/PID/io of its exited child no longer shows to a non-root reader.
func ReadSelf(h hostfs.FS) (IO, error) {
	p := h.Path("proc/self/io")
	f, err := os.Open(p)
	if err != nil {
		return IO{}, fmt.Errorf("procio: %w", err)
	}
	defer f.Close()
	v, err := parseIO(f)
	if err != nil {
		return IO{}, fmt.Errorf("procio: %s: %w", p, err)
	}
	return v, nil
}
