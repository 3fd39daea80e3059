package main

import (
	"context"
	"flag"
	"fmt"
	"time"

	"github.com/persyst/persyst/calibrate"
	"github.com/persyst/persyst/config"
	"github.com/persyst/persyst/hostfs"
)

type calibrateOptions struct {
	dir, nodeType, config string
	seconds               float64
	json                  bool
}

func (o *calibrateOptions) flags(fs *flag.FlagSet) {
	fs.StringVar(&o.dir, "dir", "", "where to write the calibration (default: CalibrationDir of persyst.conf)")
	fs.Float64Var(&o.seconds, "seconds", 10, "time budget of the benchmarks (the run ends within about twice that)")
	fs.BoolVar(&o.json, "json", false, "print the calibration written, as JSON")
	fs.StringVar(&o.nodeType, "node-type", "", "node type to calibrate (default: processor model and online CPUs, e.g. AMD_EPYC-2cpus)")
	fs.StringVar(&o.config, "config", config.DefaultFile(), "persyst.conf (CalibrationDir)")
}

func runCalibrate(ctx context.Context, io stdio, args []string) error {
	var o calibrateOptions
	fs, err := parseOptions("calibrate", io, args, &o)
	if err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("calibrate: unexpected arguments %q", fs.Args())
	}
	if !(o.seconds > 0 && o.seconds <= 3600) {
		return usagef("calibrate: --seconds %v: want more than 0 and at most 3600", o.seconds)
	}
	if o.dir == "" {
		conf, err := loadConfig(o.config)
		if err != nil {
			return err
		}
		o.dir = conf.CalibrationDir
	}
	res, err := calibrate.Run(ctx, calibrate.Options{Host: hostfs.New("/"), Budget: time.Duration(o.seconds * float64(time.Second)),
		NodeType: o.nodeType, Dir: o.dir, Progress: io.err})
	if err != nil {
		return fmt.Errorf("calibrate: %w", err)
	}
	if o.json {
		return writeJSON(io.out, res.Calibration)
	}
	_, err = fmt.Fprint(io.out, calibrate.Text(res))
	return err
}
