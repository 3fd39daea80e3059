package sitesim

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/grpc"

	"github.com/persyst/persyst/collectors/pb"
	"github.com/persyst/persyst/collectors/treeauth"
	"github.com/persyst/persyst/digest"
)

// The ways a hostile node misbehaves (HostileOptions.Kinds).
const (
	// Malformed pushes: a bad key, a severity that is not a number or out of [0, 1], a
	// device missing or too long, no timestamp.
	Malformed = "malformed"
	// Oversized pushes: more records than a push may hold, and a message over gRPC's
	// limit.
	Oversized = "oversized"
	// OtherNode pushes records under another node's name (a real node of the site).
	OtherNode = "other_node"
	// NotPlaced pushes records of a job Slurm runs on other nodes, under its own name.
	NotPlaced = "not_placed"
	// Forged sends a final report, or a notice told to its user, of a job whose batch
	// host it is not.
	Forged = "forged_report"
	// Storm opens a connection, pushes, and closes it, in a loop.
	Storm = "storm"
	// Unauthenticated connects without the tree's authentication, in a loop.
	Unauthenticated = "unauthenticated"
)

// HostileKinds are every kind, in the order hostile nodes take them.
var HostileKinds = []string{Malformed, Oversized, OtherNode, NotPlaced, Forged, Storm, Unauthenticated}

// Marker is the value of every record a hostile node sends: the site's own records are
// in [0, 100), so a stored cycle whose largest value is Marker holds a hostile record.
const Marker = 4242.0

// HostileOptions say what Hostile plays: nodes of the site, with the site's own
// certificates (an intruder holding a node's key, or a node gone wrong), that misbehave.
type HostileOptions struct {
	Nodes  int    // hostile nodes; node i plays HostileKinds[i % len]
	Prefix string // their names: Prefix and a 5-digit number ("h00001")
	// Collector and Frontend are where they send.
	Collector, Frontend string
	// CertDir holds their certificates as Live's (sitesim certs -hostile).
	CertDir string
	// Victim is a real node of the site whose name they push under (OtherNode), Jobs the
	// job ids they name (real jobs of the site: the first ones Live starts).
	Victim string
	Jobs   []uint32
	// Cycle is how often a pushing node pushes; a storming node connects every
	// Cycle/StormPerCycle.
	Cycle         time.Duration
	StormPerCycle int
	Log           zerolog.Logger
}

// HostileStats count, per kind, what hostile nodes tried, what the tree refused (an
// Ack's error, or an RPC or connection error) and what it took (none, if the tree holds).
type HostileStats struct {
	Sent    map[string]int64
	Refused map[string]int64
	Taken   map[string]int64
}

// Hostile plays hostile nodes until ctx is done.
type Hostile struct {
	o HostileOptions

	mu    sync.Mutex
	stats HostileStats
}

// NewHostile checks the options.
func NewHostile(o HostileOptions) (*Hostile, error) {
	if o.Nodes <= 0 || o.Collector == "" || o.Frontend == "" || o.CertDir == "" || o.Victim == "" || len(o.Jobs) == 0 || o.Cycle <= 0 {
		return nil, fmt.Errorf("sitesim: hostile nodes need a count, a collector, a frontend, certificates, a victim, jobs and a cycle")
	}
	if o.Prefix == "" {
		o.Prefix = "h"
	}
	if o.StormPerCycle <= 0 {
		o.StormPerCycle = 50
	}
	return &Hostile{o: o, stats: HostileStats{Sent: map[string]int64{}, Refused: map[string]int64{}, Taken: map[string]int64{}}}, nil
}

