package amdgpu

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// The KFD (the kernel's compute driver that ROCm programs open, /dev/kfd) lists its GPUs
// as topology nodes and each process that uses one under proc/<pid>, with the VRAM it
// holds on each GPU: what says whose processes a GPU runs, without rocm-smi.
const kfd = "class/kfd/kfd"

// kfdGPUs maps the KFD's GPUs' PCI addresses to their gpu_ids (one per compute
// partition; none where the KFD is not there).
func (s *Sysfs) kfdGPUs() map[string][]uint64 {
	out := map[string][]uint64{}
	nodes, err := os.ReadDir(s.fs.Path(kfd, "topology", "nodes"))
	if err != nil {
		return out
	}
	for _, n := range nodes {
		dir := filepath.Join(kfd, "topology", "nodes", n.Name())
		id, err := s.uintFile(dir, "gpu_id")
		if err != nil || id == 0 { // 0: a CPU node
			continue
		}
		b, err := s.fs.ReadFile(dir, "properties")
		if err != nil {
			continue
		}
		props, err := ParseProperties(bytes.NewReader(b))
		if err != nil {
			continue
		}
		if bus, ok := pciAddress(props); ok {
			out[bus] = append(out[bus], id)
		}
	}
	return out
}

// pciAddress is the PCI address a KFD node's properties give (location_id: bus << 8 |
// device << 3 | function, with a partition's number in its high bits; domain): a
// partitioned GPU's nodes all give their GPU's.
func pciAddress(props map[string]uint64) (string, bool) {
	loc, ok := props["location_id"]
	if !ok {
		return "", false
	}
	loc &= 0xffff
	return fmt.Sprintf("%04x:%02x:%02x.%x", props["domain"], loc>>8&0xff, loc>>3&0x1f, loc&0x7), true
}

// Proc is a process the KFD lists, with the VRAM it holds on each GPU it opened (by
// gpu_id).
type Proc struct {
	PID  int
	VRAM map[uint64]uint64
}

// maxProcs bounds the processes read in one listing.
const maxProcs = 4096

// Processes lists the processes using the KFD's GPUs. ok is false where the KFD lists
// none because it is not there (no compute driver: nothing says whose processes a GPU
// runs).
func (s *Sysfs) Processes() (procs []Proc, ok bool, err error) {
	ents, err := os.ReadDir(s.fs.Path(kfd, "proc"))
	if os.IsNotExist(err) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("amdgpu: %w", err)
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 0 {
			continue
		}
		if len(procs) == maxProcs {
			return procs, true, fmt.Errorf("amdgpu: more than %d processes under %s", maxProcs, s.fs.Path(kfd, "proc"))
		}
		p := Proc{PID: pid, VRAM: map[uint64]uint64{}}
		files, err := os.ReadDir(s.fs.Path(kfd, "proc", e.Name()))
		if err != nil {
			continue // it ended
		}
		for _, f := range files {
			id, found := strings.CutPrefix(f.Name(), "vram_")
			if !found {
				continue
			}
			gpu, err := strconv.ParseUint(id, 10, 64)
			if err != nil {
				continue
			}
			v, err := s.uintFile(kfd, "proc", e.Name(), f.Name())
			if err != nil {
				continue
			}
			p.VRAM[gpu] = v
		}
		procs = append(procs, p)
	}
	return procs, true, nil
}
