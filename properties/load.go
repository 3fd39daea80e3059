package properties

import (
	"encoding/json"

	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/persyst/persyst/config"
	"github.com/persyst/persyst/hostfs"
	"github.com/persyst/persyst/internal/syscost"
)

// Settings are what persyst.conf says about properties.
type Settings struct {
	StrategyFile string             // "" : the built-in strategy
	Thresholds   map[string]float64 // Threshold.<id>=
	MinSeconds   float64            // DigestMinSeconds
	Calibration  map[string]float64
}

// Load builds the engine from the built-in catalog, the strategy (built-in or the admin's
// file) and the settings. Every error names its source.
func Load(s Settings) (*Engine, error) {
	c, err := DefaultCatalog()
	if err != nil {
		return nil, err
	}
	var st *Strategy
	if s.StrategyFile != "" {
		st, err = LoadStrategy(s.StrategyFile, c)
	} else {
		st, err = DefaultStrategy(c)
	}
	if err != nil {
		return nil, err
	}
	return NewEngine(Config{Catalog: c, Strategy: st, Thresholds: s.Thresholds, Calibration: s.Calibration, MinSeconds: s.MinSeconds})
}

// Calibration is what `persyst calibrate` stores for a node type.
type Calibration struct {
	NodeType string             `json:"node_type"`
	Measured time.Time          `json:"measured"`
	Values   map[string]float64 `json:"values"` // calibration names (stream_bw_node, ...)
	Methods  map[string]string  `json:"methods,omitempty"`
}

var nodeTypeRE = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

// NodeType names a kind of node for calibration: the processor model and CPU count,
// e.g. "AMD_EPYC-2cpus".
func NodeType(model string, cpus int) string {
	m := strings.Trim(nodeTypeRE.ReplaceAllString(model, "_"), "_")
	if m == "" {
		m = "unknown"
	}
	return m + "-" + strconv.Itoa(cpus) + "cpus"
}

// CalibrationFile is where a node type's calibration lives in dir.
func CalibrationFile(dir, nodeType string) string {
	return filepath.Join(dir, nodeType+".json")
}

// LoadCalibration reads a node type's calibration; a missing file is not an error
// (nothing calibrated: properties with calibrated thresholds are not assessed).
func LoadCalibration(dir, nodeType string) (Calibration, error) {
	p := CalibrationFile(dir, nodeType)
	b, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return Calibration{NodeType: nodeType, Values: map[string]float64{}}, nil
	}
	if err != nil {
		return Calibration{}, fmt.Errorf("read %s: %w", p, err)
	}
	var c Calibration
	if err := json.Unmarshal(b, &c); err != nil {
		return Calibration{}, fmt.Errorf("read %s: %w", p, err)
	}
	known := map[string]bool{}
	for _, n := range calibrationNames {
		known[n] = true
	}
	for k, v := range c.Values {
		if !known[k] {
			return Calibration{}, fmt.Errorf("read %s: unknown value %q", p, k)
		}
		if !(v > 0) {
			return Calibration{}, fmt.Errorf("read %s: %s = %v, want a positive number", p, k, v)
		}
	}
	return c, nil
}

// NodeFacts reads what a node says about itself without a benchmark: memory size and the
// frequency range (cpufreq, absent in many VMs), as calibration values.
func NodeFacts(h hostfs.FS, cpus int) map[string]float64 {
	out := map[string]float64{}
	if cpus > 0 {
		out["cores"] = float64(cpus)
	}
	if m, err := h.MemInfo(); err == nil {
		out["mem_total_bytes"] = float64(m.Total)
	}
	for name, file := range map[string]string{"max_freq_hz": "cpuinfo_max_freq", "min_freq_hz": "cpuinfo_min_freq"} {
		if s, err := h.ReadString("sys/devices/system/cpu/cpu0/cpufreq", file); err == nil {
			if khz, err := strconv.ParseFloat(s, 64); err == nil && khz > 0 {
				out[name] = khz * 1000
			}
		}
	}
	return out
}

// NodeTypeOf names the node type of the host (NodeType of its processor model and
// online CPUs), as calibration stores it; a model that cannot be read is "unknown".
func NodeTypeOf(h hostfs.FS) (nodeType string, cpus int) {
	if online, err := h.OnlineCPUs(); err == nil {
		cpus = len(online)
	}
	info, _ := h.CPUInfo()
	return NodeType(info.Name, cpus), cpus
}

// LoadForNode is Load with this node's calibration: the node's own facts (NodeFacts),
// overlaid with what `persyst calibrate` stored for its node type in calDir.
func LoadForNode(h hostfs.FS, calDir string, s Settings) (*Engine, Calibration, error) {
	nodeType, cpus := NodeTypeOf(h)
	cal, err := LoadCalibration(calDir, nodeType)
	if err != nil {
		return nil, Calibration{}, err
	}
	values := NodeFacts(h, cpus)
	if d, err := syscost.Measure(); err == nil && d > 0 {
		values[NameSyscallSeconds] = d.Seconds()
	}
	for k, v := range cal.Values {
		values[k] = v
	}
	cal.Values = values
	s.Calibration = values
	e, err := Load(s)
	return e, cal, err
}

// CheckThresholds reports the first Threshold.<id> of a configuration file that names no
// property, with the file and line (lines maps ids to the lines they were set on).
func CheckThresholds(file string, lines map[string]int) error {
	c, err := DefaultCatalog()
	if err != nil {
		return err
	}
	ids := map[string]bool{}
	for _, k := range c.Keys() {
		p, _ := c.Get(k)
		ids[k], ids[p.ID] = true, true
	}
	bad := ""
	for id, line := range lines {
		if !ids[id] && (bad == "" || line < lines[bad]) {
			bad = id
		}
	}
	if bad != "" {
		return fmt.Errorf("%s:%d: Threshold.%s: no such property (see docs/properties.md)", file, lines[bad], bad)
	}
	return nil
}

// SettingsOf takes the property settings from persyst.conf.
func SettingsOf(c config.Config) Settings {
	return Settings{StrategyFile: c.StrategyFile, Thresholds: c.Thresholds, MinSeconds: c.DigestMinSeconds}
}

// LoadConfig checks persyst.conf's thresholds against the catalog (file names the
// configuration file in errors) and loads the engine of an agent of the tree, without a
// node's calibration.
func LoadConfig(file string, c config.Config) (*Engine, error) {
	if err := CheckThresholds(file, c.ThresholdLines); err != nil {
		return nil, err
	}
	return Load(SettingsOf(c))
}

// LoadConfigForNode is LoadConfig for a node: with its node type's calibration from
// persyst.conf's CalibrationDir.
func LoadConfigForNode(h hostfs.FS, file string, c config.Config) (*Engine, Calibration, error) {
	if err := CheckThresholds(file, c.ThresholdLines); err != nil {
		return nil, Calibration{}, err
	}
	return LoadForNode(h, c.CalibrationDir, SettingsOf(c))
}
