// Package amdgpu reads AMD GPUs (Instinct MI210, MI250X, MI300A/X) through the amdgpu
// driver's sysfs files, with no library: what the kernel gives every node that has the
// driver loaded. A card is found under class/drm with the amdgpu driver; its render node
// (/dev/dri/renderD*, what Slurm's gres.conf names) and its PCI address tie it to a
// job's GRES and to the KFD's per-process files (Processes), which say whose processes
// use it.
//
// Every read takes a hostfs.FS rooted at the kernel's sysfs: /sys on a node (where a
// daemon in a container sees the host's elsewhere, persyst.conf's AMDGPUSysfs), a fake
// tree in tests (fakeamdgpu). The parsers take an io.Reader or bytes and are pure.
package amdgpu

import (
	"bytes"
	"cmp"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/persyst/persyst/hostfs"
)

// Device is an amdgpu card as the driver presents it.
type Device struct {
	Card   string // "card1"
	Bus    string // PCI address, "0000:c1:00.0"
	Render int    // its render node's minor (renderD128 is 128); -1: none found
	Name   string // the product name, where the driver gives one
	VRAM   uint64 // bytes (mem_info_vram_total); 0: not given
	// Partition is the compute partition mode where the GPU is partitioned ("SPX",
	// "DPX", "CPX": current_compute_partition); "" where it gives none.
	Partition string
	// GPUIDs are the KFD's ids of the GPU (its topology node's gpu_id; none: not found),
	// which name it in the per-process files.
	GPUIDs []uint64
	// XCP is, on a card in compute partitions (an MI300 in CPX or DPX mode: each its own
	// KFD node and render node, what a job is given), the partition's number, of
	// Partitions; -1 for a whole card. A partition's busy share is its own (gpu_metrics'
	// xcp_stats), its memory its processes' (the KFD's), its power the card's: not its.
	XCP        int
	Partitions int
	hwmon      string // its hwmon directory under the root ("": none)
}

// Sysfs reads the node's amdgpu devices in a sysfs.
type Sysfs struct{ fs hostfs.FS }

// New returns a reader of the devices in the sysfs at sys's root ("/sys" on a node).
func New(sys hostfs.FS) *Sysfs { return &Sysfs{fs: sys} }

const drm = "class/drm"

// Devices lists the amdgpu cards, by PCI address. A card whose files cannot be read is
// left out with why in the error (the others are returned).
func (s *Sysfs) Devices() ([]Device, error) {
	ents, err := os.ReadDir(s.fs.Path(drm))
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("amdgpu: %w", err)
	}
	renders := map[string]int{}
	var cards []string
	for _, e := range ents {
		name := e.Name()
		switch {
		case strings.HasPrefix(name, "renderD"):
			if minor, err := strconv.Atoi(strings.TrimPrefix(name, "renderD")); err == nil {
				if bus := s.bus(name); bus != "" {
					renders[bus] = minor
				}
			}
		case strings.HasPrefix(name, "card") && !strings.Contains(name, "-"): // not card1-DP-1
			cards = append(cards, name)
		}
	}
	nodes := s.kfdNodes()
	var out []Device
	var errs []string
	for _, c := range cards {
		if s.driver(c) != "amdgpu" {
			continue
		}
		d, err := s.device(c)
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		d.Render, d.XCP = -1, -1
		if m, ok := renders[d.Bus]; ok {
			d.Render = m
		}
		ns := nodes[cardKey(d.Bus)]
		if len(ns) > 1 {
			out = append(out, partitions(d, ns)...)
			continue
		}
		for _, n := range ns {
			d.GPUIDs = append(d.GPUIDs, n.gpuID)
		}
		out = append(out, d)
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Bus != out[j].Bus {
			return out[i].Bus < out[j].Bus
		}
		return out[i].XCP < out[j].XCP
	})
	if len(errs) > 0 {
		return out, fmt.Errorf("amdgpu: %s", strings.Join(errs, "; "))
	}
	return out, nil
}

// partitions are a card's compute partitions, one device each, as the KFD lists them:
// each its render node and gpu_id, its share of the card's memory.
func partitions(card Device, ns []kfdNode) []Device {
	out := make([]Device, 0, len(ns))
	for _, n := range ns {
		d := card
		d.XCP, d.Partitions, d.GPUIDs, d.Render = n.xcp, len(ns), []uint64{n.gpuID}, n.render
		d.VRAM = n.vram
		if d.VRAM == 0 && card.VRAM > 0 {
			d.VRAM = card.VRAM / uint64(len(ns))
		}
		d.Name = strings.TrimSpace(cmp.Or(card.Name, "AMD GPU") + " " + card.Partition + " partition")
		out = append(out, d)
	}
	return out
}

// bus is the PCI address of a drm entry's device ("" : none).
func (s *Sysfs) bus(entry string) string {
	target, err := filepath.EvalSymlinks(s.fs.Path(drm, entry, "device"))
	if err != nil {
		return ""
	}
	return filepath.Base(target)
}

// driver is the name of the driver bound to a card's device.
func (s *Sysfs) driver(card string) string {
	target, err := os.Readlink(s.fs.Path(drm, card, "device", "driver"))
	if err != nil {
		return ""
	}
	return filepath.Base(target)
}

// device reads what a card's device directory says once.
func (s *Sysfs) device(card string) (Device, error) {
	d := Device{Card: card, Bus: s.bus(card)}
	if d.Bus == "" {
		return d, fmt.Errorf("%s: no PCI device", s.fs.Path(drm, card))
	}
	dir := filepath.Join(drm, card, "device")
	if v, err := s.uintFile(dir, "mem_info_vram_total"); err == nil {
		d.VRAM = v
	}
	if b, err := s.fs.ReadString(dir, "product_name"); err == nil {
		d.Name = clean(b)
	}
	if b, err := s.fs.ReadString(dir, "current_compute_partition"); err == nil {
		d.Partition = clean(b)
	}
	if hw, err := filepath.Glob(s.fs.Path(dir, "hwmon", "hwmon*")); err == nil && len(hw) > 0 {
		sort.Strings(hw)
		d.hwmon = s.fs.Rel(hw[0])
	}
	return d, nil
}

// uintFile reads a file of one unsigned integer under the root; the error names it.
func (s *Sysfs) uintFile(elem ...string) (uint64, error) {
	b, err := s.fs.ReadFile(elem...)
	if err != nil {
		return 0, err
	}
	v, err := ParseUint(bytes.NewReader(b))
	if err != nil {
		return 0, fmt.Errorf("%s: %w", s.fs.Path(elem...), err)
	}
	return v, nil
}

// clean keeps a short, printable name from a sysfs file.
func clean(s string) string {
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return -1
		}
		return r
	}, strings.TrimSpace(s))
	if len(s) > 64 {
		s = s[:64]
	}
	return s
}
