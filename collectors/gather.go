package collectors

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/persyst/persyst/collectors/pb"
	"github.com/persyst/persyst/digest"
	"github.com/persyst/persyst/properties"
)

// partWait bounds how long an aggregation point waits for the parts of a job at its end:
// a dead collector must not hold the job's digest up (the batch host waits 1.5 s).
const partWait = 500 * time.Millisecond

// dialer keeps one client connection per agent address.
type dialer struct {
	opt   grpc.DialOption // nil: plain
	mu    sync.Mutex
	conns map[string]*grpc.ClientConn
}

func (d *dialer) conn(addr string) (*grpc.ClientConn, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if c, ok := d.conns[addr]; ok {
		return c, nil
	}
	opt := d.opt
	if opt == nil {
		opt = grpc.WithTransportCredentials(insecure.NewCredentials())
	}
	c, err := grpc.NewClient(addr, opt)
	if err != nil {
		return nil, fmt.Errorf("agent %s: %w", addr, err)
	}
	if d.conns == nil {
		d.conns = map[string]*grpc.ClientConn{}
	}
	d.conns[addr] = c
	return c, nil
}

func (d *dialer) collector(addr string) (pb.CollectorClient, error) {
	c, err := d.conn(addr)
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
