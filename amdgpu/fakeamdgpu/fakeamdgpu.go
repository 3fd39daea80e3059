// Package fakeamdgpu builds a FAKE amdgpu sysfs tree under a directory, for the tests of
// machines without an AMD GPU (none here has one): cards with their PCI devices, render
// nodes, hwmon power and energy, RAS counts and gpu_metrics, and the KFD's topology and
// per-process files, laid out as the kernel's documentation and drivers give them. Set
// changes what a card reads; Proc what the KFD lists.
package fakeamdgpu

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/persyst/persyst/amdgpu"
)

// Card is a fake card.
type Card struct {
	Bus       string // PCI address, "0000:c1:00.0"
	Render    int    // renderD minor (128, 129, ...)
	GPUID     uint64 // the KFD's gpu_id (0: the KFD does not list the card)
	Name      string // product_name ("": none)
	VRAM      uint64 // bytes
	Partition string // current_compute_partition ("": none)
	// PowerInput: hwmon gives power1_input (MI300), else power1_average (MI200).
	PowerInput bool
	// Metrics is the gpu_metrics content revision written (format 1; 0: no file): its
	// energy accumulator, and its throttle status (v1.3) or residencies (v1.6, v1.7).
	Metrics int
	// NoRAS: the driver gives no RAS counts.
	NoRAS bool
	// Partitions, above 1, lays the card out in that many compute partitions (an MI300
	// in CPX mode, Partition "CPX"): a KFD node each (gpu_id GPUID+k, drm_render_minor
	// Render+k, its share of VRAM), partition 0 on the card's render node, the others'
	// on the driver's platform devices (amdgpu_xcp.N, no driver of their own).
	Partitions int
}

// State is what a card reads now.
type State struct {
	Busy     int     // percent
	VRAMUsed uint64  // bytes
	Watts    float64 // power now
	Joules   float64 // the energy counter (gpu_metrics)
	// Thermal and PowerCapped: held back now (v1.3); the residency counters (v1.6 on):
	// the ticks so far, and those held back by the power limit and by heat.
	Thermal, PowerCapped            bool
	Ticks, PowerTicks, ThermalTicks uint32
	Uncorrectable                   uint64
	// PartitionBusy is each compute partition's busy share (percent, gpu_metrics v1.6 on).
	PartitionBusy []int
}

// Tree is a fake sysfs tree.
type Tree struct {
	root  string
	cards []Card
	nodes int // KFD topology nodes made after the CPU's
	xcps  int // partition devices made (amdgpu_xcp.N)
}

// Sys is the tree's sysfs (root/sys): what amdgpu reads, and persyst.conf's AMDGPUSysfs.
func (t *Tree) Sys() string { return filepath.Join(t.root, "sys") }

// New lays out the cards under root (the host's "/": root/sys/...), each at a zero State.
func New(root string, cards ...Card) (*Tree, error) {
	t := &Tree{root: root, cards: cards}
	drivers := filepath.Join(root, "sys/bus/pci/drivers/amdgpu")
	if err := os.MkdirAll(drivers, 0o755); err != nil {
		return nil, err
	}
	topo := filepath.Join(root, "sys/class/kfd/kfd/topology/nodes")
	// Node 0 is the CPU's (gpu_id 0), as on every node with the KFD.
	if err := writeFiles(filepath.Join(topo, "0"), map[string]string{"gpu_id": "0", "properties": "cpu_cores_count 64\nsimd_count 0\n"}); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(root, "sys/class/kfd/kfd/proc"), 0o755); err != nil {
		return nil, err
	}
	for i, c := range cards {
		dev := t.device(i)
		if err := os.MkdirAll(dev, 0o755); err != nil {
			return nil, err
		}
		if err := os.Symlink(drivers, filepath.Join(dev, "driver")); err != nil {
			return nil, err
		}
		files := map[string]string{"mem_info_vram_total": strconv.FormatUint(c.VRAM, 10)}
		if c.Name != "" {
			files["product_name"] = c.Name
		}
		if c.Partition != "" {
			files["current_compute_partition"] = c.Partition
		}
		if err := writeFiles(dev, files); err != nil {
			return nil, err
		}
		for _, entry := range []string{"card" + strconv.Itoa(i+1), "renderD" + strconv.Itoa(c.Render)} {
			d := filepath.Join(root, "sys/class/drm", entry)
			if err := os.MkdirAll(d, 0o755); err != nil {
				return nil, err
			}
			if err := os.Symlink(dev, filepath.Join(d, "device")); err != nil {
				return nil, err
			}
		}
		if err := t.kfd(topo, c); err != nil {
			return nil, err
		}
		if err := t.Set(i, State{}); err != nil {
			return nil, err
		}
	}
	return t, nil
}

