package perfcg

import (
	"github.com/persyst/persyst/hostfs"
	"github.com/persyst/persyst/perfevents"
)

// NodeCatalog is the catalog plus the raw events of this node's processor, read from
// the root's proc/cpuinfo (none if it cannot be read or the processor is not in a table).
func NodeCatalog(h hostfs.FS) (events []perfevents.Event, arch string) {
	events = perfevents.Catalog()
	if info, err := h.CPUInfo(); err == nil {
		var raw []perfevents.Event
		arch, raw = perfevents.RawEvents(perfevents.CPUID{Vendor: info.Vendor, Family: info.Family, Model: info.Model})
		events = append(events, raw...)
	}
	return events, arch
}
