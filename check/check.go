// Package check is `persyst check`: it tells an admin whether persyst works on this node,
// and if not, what to do. Slurm loads persyst's SPANK plugin only when it was built for
// slurmd's release and plugstack.conf names it; when it is not loaded, Slurm says so once
// in slurmd's log and every job goes unmeasured. check looks at each link of the chain (the
// Slurm release, plugstack.conf, the plugin file, the daemon, the cgroups, the counters,
// the job map, the tree's authentication) and prints one line for each, with the fix.
//
// Checks are registered by name (checks); each takes the node's facts (Node), which are
// read once and shared.
package check

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/persyst/persyst/config"
	"github.com/persyst/persyst/gres"
	"github.com/persyst/persyst/hostfs"
	"github.com/persyst/persyst/jobmap"
)

// Status is a check's verdict.
type Status int

// Statuses, from good to bad. Info is a fact that is neither (a counter this node has
// no hardware for: reported as not measured).
const (
	OK Status = iota
	Info
	Warn
	Fail
)

var statusNames = [...]string{OK: "ok", Info: "info", Warn: "warn", Fail: "FAIL"}

func (s Status) String() string { return statusNames[s] }

// MarshalText writes the status's name.
func (s Status) MarshalText() ([]byte, error) { return []byte(strings.ToLower(s.String())), nil }

// Result is one line of the check.
type Result struct {
	Check  string `json:"check"`
	Status Status `json:"status"`
	// Detail says what was found.
	Detail string `json:"detail"`
	// Fix says what to do (empty when nothing need be done).
	Fix string `json:"fix,omitempty"`
}

// Options are where check looks.
type Options struct {
	// Host is the node's root ("/").
	Host hostfs.FS
	// Node is this node's Slurm name.
	Node string
	// Socket is the daemon's socket, asked when plugstack.conf does not say the plugin's.
	Socket string
	// ConfigPath is persyst.conf, Config its content, ConfigErr why it could not be read.
	ConfigPath string
	Config     config.Config
	ConfigErr  error
	// Run runs Slurm's and MUNGE's commands.
	Run jobmap.Runner
	// RunAll runs a command for all it prints, its standard error too (slurmd -G, which
	// says the node's GPUs in Slurm's order; nil: not asked).
	RunAll gres.Run
	// Sources are the job map's sources, each asked for the cluster's jobs.
	Sources []jobmap.Source
	// Timeout bounds each command and request.
	Timeout time.Duration
}

// A checker is one named check.
type checker struct {
	name string
	run  func(ctx context.Context, n *Node) []Result
}

// checks are every check, in the order of the chain from Slurm to the digest.
var checks = []checker{
	{"config", checkConfig},
	{"slurm", checkSlurm},
	{"plugstack", checkPlugstack},
	{"plugin", checkPlugin},
	{"daemon", checkDaemon},
	{"cgroups", checkCgroups},
	{"counters", checkCounters},
	{"energy", checkEnergy},
	{"gpus", checkGPUs},
	{"jobmap", checkJobMap},
	{"tree", checkTree},
	{"store", checkStore},
}

// Run runs every check.
func Run(ctx context.Context, o Options) []Result {
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Second
	}
	n := newNode(ctx, o)
	var out []Result
	for _, c := range checks {
		for _, r := range c.run(ctx, n) {
			r.Check = c.name
			out = append(out, r)
		}
	}
	return out
}

// Failed says whether any result is a failure.
func Failed(rs []Result) bool {
	for _, r := range rs {
		if r.Status == Fail {
			return true
		}
	}
	return false
}

// Write prints the results as lines: status, check, what was found and, indented below,
// what to do.
func Write(w io.Writer, node string, rs []Result) error {
	var b strings.Builder
	fmt.Fprintf(&b, "persyst check on %s\n", node)
	fails, warns := 0, 0
	for _, r := range rs {
		fmt.Fprintf(&b, "%-4s  %-9s  %s\n", r.Status, r.Check, r.Detail)
		if r.Fix != "" {
			fmt.Fprintf(&b, "%17s%s\n", "", "→ "+r.Fix)
		}
		switch r.Status {
		case Fail:
			fails++
		case Warn:
			warns++
		}
	}
	switch {
	case fails > 0:
		fmt.Fprintf(&b, "%d failed, %d warnings: jobs on this node are not measured as they should be\n", fails, warns)
	case warns > 0:
		fmt.Fprintf(&b, "no failures, %d warnings\n", warns)
	default:
		b.WriteString("persyst works on this node\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteJSON prints the results as JSON.
func WriteJSON(w io.Writer, node string, rs []Result) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(struct {
		Node    string   `json:"node"`
		Failed  bool     `json:"failed"`
		Results []Result `json:"results"`
	}{node, Failed(rs), rs})
}

func ok(detail string) Result        { return Result{Status: OK, Detail: detail} }
func info(detail string) Result      { return Result{Status: Info, Detail: detail} }
func warn(detail, fix string) Result { return Result{Status: Warn, Detail: detail, Fix: fix} }
func fail(detail, fix string) Result { return Result{Status: Fail, Detail: detail, Fix: fix} }
