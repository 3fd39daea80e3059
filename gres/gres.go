// Package gres says which device a job's GPU is: Slurm gives a job's GPUs as GRES indices
// (SLURM_JOB_GPUS), numbered in an order of its own. Without AutoDetect, by the types in
// the node's slurm.conf Gres= and then the gres.conf lines; with AutoDetect=nvml or rsmi,
// the GPUs the library found first, in its order, the others after by file name. Rather
// than rebuild that order, persyst asks Slurm: `slurmd -G` prints the node's GRES as
// slurmd loads them, in the order their indices are given (every release since 22.05
// prints each record's File= there). Each index's device file, its character device
// numbers read with stat, names the GPU: NVIDIA's /dev/nvidiaN (major 195, minor N), an
// AMD GPU's render node /dev/dri/renderD<M> (the DRM's major 226, M from 128).
//
// Parse is pure; Resolve reads the device files through a hostfs.FS; Order runs slurmd.
package gres

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/persyst/persyst/jobmap"
)

// Kind is what a GPU's device node is.
type Kind string

const (
	// NVIDIA is a /dev/nvidiaN: Minor is N, what NVML calls the GPU's minor number.
	NVIDIA Kind = "nvidia"
	// AMD is a DRM render node /dev/dri/renderD<M>: Minor is M, the amdgpu card's.
	AMD Kind = "amd"
)

// GPU is one GRES index of the node's GPUs.
type GPU struct {
	Index int
	Type  string   // the GRES type ("a100", "mi250"; "" where none)
	Files []string // its device files as Slurm names them (several: MultipleFiles)
	// Kind and Minor name the device, once Resolve found exactly one GPU's device node
	// among Files (Kind ""; a MIG instance's files, or files that are not there).
	Kind  Kind
	Minor uint32
	Why   string // why Kind is "", after Resolve
}

// Limits on what slurmd's output may make Parse keep.
const (
	MaxGPUs   = 1024
	maxLine   = 64 << 10
	maxOutput = 1 << 20
)

// Parse reads the GPU records slurmd -G prints ("Gres Name=gpu Type=… Count=… File=…",
// after whatever a log line begins with) and numbers their devices as Slurm does: a
// record of Count files is that many indices, one per file in the order written; a
// record of one GPU with several files (MultipleFiles) one index. Other GRES (shard,
// mps, nic) are not GPUs. A record that is neither is an error: the indices after it
// could not be known.
func Parse(r io.Reader) ([]GPU, error) {
	sc := bufio.NewScanner(io.LimitReader(r, maxOutput))
	sc.Buffer(make([]byte, 0, 4096), maxLine)
	var out []GPU
	line := 0
	for sc.Scan() {
		line++
		text := sc.Text()
		at := strings.Index(text, "Gres Name=")
		if at < 0 {
			continue
		}
		kv := map[string]string{}
		for _, f := range strings.Fields(text[at+len("Gres "):]) {
			if k, v, ok := strings.Cut(f, "="); ok {
				kv[k] = v
			}
		}
		if kv["Name"] != "gpu" {
			continue
		}
		if kv["File"] == "" {
			continue // Slurm drops a GPU without a file
		}
		count, err := strconv.ParseUint(kv["Count"], 10, 32)
		if err != nil {
			return nil, fmt.Errorf("slurmd -G, line %d: Count %q: not a count", line, kv["Count"])
		}
		files, err := jobmap.ExpandHostlist(kv["File"])
		if err != nil {
			return nil, fmt.Errorf("slurmd -G, line %d: File %q: %w", line, kv["File"], err)
		}
		typ := kv["Type"]
		if typ == "(null)" {
			typ = ""
		}
		var gpus [][]string
		switch {
		case int(count) == len(files):
			for _, f := range files {
				gpus = append(gpus, []string{f})
			}
		case count == 1:
			gpus = [][]string{files}
		default:
			return nil, fmt.Errorf("slurmd -G, line %d: %d GPUs in %d files (%s): which index is which is not known", line, count, len(files), kv["File"])
		}
		for _, f := range gpus {
			if len(out) >= MaxGPUs {
				return nil, fmt.Errorf("slurmd -G: more than %d GPUs", MaxGPUs)
			}
			out = append(out, GPU{Index: len(out), Type: typ, Files: f})
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("slurmd -G, line %d: %w", line+1, err)
	}
	return out, nil
}

// Device numbers of GPUs' device nodes (the kernel's devices.txt, the NVIDIA driver's
// fixed major).
const (
	nvidiaMajor = 195
	nvidiaCtl   = 254 // 254 nvidia-modeset, 255 nvidiactl: not GPUs
	drmMajor    = 226
	drmRender   = 128 // render nodes' minors start here; below: primary nodes (card0)
)

// ErrNotDevice is a GRES file that is not a character device.
var ErrNotDevice = errors.New("not a character device")

// Stat gives a file's character device numbers (ErrNotDevice for another file).
type Stat func(path string) (major, minor uint32, err error)

// Resolve names each GPU's device from its files' device numbers: exactly one GPU's
// device node (a render node may come with its card's primary node) names it; anything
// else leaves it unnamed, with why.
func Resolve(gpus []GPU, stat Stat) {
	for i := range gpus {
		g := &gpus[i]
		g.Kind, g.Minor, g.Why = "", 0, ""
		var found int
		for _, f := range g.Files {
			major, minor, err := stat(f)
			switch {
			case err != nil:
				g.Why = fmt.Sprintf("%s: %v", f, err)
			case major == nvidiaMajor && minor < nvidiaCtl:
				g.Kind, g.Minor = NVIDIA, minor
				found++
			case major == drmMajor && minor >= drmRender:
				g.Kind, g.Minor = AMD, minor
				found++
			case major == drmMajor:
				continue // the card's primary node, beside its render node
			default:
				g.Why = fmt.Sprintf("%s: device %d:%d is not a GPU's device node", f, major, minor)
			}
		}
		if g.Why == "" && found != 1 {
			g.Why = fmt.Sprintf("%d GPU devices among %s", found, strings.Join(g.Files, ","))
		}
		if g.Why != "" {
			g.Kind, g.Minor = "", 0
		}
	}
}

// ID is how a job's spec names the GPU (package measure's GPU names): "minor:N" for
// NVIDIA's, "render:M" for AMD's; "" where the GPU was not resolved.
func (g GPU) ID() string {
	switch g.Kind {
	case NVIDIA:
		return "minor:" + strconv.FormatUint(uint64(g.Minor), 10)
	case AMD:
		return "render:" + strconv.FormatUint(uint64(g.Minor), 10)
	}
	return ""
}