// Run plays every hostile node until ctx is done.
func (h *Hostile) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	errs := make(chan error, h.o.Nodes)
	for i := range h.o.Nodes {
		name := fmt.Sprintf("%s%05d", h.o.Prefix, i+1)
		kind := HostileKinds[i%len(HostileKinds)]
		dial, err := h.dial(name)
		if err != nil {
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := h.play(ctx, i, name, kind, dial); err != nil {
				errs <- fmt.Errorf("hostile node %s (%s): %w", name, kind, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// dial is a hostile node's connection option: its own certificate, the site's CA.
func (h *Hostile) dial(name string) (grpc.DialOption, error) {
	auth, err := treeauth.New(treeauth.Options{Mode: treeauth.TLS, Self: treeauth.Identity{Role: treeauth.Node, Name: name},
		TLS: treeauth.TLSFiles{Cert: filepath.Join(h.o.CertDir, name+".crt"), Key: filepath.Join(h.o.CertDir, name+".key"),
			CA: filepath.Join(h.o.CertDir, name+"-ca.crt")}, Log: h.o.Log})
	if err != nil {
		return nil, err
	}
	return auth.DialOption()
}

// play runs one hostile node: a pushing kind once a cycle over one connection, a storm
// StormPerCycle times a cycle over a new connection each time.
func (h *Hostile) play(ctx context.Context, i int, name, kind string, dial grpc.DialOption) error {
	every := h.o.Cycle
	if kind == Storm || kind == Unauthenticated {
		every /= time.Duration(h.o.StormPerCycle)
	}
	var conn *grpc.ClientConn
	defer func() {
		if conn != nil {
			conn.Close()
		}
	}()
	t := time.NewTicker(every)
	defer t.Stop()
	for n := 0; ; n++ {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		var err error
		switch kind {
		case Unauthenticated:
			err = h.unauthenticated(cctx)
		case Storm:
			err = h.once(kind, h.o.Collector, dial, func(c pb.CollectorClient) (*pb.Ack, error) {
				return c.Push(cctx, h.push(name, h.job(n), nil))
			})
		case Forged:
			err = h.once(kind, h.o.Frontend, dial, func(c pb.CollectorClient) (*pb.Ack, error) {
				if n%2 == 1 {
					return c.KeepNotice(cctx, h.forgedNotice(h.job(n)))
				}
				return c.KeepReport(cctx, h.forged(h.job(n)))
			})
		default:
			if conn == nil {
				conn, err = grpc.NewClient(h.o.Collector, dial)
			}
			if err == nil {
				h.count(kind, func() (*pb.Ack, error) {
					return pb.NewCollectorClient(conn).Push(cctx, h.bad(name, kind, n))
				})
			}
		}
		cancel()
		if err != nil {
			return err
		}
	}
}

// once calls f over a connection of its own (a storm's reconnection, or a call that needs
// another server), and counts it.
func (h *Hostile) once(kind, addr string, dial grpc.DialOption, f func(pb.CollectorClient) (*pb.Ack, error)) error {
	conn, err := grpc.NewClient(addr, dial)
	if err != nil {
		return err
	}
	defer conn.Close()
	h.count(kind, func() (*pb.Ack, error) { return f(pb.NewCollectorClient(conn)) })
	return nil
}

// count makes one call of kind and counts how the tree answered.
func (h *Hostile) count(kind string, call func() (*pb.Ack, error)) {
	ack, err := call()
	h.mu.Lock()
	defer h.mu.Unlock()
	h.stats.Sent[kind]++
	if err == nil && ack.GetOk() {
		h.stats.Taken[kind]++
	} else {
		h.stats.Refused[kind]++
	}
}

// unauthenticated connects without the tree's handshake and writes what a stray client
// would (an HTTP request), then waits for the server to close the connection.
func (h *Hostile) unauthenticated(ctx context.Context) error {
	d := net.Dialer{Timeout: time.Second}
	conn, err := d.DialContext(ctx, "tcp", h.o.Collector)
	h.mu.Lock()
	h.stats.Sent[Unauthenticated]++
	h.mu.Unlock()
	if err != nil {
		h.mu.Lock()
		h.stats.Refused[Unauthenticated]++
		h.mu.Unlock()
		return nil
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(2 * time.Second))
	_, _ = conn.Write([]byte("GET /metrics HTTP/1.0\r\n\r\n"))
	buf := make([]byte, 512)
	for {
		if _, err := conn.Read(buf); err != nil {
			break // closed by the server (or its TLS alert, then closed)
		}
	}
	h.mu.Lock()
	h.stats.Refused[Unauthenticated]++
	h.mu.Unlock()
	return nil
}

// job is the n-th job a hostile node names, in turn.
func (h *Hostile) job(n int) uint32 { return h.o.Jobs[n%len(h.o.Jobs)] }

// push is a push of n valid-looking records of job under node's name, each of value
// Marker.
func (h *Hostile) push(node string, job uint32, recs []*pb.Record) *pb.CycleRecords {
	if recs == nil {
		recs = []*pb.Record{{Key: "cpu_user_pct", Device: "node", Value: Marker}}
	}
	return &pb.CycleRecords{JobId: job, Node: node, Ts: time.Now().Truncate(h.o.Cycle).Unix(), Seconds: h.o.Cycle.Seconds(), Records: recs}
}

// bad is a pushing kind's n-th push.
func (h *Hostile) bad(name, kind string, n int) *pb.CycleRecords {
	job := h.job(n)
	good := func(k int) []*pb.Record {
		out := make([]*pb.Record, k)
		for i := range out {
			out[i] = &pb.Record{Key: "cpu_user_pct", Device: fmt.Sprintf("cpu%d", i), Value: Marker}
		}
		return out
	}
	switch kind {
	case Malformed:
		recs := good(8)
		in := h.push(name, job, recs)
		switch n % 5 {
		case 0:
			recs[3].Key = "not a key!"
		case 1:
			recs[3].Severity = math.NaN()
		case 2:
			recs[3].Severity = 7
		case 3:
			recs[3].Device = strings.Repeat("d", 200)
		default:
			in.Ts = 0
		}
		return in
	case Oversized:
		if n%2 == 0 {
			return h.push(name, job, good(65537)) // more records than a push may hold
		}
		// Over gRPC's message limit (4 MiB): refused before persyst reads it.
		recs := good(1)
		recs[0].Device = strings.Repeat("x", 5<<20)
		return h.push(name, job, recs)
	case OtherNode:
		return h.push(h.o.Victim, job, good(16))
	default: // NotPlaced
		return h.push(name, job, good(16))
	}
}

// forged is a final report of job, made up: it names the job and claims a finding.
func (h *Hostile) forged(job uint32) *pb.JobSummary {
	r := digest.Report{Schema: digest.SchemaVersion, JobID: job, Nodes: []string{h.o.Victim}, Seconds: Marker}
	b, _ := json.Marshal(r)
	return &pb.JobSummary{JobId: job, Nodes: []string{h.o.Victim}, ReportJson: b}
}

// forgedNotice is a notice of job as if the victim, its batch host, sent it.
func (h *Hostile) forgedNotice(job uint32) *pb.JobNotice {
	t := time.Now().Unix()
	return &pb.JobNotice{JobId: job, Node: h.o.Victim, Reason: digest.NoticeGPUIdle, Since: t - 3600, Told: t, Seen: t}
}

// Stats returns the counts so far.
func (h *Hostile) Stats() HostileStats {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := HostileStats{Sent: map[string]int64{}, Refused: map[string]int64{}, Taken: map[string]int64{}}
	for k, v := range h.stats.Sent {
		out.Sent[k] = v
	}
	for k, v := range h.stats.Refused {
		out.Refused[k] = v
	}
	for k, v := range h.stats.Taken {
		out.Taken[k] = v
	}
	return out
}