// kfd lays out card c's KFD topology nodes (none without a GPUID): one, or one per
// compute partition, each partition after the first with its render node on a platform
// device of the driver's.
func (t *Tree) kfd(topo string, c Card) error {
	if c.GPUID == 0 {
		return nil
	}
	parts := max(c.Partitions, 1)
	for k := range parts {
		props, err := properties(c.Bus, k, c.Render+k)
		if err != nil {
			return err
		}
		t.nodes++
		dir := filepath.Join(topo, strconv.Itoa(t.nodes))
		files := map[string]string{"gpu_id": strconv.FormatUint(c.GPUID+uint64(k), 10), "properties": props}
		if err := writeFiles(dir, files); err != nil {
			return err
		}
		bank := fmt.Sprintf("heap_type 1\nsize_in_bytes %d\n", c.VRAM/uint64(parts))
		if err := writeFiles(filepath.Join(dir, "mem_banks", "0"), map[string]string{"properties": bank}); err != nil {
			return err
		}
		if k == 0 {
			continue
		}
		xcp := filepath.Join(t.root, "sys/devices/platform", "amdgpu_xcp."+strconv.Itoa(t.xcps))
		t.xcps++
		if err := os.MkdirAll(xcp, 0o755); err != nil {
			return err
		}
		for _, entry := range []string{"card" + strconv.Itoa(100+t.xcps), "renderD" + strconv.Itoa(c.Render+k)} {
			d := filepath.Join(t.root, "sys/class/drm", entry)
			if err := os.MkdirAll(d, 0o755); err != nil {
				return err
			}
			if err := os.Symlink(xcp, filepath.Join(d, "device")); err != nil {
				return err
			}
		}
	}
	return nil
}

// device is card i's PCI device directory.
func (t *Tree) device(i int) string {
	return filepath.Join(t.root, "sys/devices/pci0000:00", t.cards[i].Bus)
}

// properties is a KFD topology node's properties for partition k of a card at bus (0:
// the whole card), whose render node's minor is render: the kernel puts the partition's
// number in location_id's function bits.
func properties(bus string, k, render int) (string, error) {
	var domain, b, dev, fn uint64
	if _, err := fmt.Sscanf(bus, "%x:%x:%x.%x", &domain, &b, &dev, &fn); err != nil {
		return "", fmt.Errorf("fakeamdgpu: bus %q: %w", bus, err)
	}
	return fmt.Sprintf("cpu_cores_count 0\nsimd_count 440\nlocation_id %d\ndomain %d\ndrm_render_minor %d\n", b<<8|dev<<3|(fn|uint64(k)), domain, render), nil
}

// Set makes card i read st.
func (t *Tree) Set(i int, st State) error {
	c := t.cards[i]
	dev := t.device(i)
	files := map[string]string{
		"gpu_busy_percent":   strconv.Itoa(st.Busy),
		"mem_info_vram_used": strconv.FormatUint(st.VRAMUsed, 10),
	}
	power := "power1_average"
	if c.PowerInput {
		power = "power1_input"
	}
	hw := map[string]string{power: strconv.FormatUint(uint64(st.Watts*1e6), 10)}
	if err := writeFiles(filepath.Join(dev, "hwmon", "hwmon"+strconv.Itoa(i+2)), hw); err != nil {
		return err
	}
	if !c.NoRAS {
		ras := map[string]string{
			"umc_err_count": fmt.Sprintf("ue: %d\nce: 0\n", st.Uncorrectable),
			"gfx_err_count": "ue: 0\nce: 0\n",
		}
		if err := writeFiles(filepath.Join(dev, "ras"), ras); err != nil {
			return err
		}
	}
	if c.Metrics > 0 {
		xcp := map[int]float64{}
		for k, busy := range st.PartitionBusy {
			xcp[k] = float64(busy)
		}
		b, err := amdgpu.EncodeMetrics(c.Metrics, amdgpu.Metrics{Joules: st.Joules, HasEnergy: true,
			HasThrottle: true, Thermal: st.Thermal, PowerCapped: st.PowerCapped,
			HasResidency: true, Ticks: st.Ticks, PowerResidency: st.PowerTicks, ThermalResidency: st.ThermalTicks, XCPBusy: xcp})
		if err != nil {
			return err
		}
		files["gpu_metrics"] = string(b)
	}
	return writeFiles(dev, files)
}

// Proc makes the KFD list process pid with the VRAM it holds on each card (by gpu_id);
// no cards: the process ended.
func (t *Tree) Proc(pid int, vram map[uint64]uint64) error {
	dir := filepath.Join(t.root, "sys/class/kfd/kfd/proc", strconv.Itoa(pid))
	if len(vram) == 0 {
		return os.RemoveAll(dir)
	}
	files := map[string]string{"pasid": strconv.Itoa(32768 + pid%1000)}
	for id, b := range vram {
		files["vram_"+strconv.FormatUint(id, 10)] = strconv.FormatUint(b, 10)
	}
	return writeFiles(dir, files)
}

// writeFiles writes each file of dir (made if need be), each whole or not at all.
func writeFiles(dir string, files map[string]string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for name, content := range files {
		if !strings.HasSuffix(content, "\n") && name != "gpu_metrics" {
			content += "\n"
		}
		tmp := filepath.Join(dir, "."+name+".tmp")
		if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
			return err
		}
		if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
			return err
		}
	}
	return nil
}
