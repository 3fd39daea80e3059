package jobmap

import (
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
)

// WriteTable prints jobs one per line, like squeue.
func WriteTable(w io.Writer, jobs []*Job) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "JOBID\tSTATE\tUSER\tNAME\tNODES\tCORES\tSTDOUT")
	for _, j := range jobs {
		cores := 0
		for _, a := range j.Alloc {
			cores += a.Cores
		}
		c := "-"
		if cores > 0 {
			c = strconv.Itoa(cores)
		}
		nodes := j.NodeList
		if nodes == "" {
			nodes = "-"
		}
		out := j.Stdout
		if out == "" {
			out = "(not decided yet)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", j.ID(), j.State, j.User, j.Name, nodes, c, out)
	}
	return tw.Flush()
}
