package properties

import (
	"os"
	"strings"
	"testing"
)

func TestDefaultCatalogAndStrategy(t *testing.T) {
	c, err := DefaultCatalog()
	if err != nil {
		t.Fatal(err)
	}
	s, err := DefaultStrategy(c)
	if err != nil {
		t.Fatal(err)
	}
	// Every catalog property is reachable from the default strategy.
	in := map[string]bool{}
	for _, p := range s.Properties() {
		in[p.Key()] = true
	}
	for _, k := range c.Keys() {
		if !in[k] {
			t.Errorf("%s is in the catalog but not in the default strategy", k)
		}
	}
	// The ids the issue names are all there.
	for _, id := range strings.Fields(`cpu_user_pct cpu_system_pct io_wait intra_node_imbalance inter_node_imbalance
		idle_cores memory_used memory_growth memory_unused major_fault_rate cpu_throttled oom_events io_read_bw
		io_write_bw io_read_request_size io_write_request_size file_open_rate file_close_rate net_xmit_bw net_rcvd_bw
		net_xmit_bytes_per_packet net_rcvd_bytes_per_packet flops_rate vector_ratio sp_dp_ratio instruction_rate cpi
		branch_miss_per_instr branch_miss_ratio llc_miss_per_instr llc_hit_miss_ratio loads_to_stores
		memory_bw:memory_bound memory_bw:compute_bound core_frequency`) {
		if _, ok := c.Get(id); !ok {
			t.Errorf("catalog lacks %s", id)
		}
	}
}

// TestDocsListEveryProperty keeps docs/properties.md in step with the catalog.
func TestDocsListEveryProperty(t *testing.T) {
	b, err := os.ReadFile("../docs/properties.md")
	if err != nil {
		t.Fatal(err)
	}
	c, _ := DefaultCatalog()
	for _, k := range c.Keys() {
		if !strings.Contains(string(b), "| `"+k+"` |") {
			t.Errorf("docs/properties.md does not list %s", k)
		}
	}
}

func TestLoadErrors(t *testing.T) {
	dir := t.TempDir()
	bad := dir + "/site.strategy"
	os.WriteFile(bad, []byte("cpu_user_pct\n    idle_cores\n    no_such_thing\n"), 0o644)
	if _, err := Load(Settings{StrategyFile: bad}); err == nil || !strings.Contains(err.Error(), bad+":3: unknown property \"no_such_thing\"") {
		t.Errorf("bad strategy file: %v", err)
	}
	if _, err := Load(Settings{StrategyFile: dir + "/missing"}); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Errorf("missing strategy file: %v", err)
	}
	if err := CheckThresholds("/etc/slurm/persyst.conf", map[string]int{"cpi": 3, "cpu_usr_pct": 7, "memory_bw": 9}); err == nil ||
		err.Error() != "/etc/slurm/persyst.conf:7: Threshold.cpu_usr_pct: no such property (see docs/properties.md)" {
		t.Errorf("CheckThresholds: %v", err)
	}
	good := dir + "/ok.strategy"
	os.WriteFile(good, []byte("io_write_bw\n  io_write_request_size\n"), 0o644)
	e, err := Load(Settings{StrategyFile: good, Thresholds: map[string]float64{"io_write_request_size": 1 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	c, _ := DefaultCatalog()
	p, _ := c.Get("io_write_request_size")
	if v, ok := e.Threshold(p); !ok || v != 1<<20 {
		t.Errorf("overridden threshold %v %v", v, ok)
	}
}
