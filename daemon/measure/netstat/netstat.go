// Package netstat reads a node's network counters: bytes and packets per network
// interface from /proc/net/dev, and per InfiniBand port from
// /sys/class/infiniband/<dev>/ports/<port>/counters.
//
// # What is measured
//
// These are node counters, not job counters: every job on the node, the daemon, NFS or
// Lustre client traffic and the system all count. Slurm jobs share the node's network
// namespace, so nothing finer exists for interfaces; persyst attributes node traffic to
// the job only when the job has the node to itself, and the caller decides that.
//
// /proc/net/dev is read in the reader's network namespace (the daemon's: the host's).
// ReadNet sums the interfaces it counts and lists them in Counters.Ifaces. By default
// only the loopback "lo" is excluded. Stacked interfaces count the same traffic twice
// (a bond and its slaves, a bridge and its ports, a VLAN and its parent, IPoIB "ib0" and
// the InfiniBand port counters below); a site that has them passes an exclude function.
//
// InfiniBand (and RoCE, which also appears under /sys/class/infiniband) port counters
// count the RDMA traffic that never passes through the kernel's network stack, which
// /proc/net/dev does not see. port_xmit_data and port_rcv_data count 4-byte words and
// are multiplied by 4 here. On older HCAs or kernels these are the 32-bit PortCounters of
// the IB specification, which stop (saturate) at 2^32-1 instead of wrapping: then
// IBPort.Saturated is set and the port's values must be taken as not measured (the
// 64-bit values live in counters_ext/ on such kernels, or are reset by the fabric
// manager; this package keeps to counters/).
//
// # Not measured is not zero
//
// ReadNet fails when /proc/net/dev cannot be read or parsed; Counters with an empty Ifaces
// means no interface was counted, not zero traffic. ReadInfiniBand returns nil, nil when
// the node has no /sys/class/infiniband (report "no InfiniBand", not zero traffic); a
// port whose counters cannot be read has Missing set and its values are meaningless.
//
// # Why no library
//
// github.com/prometheus/procfs has a /proc/net/dev parser (FS.NetDev) and, in procfs/sysfs,
// an InfiniBand class reader, both with an injected mount point. NetDev indexes the 16
// fields of a line without checking how many there are (a short line panics with an index
// out of range, checked with v0.23.0), reports errors without a line, and returns a map
// that loses the file's order. InfiniBandClass requires fw_ver, link_layer, state,
// phys_state and a parsable rate for every port, reads every counter and hw_counter, and
// fails for the whole node when any one device fails. We need four files per port and
// the 32-bit saturation check; the parsers here are shorter than the workarounds.
package netstat

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/persyst/persyst/hostfs"
)

// Iface is one interface's line of /proc/net/dev (the counters used here).
type Iface struct {
	Name               string
	RxBytes, RxPackets uint64
	TxBytes, TxPackets uint64
}

// netDevFields names the 16 numbers of a /proc/net/dev line, for errors.
var netDevFields = [16]string{
	"rx_bytes", "rx_packets", "rx_errs", "rx_drop", "rx_fifo", "rx_frame", "rx_compressed", "rx_multicast",
	"tx_bytes", "tx_packets", "tx_errs", "tx_drop", "tx_fifo", "tx_colls", "tx_carrier", "tx_compressed",
}

// parseNetDev parses /proc/net/dev: two header lines, then "name: 16 numbers" per
// interface. Old kernels print no space after the colon when the first number is wide
// ("eth0:1234567890 ..."); interface names cannot contain ':' (dev_valid_name), so the
// name ends at the first one. Errors name the line.
func parseNetDev(r io.Reader) ([]Iface, error) {
	var out []Iface
	sc := bufio.NewScanner(r)
	line := 0
	for sc.Scan() {
		line++
		if line <= 2 {
			continue
		}
		t := sc.Text()
		if strings.TrimSpace(t) == "" {
			continue
		}
		name, rest, ok := strings.Cut(t, ":")
		if !ok {
			return nil, fmt.Errorf("line %d: want \"name: 16 numbers\", got %q", line, t)
		}
		name = strings.TrimSpace(name)
		if name == "" {
			return nil, fmt.Errorf("line %d: empty interface name in %q", line, t)
		}
		f := strings.Fields(rest)
		if len(f) != len(netDevFields) {
			return nil, fmt.Errorf("line %d: %s: want %d numbers, got %d", line, name, len(netDevFields), len(f))
		}
		var v [len(netDevFields)]uint64
		for i, s := range f {
			n, err := strconv.ParseUint(s, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("line %d: %s %s: want a number, got %q", line, name, netDevFields[i], s)
			}
			v[i] = n
		}
		out = append(out, Iface{Name: name, RxBytes: v[0], RxPackets: v[1], TxBytes: v[8], TxPackets: v[9]})
	}
	return out, sc.Err()
}

