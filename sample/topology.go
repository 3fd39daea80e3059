package sample

// CPUTopo says where a CPU sits: its core and socket (package), from sysfs. Core ids are
// unique only within a socket.
type CPUTopo struct {
	CPU    int `json:"cpu"`
	Core   int `json:"core"`
	Socket int `json:"socket"`
}

// Core identifies a physical core.
type Core struct{ Socket, Core int }

// PerCore adds per-CPU values up per physical core (hyperthreads share one), the "core"
// device level of PerSyst's properties.
func PerCore(values []CPUValues, topo []CPUTopo) map[Core]map[string]float64 {
	where := make(map[int]Core, len(topo))
	for _, t := range topo {
		where[t.CPU] = Core{t.Socket, t.Core}
	}
	out := map[Core]map[string]float64{}
	for _, v := range values {
		k, ok := where[v.CPU]
		if !ok {
			k = Core{0, v.CPU}
		}
		if out[k] == nil {
			out[k] = map[string]float64{}
		}
		for name, x := range v.Values {
			out[k][name] += x
		}
	}
	return out
}
