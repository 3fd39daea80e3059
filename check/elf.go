package check

import (
	"bytes"
	"debug/elf"
	"errors"
	"fmt"

	"github.com/persyst/persyst/slurmver"
)

// pluginInfo is what makes a shared object a Slurm plugin: the symbols Slurm's
// plugin.c looks up before it loads one.
type pluginInfo struct {
	Name, Type string
	Version    slurmver.Release // plugin_version: SLURM_VERSION_NUMBER at build time
}

// readPlugin reads a plugin's plugin_name, plugin_type and plugin_version from its
// dynamic symbols (SPANK_PLUGIN defines them as constant data), without loading it.
func readPlugin(path string) (pluginInfo, error) {
	f, err := elf.Open(path)
	if err != nil {
		return pluginInfo{}, err
	}
	defer f.Close()
	syms, err := f.DynamicSymbols()
	if err != nil {
		return pluginInfo{}, fmt.Errorf("%s: %w", path, err)
	}
	var p pluginInfo
	found := 0
	for _, s := range syms {
		switch s.Name {
		case "plugin_name", "plugin_type", "plugin_version":
		default:
			continue
		}
		b, err := symbolData(f, s)
		if err != nil {
			return pluginInfo{}, fmt.Errorf("%s: %s: %w", path, s.Name, err)
		}
		found++
		switch s.Name {
		case "plugin_name":
			p.Name = cString(b)
		case "plugin_type":
			p.Type = cString(b)
		case "plugin_version":
			if len(b) < 4 {
				return pluginInfo{}, fmt.Errorf("%s: plugin_version is %d bytes, want 4", path, len(b))
			}
			p.Version = slurmver.FromNumber(f.ByteOrder.Uint32(b))
		}
	}
	if found < 3 {
		return p, fmt.Errorf("%s: not a Slurm plugin (no plugin_name, plugin_type and plugin_version)", path)
	}
	return p, nil
}

// maxSymbol bounds what is read of a symbol (plugin names are short).
const maxSymbol = 256

// symbolData reads a data symbol's bytes from its section.
func symbolData(f *elf.File, s elf.Symbol) ([]byte, error) {
	if int(s.Section) <= 0 || int(s.Section) >= len(f.Sections) {
		return nil, errors.New("not defined in a section")
	}
	sec := f.Sections[s.Section]
	if sec.Type == elf.SHT_NOBITS || s.Value < sec.Addr || s.Value-sec.Addr >= sec.Size {
		return nil, errors.New("not in its section's data")
	}
	n := min(s.Size, maxSymbol, sec.Size-(s.Value-sec.Addr))
	b := make([]byte, n)
	if _, err := sec.ReadAt(b, int64(s.Value-sec.Addr)); err != nil {
		return nil, err
	}
	return b, nil
}

func cString(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}
