// Command sitesim plays a site for bench/site.sh.
//
//	sitesim fill -db PATH -jobs N [-days D] [-seed S]
//	    stores N finished jobs of the last D days (sitesim.Fill: several clusters whose
//	    ids meet, every end state, accounts, users, partitions, CPU and GPU jobs) into the
//	    persyst database at PATH, and prints a line with what it stored and how fast.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/persyst/persyst/collectors/store"
	"github.com/persyst/persyst/sitesim"
)

func main() {
	if len(os.Args) < 2 || os.Args[1] != "fill" {
		fmt.Fprintln(os.Stderr, "usage: sitesim fill -db PATH -jobs N [-days D] [-seed S]")
		os.Exit(2)
	}
	fs := flag.NewFlagSet("sitesim fill", flag.ExitOnError)
	db := fs.String("db", "", "persyst database (created if absent)")
	var o sitesim.FillOptions
	fs.IntVar(&o.Jobs, "jobs", 100000, "finished jobs to store")
	fs.IntVar(&o.Days, "days", 7, "the jobs ended within the last this many days")
	fs.Uint64Var(&o.Seed, "seed", 1, "random seed")
	fs.Parse(os.Args[2:])
	if *db == "" {
		fmt.Fprintln(os.Stderr, "sitesim fill: -db PATH")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := fill(ctx, *db, o); err != nil {
		fmt.Fprintln(os.Stderr, "sitesim fill:", err)
		os.Exit(1)
	}
}

func fill(ctx context.Context, db string, o sitesim.FillOptions) error {
	st, err := store.Open(ctx, db, store.Options{})
	if err != nil {
		return err
	}
	t0 := time.Now()
	last := t0
	tot, err := sitesim.Fill(ctx, st, o, func(done int) {
		if time.Since(last) > 10*time.Second {
			last = time.Now()
			fmt.Fprintf(os.Stderr, "sitesim fill: %d of %d jobs, %.0f jobs/s\n", done, o.Jobs, float64(done)/time.Since(t0).Seconds())
		}
	})
	if cerr := st.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	secs := time.Since(t0).Seconds()
	fi, err := os.Stat(db) // after Close: the WAL is in the file
	if err != nil {
		return err
	}
	fmt.Printf("fill: jobs=%d seconds=%.1f jobs_per_s=%.0f db_bytes=%d db_bytes_per_job=%.0f cpu_hours=%.0f gpu_hours=%.0f findings=%d\n",
		tot.Jobs, secs, float64(tot.Jobs)/secs, fi.Size(), float64(fi.Size())/float64(max(tot.Jobs, 1)), tot.CPUHours, tot.GPUHours, len(tot.Findings))
	return nil
}
