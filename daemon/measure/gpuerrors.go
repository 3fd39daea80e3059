package measure

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
)

// GPUErrors counts the hardware errors the NVIDIA driver reported in the kernel's log
// (Xid) per GPU, by PCI address: the daemon's kernel-log reader adds them, a GPU job's
// source takes the increase on its GPUs. One resource, its lock.
type GPUErrors struct {
	mu        sync.Mutex
	n         map[string]float64
	following bool // the kernel's log is followed: a count of 0 means none
}

// Following records that the kernel's log is followed from now on.
func (e *GPUErrors) Following() {
	if e == nil {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.following = true
}

// maxGPUErrorBuses bounds the addresses kept (a node has a few GPUs; the kernel alone
// writes these records).
const maxGPUErrorBuses = 256

// Add counts one error on the GPU at bus (as the driver writes it, "0000:3b:00").
func (e *GPUErrors) Add(bus string) {
	if e == nil {
		return
	}
	k := gpuBusKey(bus)
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.n == nil {
		e.n = map[string]float64{}
	}
	if _, ok := e.n[k]; ok || len(e.n) < maxGPUErrorBuses {
		e.n[k]++
	}
}

// Count is how many errors the GPU at bus reported so far; ok is false while the
// kernel's log is not followed (nothing is known).
func (e *GPUErrors) Count(bus string) (n float64, ok bool) {
	if e == nil {
		return 0, false
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.n[gpuBusKey(bus)], e.following
}

// gpuBusKey is a PCI address without its function, domain as a number: the driver's
// "0000:3b:00" and NVML's "00000000:3B:00.0" are one GPU.
func gpuBusKey(s string) string {
	s = strings.ToLower(strings.TrimSpace(s))
	if i := strings.LastIndexByte(s, '.'); i > strings.LastIndexByte(s, ':') {
		s = s[:i]
	}
	parts := strings.Split(s, ":")
	if len(parts) == 2 {
		parts = append([]string{"0"}, parts...)
	}
	if len(parts) != 3 {
		return s
	}
	dom, err := strconv.ParseUint(parts[0], 16, 32)
	if err != nil {
		return s
	}
	return fmt.Sprintf("%x:%s:%s", dom, parts[1], parts[2])
}
