// Package config reads /etc/slurm/persyst.conf: Slurm-style "Key=Value" lines (keys are
// case-insensitive, as in slurm.conf; '#' starts a comment; blank lines are ignored).
// An unknown key, a bad value or a repeated key is an error naming the file and line, so
// a typo never silently changes behaviour.
package config

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"
)

// DefaultPath is where persyst looks for its configuration.
const DefaultPath = "/etc/slurm/persyst.conf"

// Config is persyst.conf.
type Config struct {
	// SlurmRestd is slurmrestd's address: "unix:/path" (rest_auth/local) or
	// "http(s)://host:port" (rest_auth/jwt). Empty: use Slurm's commands.
	SlurmRestd string
	// SlurmRestdUser and SlurmRestdTokenFile give the JWT identity for TCP.
	SlurmRestdUser      string
	SlurmRestdTokenFile string
	// SlurmRestdTimeout bounds one request to slurmrestd.
	SlurmRestdTimeout time.Duration
	// Cycle is the measurement period (CycleSeconds, 1 to 3600 s; default 60 s). Every
	// node reads at Unix times that are multiples of it.
	Cycle time.Duration
}

// Defaults is the configuration without a file.
func Defaults() Config {
	return Config{SlurmRestdTimeout: 10 * time.Second, Cycle: 60 * time.Second}
}

type field struct {
	name string
	set  func(c *Config, v string) error
}

var fields = []field{
	{"CycleSeconds", func(c *Config, v string) error {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 3600 {
			return fmt.Errorf("want whole seconds between 1 and 3600, got %q", v)
		}
		c.Cycle = time.Duration(n) * time.Second
		return nil
	}},
	{"SlurmRestd", func(c *Config, v string) error {
		if !strings.HasPrefix(v, "unix:/") && !strings.HasPrefix(v, "http://") && !strings.HasPrefix(v, "https://") {
			return fmt.Errorf("want unix:/path or http(s)://host:port, got %q", v)
		}
		c.SlurmRestd = v
		return nil
	}},
	{"SlurmRestdUser", func(c *Config, v string) error { c.SlurmRestdUser = v; return nil }},
	{"SlurmRestdTokenFile", func(c *Config, v string) error {
		if !strings.HasPrefix(v, "/") {
			return fmt.Errorf("want an absolute path, got %q", v)
		}
		c.SlurmRestdTokenFile = v
		return nil
	}},
	{"SlurmRestdTimeout", func(c *Config, v string) error {
		d, err := parseSeconds(v)
		c.SlurmRestdTimeout = d
		return err
	}},
}

// parseSeconds reads a number of seconds ("10", "0.5") or a Go duration ("1m30s").
func parseSeconds(v string) (time.Duration, error) {
	if f, err := strconv.ParseFloat(v, 64); err == nil && f > 0 && f <= 3600 {
		return time.Duration(f * float64(time.Second)), nil
	}
	if d, err := time.ParseDuration(v); err == nil && d > 0 && d <= time.Hour {
		return d, nil
	}
	return 0, fmt.Errorf("want seconds between 0 and 3600, got %q", v)
}

// Load reads the file at path; a missing file gives the defaults when optional is true.
func Load(path string, optional bool) (Config, error) {
	f, err := os.Open(path)
	if err != nil {
		if optional && os.IsNotExist(err) {
			return Defaults(), nil
		}
		return Config{}, fmt.Errorf("read %s: %w", path, err)
	}
	defer f.Close()
	return Parse(f, path)
}

// Parse reads a configuration; name is used in error messages.
func Parse(r io.Reader, name string) (Config, error) {
	c := Defaults()
	seen := map[string]int{}
	sc := bufio.NewScanner(r)
	n := 0
	for sc.Scan() {
		n++
		line := sc.Text()
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if !ok || k == "" {
			return Config{}, fmt.Errorf("%s:%d: want Key=Value, got %q", name, n, line)
		}
		var fd *field
		for i := range fields {
			if strings.EqualFold(fields[i].name, k) {
				fd = &fields[i]
			}
		}
		if fd == nil {
			return Config{}, fmt.Errorf("%s:%d: unknown key %q", name, n, k)
		}
		if prev, dup := seen[fd.name]; dup {
			return Config{}, fmt.Errorf("%s:%d: %s already set on line %d", name, n, fd.name, prev)
		}
		seen[fd.name] = n
		if err := fd.set(&c, v); err != nil {
			return Config{}, fmt.Errorf("%s:%d: %s: %w", name, n, fd.name, err)
		}
	}
	if err := sc.Err(); err != nil {
		return Config{}, fmt.Errorf("read %s: %w", name, err)
	}
	if strings.HasPrefix(c.SlurmRestd, "http") && (c.SlurmRestdUser == "" || c.SlurmRestdTokenFile == "") {
		return Config{}, fmt.Errorf("%s: SlurmRestd=%s needs SlurmRestdUser and SlurmRestdTokenFile (JWT)", name, c.SlurmRestd)
	}
	return c, nil
}
