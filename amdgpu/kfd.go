package amdgpu

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// The KFD (the kernel's compute driver that ROCm programs open, /dev/kfd) lists its GPUs
// as topology nodes and each process that uses one under proc/<pid>, with the VRAM it
// holds on each GPU: what says whose processes a GPU runs, without rocm-smi.
const kfd = "class/kfd/kfd"

// kfdNode is one of the KFD's GPU nodes: a card, or one compute partition of a card
// (an MI300 in CPX mode has one node per partition, its own gpu_id and render node).
type kfdNode struct {
	gpuID  uint64
	card   string // the card's PCI address without its function ("0000:c1:00")
	xcp    int    // the partition's number on its card (the node's in location_id)
	render int    // drm_render_minor (-1: not given)
	vram   uint64 // its memory bank's size (a partition's share of the card's; 0: not given)
}

// kfdNodes lists the KFD's GPU nodes by card (none where the KFD is not there), each
// card's by partition.
func (s *Sysfs) kfdNodes() map[string][]kfdNode {
	out := map[string][]kfdNode{}
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
		card, xcp, ok := kfdLocation(props)
		if !ok {
			continue
		}
		node := kfdNode{gpuID: id, card: card, xcp: xcp, render: -1}
		if r, ok := props["drm_render_minor"]; ok && r > 0 {
			node.render = int(r)
		}
		if b, err := s.fs.ReadFile(dir, "mem_banks", "0", "properties"); err == nil {
			if mp, err := ParseProperties(bytes.NewReader(b)); err == nil {
				node.vram = mp["size_in_bytes"]
			}
		}
		out[card] = append(out[card], node)
	}
	for _, ns := range out {
		sort.Slice(ns, func(i, j int) bool { return ns[i].xcp < ns[j].xcp })
	}
	return out
}

// kfdLocation is the card a KFD node's properties give (location_id: bus << 8 | device
// << 3 | function; domain) and its partition's number: the kernel puts a partition's in
// the function bits (or, in a variant it reverted, in bits 28-31), so a partitioned
// card's nodes all give their card's bus and device.
func kfdLocation(props map[string]uint64) (card string, xcp int, ok bool) {
	loc, ok := props["location_id"]
	if !ok {
		return "", 0, false
	}
	xcp = int(loc >> 28 & 0xf)
	if xcp == 0 {
		xcp = int(loc & 0x7)
	}
	loc &= 0xffff
	return fmt.Sprintf("%04x:%02x:%02x", props["domain"], loc>>8&0xff, loc>>3&0x1f), xcp, true
}

// cardKey is a PCI address without its function ("0000:c1:00.0" → "0000:c1:00").
func cardKey(bus string) string {
	if i := strings.LastIndexByte(bus, '.'); i > 0 {
		return bus[:i]
	}
	return bus
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
