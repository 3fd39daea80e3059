package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/persyst/persyst/collectors/store"
	"github.com/persyst/persyst/collectors/uplink"
	"github.com/persyst/persyst/daemon"
	"github.com/persyst/persyst/digest"
	"github.com/persyst/persyst/htmlreport"
	"github.com/persyst/persyst/properties"
	"github.com/persyst/persyst/sample"
)

// writeHTML writes a job's report as a self-contained HTML page: from the node daemons'
// samples, from a collector's database (--db), or the findings alone (--sacct).
func writeHTML(ctx context.Context, io stdio, o reportOptions, r *digest.Report) error {
	var v htmlreport.View
	switch {
	case o.db != "":
		var err error
		if v, err = viewFromDB(ctx, o, r); err != nil {
			return err
		}
	case o.sacct:
		v = htmlreport.FromSamples(htmlreport.SamplesInput{Report: *r})
		v.Source = "the summary in Slurm's accounting"
		v.Notes = []string{"From the summary kept in Slurm's accounting: the findings only (the samples are the node daemons', who forgot the job)."}
	default:
		v = viewFromDaemons(ctx, o, r)
	}
	return htmlreport.Render(io.out, v, htmlreport.Options{Version: version})
}

// viewFromDB is a job's view from a collector's (or sync agent's, or frontend's) database.
func viewFromDB(ctx context.Context, o reportOptions, r *digest.Report) (htmlreport.View, error) {
	st, err := store.Open(ctx, o.db, store.Options{})
	if err != nil {
		return htmlreport.View{}, err
	}
	defer st.Close()
	o.warn = nil // said once, by dbReport
	j, err := dbJob(ctx, st, o, r.JobID)
	if err != nil {
		return htmlreport.View{}, err
	}
	return htmlreport.FromStore(ctx, st, o.db, j.Key, r)
}

// viewFromDaemons is a job's view from its nodes' daemons: this machine's through its
// socket, the others' over their gRPC service. A node whose samples cannot be had is
// named in the page's notes.
func viewFromDaemons(ctx context.Context, o reportOptions, r *digest.Report) htmlreport.View {
	local := o.node
	if local == "" {
		local = shortHostname()
	}
	in := htmlreport.SamplesInput{Report: *r}
	var notes []string
	var ns *nodeService
	var nsErr error
	for _, node := range r.Nodes {
		var samples []sample.Sample
		var err error
		if sock := strings.ReplaceAll(o.socket, "%n", node); node == local && exists(sock) {
			samples, err = daemon.JobSamples(ctx, sock, r.JobID)
		} else {
			if ns == nil && nsErr == nil {
				ns, nsErr = dialNodes(ctx, o, r.JobName())
			}
			err = nsErr
			if err == nil {
				samples, err = remoteSamples(ctx, ns, node, r.JobID)
			}
		}
		if err != nil {
			notes = append(notes, fmt.Sprintf("No samples of %s: %v.", node, err))
			continue
		}
		in.Nodes = append(in.Nodes, htmlreport.NodeSamples{Node: node, Samples: samples})
	}
	if ns != nil {
		switch j := ns.job; {
		case j.MemPerNodeMB > 0:
			in.MemRequest = float64(j.MemPerNodeMB) * (1 << 20)
		case j.MemPerCPUMB > 0 && len(j.Nodes) > 0:
			in.MemRequest = float64(j.MemPerCPUMB) * (1 << 20) * float64(r.CPUs) / float64(len(j.Nodes))
		}
	}
	if conf, err := loadConfig(o.config); err == nil {
		if engine, err := properties.LoadConfig(o.config, conf); err == nil {
			in.Lanes = htmlreport.Lanes(engine, *r, in.Nodes)
		}
	}
	if in.Lanes == nil {
		in.Lanes = htmlreport.Lanes(nil, *r, nil)
		notes = append(notes, "When the findings held is not shaded: persyst.conf's properties could not be loaded.")
	}
	v := htmlreport.FromSamples(in)
	v.Notes = append(notes, v.Notes...)
	return v
}

func remoteSamples(ctx context.Context, ns *nodeService, node string, job uint32) ([]sample.Sample, error) {
	addr, err := ns.addr(node)
	if err != nil {
		return nil, err
	}
	b, err := uplink.RemoteSamples(ctx, addr, ns.dial, job)
	if err != nil {
		return nil, err
	}
	var samples []sample.Sample
	if err := json.Unmarshal(b, &samples); err != nil {
		return nil, fmt.Errorf("samples from %s: %w", node, err)
	}
	if len(samples) == 0 {
		return nil, errors.New("none")
	}
	return samples, nil
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