// Counters are interface counters summed over the interfaces in Ifaces.
type Counters struct {
	RxBytes, RxPackets uint64
	TxBytes, TxPackets uint64
	Ifaces             []string // the interfaces counted, in /proc/net/dev order
}

// ExcludeLoopback is ReadNet's default exclusion: the loopback interface "lo".
func ExcludeLoopback(name string) bool { return name == "lo" }

// ReadNet reads <root>/proc/net/dev and sums the interfaces for which exclude returns
// false (exclude nil means ExcludeLoopback).
func ReadNet(h hostfs.FS, exclude func(name string) bool) (Counters, error) {
	if exclude == nil {
		exclude = ExcludeLoopback
	}
	const file = "/proc/net/dev"
	b, err := os.ReadFile(h.Path(file))
	if err != nil {
		return Counters{}, fmt.Errorf("netstat: %w", err)
	}
	ifs, err := parseNetDev(bytes.NewReader(b))
	if err != nil {
		return Counters{}, fmt.Errorf("netstat: %s: %w", file, err)
	}
	var c Counters
	for _, i := range ifs {
		if exclude(i.Name) {
			continue
		}
		c.RxBytes += i.RxBytes
		c.RxPackets += i.RxPackets
		c.TxBytes += i.TxBytes
		c.TxPackets += i.TxPackets
		c.Ifaces = append(c.Ifaces, i.Name)
	}
	return c, nil
}

// IBPort is one InfiniBand port's counters. Data counters are in bytes (the kernel's
// 4-byte words times 4).
type IBPort struct {
	Device                  string // e.g. mlx5_0
	Port                    int
	XmitBytes, RcvBytes     uint64
	XmitPackets, RcvPackets uint64
	Saturated               bool   // a 32-bit counter stopped at 2^32-1: the values are not measured
	Missing                 string // why the counters could not be read; "" if they were
}

// Saturation value of the 32-bit PortCounters.
const sat32 = 1<<32 - 1

// ibCounters are the files read per port, in IBPort field order.
var ibCounters = [4]string{"port_xmit_data", "port_rcv_data", "port_xmit_packets", "port_rcv_packets"}

const infinibandClass = "/sys/class/infiniband"

// ReadInfiniBand reads the counters of every port of every device in
// <root>/sys/class/infiniband, sorted by device and port. A node without that directory
// has no InfiniBand: nil, nil. A port whose counters are absent or not available ("N/A
// (no PMA)") has Missing set; unreadable or malformed counters are returned as errors
// (joined, naming the file), with the other ports.
func ReadInfiniBand(h hostfs.FS) ([]IBPort, error) {
	devs, err := os.ReadDir(h.Path(infinibandClass))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("netstat: %w", err)
	}
	out := []IBPort{}
	var errs []error
	for _, d := range devs { // sorted by name; entries are symlinks to the devices
		portsDir := filepath.Join(infinibandClass, d.Name(), "ports")
		ents, err := os.ReadDir(h.Path(portsDir))
		if err != nil {
			if !errors.Is(err, fs.ErrNotExist) { // a device being removed has none
				errs = append(errs, fmt.Errorf("netstat: %w", err))
			}
			continue
		}
		var ports []int
		for _, e := range ents {
			if n, err := strconv.Atoi(e.Name()); err == nil && n >= 0 {
				ports = append(ports, n)
			}
		}
		slices.Sort(ports)
		for _, n := range ports {
			p, err := readIBPort(h, d.Name(), filepath.Join(portsDir, strconv.Itoa(n), "counters"))
			p.Port = n
			if err != nil {
				errs = append(errs, err)
			}
			out = append(out, p)
		}
	}
	return out, errors.Join(errs...)
}

func readIBPort(h hostfs.FS, dev, dir string) (IBPort, error) {
	p := IBPort{Device: dev}
	var v [len(ibCounters)]uint64
	for i, name := range ibCounters {
		file := filepath.Join(dir, name)
		b, err := os.ReadFile(h.Path(file))
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.EOPNOTSUPP) {
				// absent, or the driver cannot query it
				p.Missing = file + ": " + errText(err)
				return p, nil
			}
			p.Missing = file + ": unreadable"
			return p, fmt.Errorf("netstat: %w", err)
		}
		s := strings.TrimSpace(string(b))
		if strings.HasPrefix(s, "N/A") { // "N/A (no PMA)": no performance management agent
			p.Missing = file + ": " + s
			return p, nil
		}
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			p.Missing = file + ": malformed"
			return p, fmt.Errorf("netstat: %s: want a number, got %q", file, s)
		}
		if n == sat32 {
			p.Saturated = true
		}
		v[i] = n
	}
	p.XmitBytes, p.RcvBytes = 4*v[0], 4*v[1]
	p.XmitPackets, p.RcvPackets = v[2], v[3]
	return p, nil
}

// errText is the reason part of an *fs.PathError ("no such file or directory").
func errText(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}
