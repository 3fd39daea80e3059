// Package options parses what an admin and a user give the persyst SPANK plugin: the
// plugstack.conf arguments (strict key=value) and the value of --persyst.
//
// It is a separate pure-Go package so it can be tested without Slurm; the plugin
// (package main in spank/) only passes strings in and plain values out.
package options

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// DefaultSocket is where the node daemon listens unless plugstack.conf says otherwise.
const DefaultSocket = "/run/persyst/persyst.sock"

// DefaultTimeout bounds every exchange between the plugin and the daemon.
const DefaultTimeout = 5 * time.Second

// MaxTimeout is the largest timeout= accepted: the plugin must never hold a job for long.
const MaxTimeout = 300 * time.Second

// maxPath bounds report= (PATH_MAX, with its terminating NUL in C).
const maxPath = 4096

// maxSocketPath is the longest unix socket path Linux accepts (sun_path is 108 bytes).
const maxSocketPath = 107

// Config is the plugin configuration from plugstack.conf.
type Config struct {
	// DefaultOn is whether jobs are measured when the user gives no --persyst.
	DefaultOn bool
	// Socket is the node daemon's socket path. It has no %n: slurmstepd has no node name
	// the user cannot forge, and each node has its own daemon at the same path.
	Socket string
	// Timeout bounds each exchange with the daemon.
	Timeout time.Duration
	// Report is the persyst command srun runs when a job it started ends, to print the
	// job's digest on the user's terminal ("": none).
	Report string
}

// DefaultReport is the persyst command srun runs at the end of an interactive job.
const DefaultReport = "/usr/bin/persyst"

// Defaults returns the configuration used when plugstack.conf gives no arguments.
func Defaults() Config {
	return Config{DefaultOn: true, Socket: DefaultSocket, Timeout: DefaultTimeout, Report: DefaultReport}
}

// ParseArgs parses plugstack.conf arguments. Every argument must be key=value with a known
// key and a valid value; all problems are returned (one error each, naming the argument),
// so an admin sees them all at once.
func ParseArgs(args []string) (Config, []error) {
	c := Defaults()
	var errs []error
	seen := map[string]bool{}
	for _, a := range args {
		k, v, ok := strings.Cut(a, "=")
		if !ok || k == "" {
			errs = append(errs, fmt.Errorf("argument %q: want key=value (keys: default, socket, timeout, report)", a))
			continue
		}
		if seen[k] {
			errs = append(errs, fmt.Errorf("argument %q: %s given twice", a, k))
			continue
		}
		seen[k] = true
		switch k {
		case "default":
			on, err := ParseValue(v)
			if err != nil {
				errs = append(errs, fmt.Errorf("argument %q: %w", a, err))
				continue
			}
			c.DefaultOn = on
		case "socket":
			if !filepath.IsAbs(v) || filepath.Clean(v) != v || v == "/" || strings.ContainsAny(v, "\x00\n") {
				errs = append(errs, fmt.Errorf("argument %q: socket must be a clean absolute path", a))
				continue
			}
			if len(v) > maxSocketPath {
				errs = append(errs, fmt.Errorf("argument %q: socket path longer than %d bytes (the unix socket limit)", a, maxSocketPath))
				continue
			}
			c.Socket = v
		case "report":
			switch {
			case v == "off":
				c.Report = ""
			case !filepath.IsAbs(v) || filepath.Clean(v) != v || v == "/" || strings.ContainsAny(v, "\x00\n") || len(v) >= maxPath:
				errs = append(errs, fmt.Errorf("argument %q: report must be off or the persyst command's clean absolute path", a))
				continue
			default:
				c.Report = v
			}
		case "timeout":
			d, err := parseSeconds(v)
			if err != nil {
				errs = append(errs, fmt.Errorf("argument %q: %w", a, err))
				continue
			}
			c.Timeout = d
		default:
			errs = append(errs, fmt.Errorf("argument %q: unknown key %q (keys: default, socket, timeout, report)", a, k))
		}
	}
	return c, errs
}

// parseSeconds accepts a decimal number of seconds ("5", "0.5", ".5": digits and at most
// one point, no sign or exponent, at most 64 characters) between 0.001 and MaxTimeout.
// The grammar is the C plugin's (spank/options.c), which must agree with this one.
func parseSeconds(v string) (time.Duration, error) {
	digits, dots, other := 0, 0, false
	for _, r := range v {
		switch {
		case r >= '0' && r <= '9':
			digits++
		case r == '.' && dots == 0:
			dots++
		default:
			other = true
		}
	}
	f, err := strconv.ParseFloat(v, 64)
	if other || digits == 0 || len(v) > 64 || err != nil {
		return 0, fmt.Errorf("timeout must be a number of seconds, got %q", v)
	}
	d := time.Duration(f * float64(time.Second))
	if d < time.Millisecond || d > MaxTimeout {
		return 0, fmt.Errorf("timeout must be between 0.001 and %d seconds, got %q", int(MaxTimeout.Seconds()), v)
	}
	return d, nil
}

// ParseValue parses a --persyst value: "on" or "off", nothing else (case-sensitive, like
// Slurm's own on/off options are documented).
func ParseValue(v string) (bool, error) {
	switch v {
	case "on":
		return true, nil
	case "off":
		return false, nil
	}
	return false, fmt.Errorf("invalid value %q: use on or off", v)
}
