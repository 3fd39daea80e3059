package collectors

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/persyst/persyst/collectors/pb"
	"github.com/persyst/persyst/collectors/treeauth"
	"github.com/persyst/persyst/digest"
	"github.com/persyst/persyst/properties"
)

// partWait bounds how long an aggregation point waits for the parts of a job at its end:
// a dead collector must not hold the job's digest up (the batch host waits 1.5 s).
const partWait = 500 * time.Millisecond

// dialer keeps one client connection per agent address, and calls only agents of the
// tree: the addresses the agent was configured with and those the frontend names in its
// pings (Heartbeat.tree), never an address that a message of a node names.
type dialer struct {
	auth *treeauth.Tree // nil: plain connections to any address (tests of other things)
	mu   sync.Mutex
	// conns are the connections by address.
	conns map[string]*grpc.ClientConn
	// fixed are the configured agents' addresses; tree are the frontend's (known: it
	// sent some).
	fixed, tree map[string]bool
	known       bool
}

// Errors of a call to an address that is not an agent of the tree.
var (
	errNotInTree   = errors.New("not an agent of the tree (neither configured nor named by the frontend)")
	errTreeUnknown = errors.New("the tree's agents are not known yet (no ping from the frontend since the start)")
)

// smallBuffers are the options of the agents' connections: no read or write buffer of
// their own (gRPC's are 32 KiB each way). The frontend holds a connection to every
// node's route service, idle but for a small message a cycle (docs/performance.md).
// The connections never go idle (gRPC's default closes them after 30 idle minutes):
// an agent asks another rarely, at a job's end, and must not wait for a handshake then.
var smallBuffers = []grpc.DialOption{grpc.WithReadBufferSize(0), grpc.WithWriteBufferSize(0), grpc.WithIdleTimeout(0)}

// maxTree bounds the addresses a frontend's ping names.
const maxTree = 1 << 16

func newDialer(auth *treeauth.Tree, fixed ...string) *dialer {
	d := &dialer{auth: auth, fixed: map[string]bool{}}
	for _, a := range fixed {
		if a != "" {
			d.fixed[a] = true
		}
	}
	return d
}

// setTree takes the tree's addresses from a frontend's ping, and connects ahead to those
// it has no connection to yet: a job's end then asks its parts over a connection that is
// up. On a loaded machine the first call's TLS handshake alone outlasted partWait, and
// a 4-node job's digest covered 2 of its nodes (TestTreeAgents, forky's root,
// 2026-12-05).
func (d *dialer) setTree(addrs []string) error {
	if len(addrs) > maxTree {
		return fmt.Errorf("%d agents, more than %d", len(addrs), maxTree)
	}
	t := make(map[string]bool, len(addrs))
	for _, a := range addrs {
		t[a] = true
	}
	d.mu.Lock()
	d.tree, d.known = t, true
	var ahead []string
	for a := range t {
		if d.conns[a] == nil {
			ahead = append(ahead, a)
		}
	}
	d.mu.Unlock()
	for _, a := range ahead {
		if c, err := d.conn(a, aggregators...); err == nil {
			c.Connect()
		}
	}
	return nil
}

// conn returns the connection to an agent of the tree whose role is one of expect.
func (d *dialer) conn(addr string, expect ...treeauth.Role) (*grpc.ClientConn, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if c, ok := d.conns[addr]; ok {
		return c, nil
	}
	opt := grpc.WithTransportCredentials(insecure.NewCredentials())
	if d.auth != nil {
		switch {
		case d.fixed[addr] || d.tree[addr]:
		case !d.known:
			return nil, fmt.Errorf("agent %s: %w", addr, errTreeUnknown)
		default:
			return nil, fmt.Errorf("agent %s: %w", addr, errNotInTree)
		}
		var err error
		if opt, err = d.auth.DialOption(expect...); err != nil {
			return nil, err
		}
	}
	c, err := grpc.NewClient(addr, append([]grpc.DialOption{opt}, smallBuffers...)...)
	if err != nil {
		return nil, fmt.Errorf("agent %s: %w", addr, err)
	}
	if d.conns == nil {
		d.conns = map[string]*grpc.ClientConn{}
	}
	d.conns[addr] = c
	return c, nil
}

// aggregators are the roles that hold parts of jobs or merge them.
var aggregators = []treeauth.Role{treeauth.Collector, treeauth.Sync, treeauth.Frontend}

func (d *dialer) collector(addr string) (pb.CollectorClient, error) {
	c, err := d.conn(addr, aggregators...)
	if err != nil {
		return nil, err
	}
	return pb.NewCollectorClient(c), nil
}

func (d *dialer) close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, c := range d.conns {
		c.Close()
	}
	d.conns = nil
}

// gather asks every address, concurrently and within wait, for its part of a job, and
// returns the non-empty parts in the order of addrs. An agent that does not answer is
// logged and left out: the job's report then covers the nodes the others hold.
func gather(ctx context.Context, d *dialer, addrs []string, job uint32, wait time.Duration, log zerolog.Logger) []*pb.JobPartial {
	parts := make([]*pb.JobPartial, len(addrs))
	var wg sync.WaitGroup
	for i, a := range addrs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl, err := d.collector(a)
			if err != nil {
				return
			}
			pctx, cancel := context.WithTimeout(ctx, wait)
			defer cancel()
			p, err := cl.Partial(pctx, &pb.JobSummaryRequest{JobId: job})
			if err != nil {
				log.Info().Err(err).Str("collector", a).Uint32("job", job).Msg("no part of the job from this collector")
				return
			}
			if len(p.Nodes) > 0 {
				parts[i] = p
			}
		}()
	}
	wg.Wait()
	return slices.DeleteFunc(parts, func(p *pb.JobPartial) bool { return p == nil })
}

// mergedSummary merges a job's parts into its job-wide summary (the digest report).
func mergedSummary(e *properties.Engine, job uint32, parts []*pb.JobPartial) (*pb.JobSummary, error) {
	if len(parts) == 0 {
		return nil, fmt.Errorf("no collector holds job %d", job)
	}
	rep, err := MergePartials(e, job, parts)
	if err != nil {
		return nil, err
	}
	b, err := json.Marshal(rep)
	if err != nil {
		return nil, err
	}
	return &pb.JobSummary{JobId: job, Nodes: rep.Nodes, ReportJson: b}, nil
}

// others returns the addresses in holders other than self, deduplicated and sorted.
func others(holders []string, self string) []string {
	var out []string
	for _, h := range holders {
		if h != "" && h != self {
			out = append(out, h)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// decodeReport reads a JobSummary's report.
func decodeReport(b []byte) (*digest.Report, error) {
	var r digest.Report
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("job report: %w", err)
	}
	return &r, nil
}
