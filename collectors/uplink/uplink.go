// Package uplink is the node daemon's side of the agent tree, over gRPC: it sends each
// job's property records of a cycle to the collector the frontend routed the job to (or
// the configured one), in the background, and at a multi-node job's end fetches the
// job-wide report from the job's aggregation point. The daemon sees it only through its
// daemon.Uplink interface (records out, job-wide results in).
//
// The routes come from the frontend through the node's own gRPC service (Serve), which
// this package also holds.
package uplink

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/persyst/persyst/collectors/pb"
	"github.com/persyst/persyst/digest"
	"github.com/persyst/persyst/episodes"
	"github.com/persyst/persyst/properties"
	"github.com/persyst/persyst/sample"
)

// Config configures sending property records to collectors.
type Config struct {
	// Addr is the collector of jobs without a route from the frontend (host:port); ""
	// keeps such jobs on the node.
	Addr    string
	Node    string        // this node's name in the records
	Timeout time.Duration // deadline of one push (default 2 s)
	// Retries bounds the attempts of one push (default 2).
	Retries int
	// Dial is the connection option (treeauth.Tree.DialOption); nil: plain.
	Dial grpc.DialOption
}

// Uplink sends each job's property records of a cycle to the collector, in the
// background: the daemon's cycle never waits for it. When the collector does not answer,
// the uplink keeps the last cycle of each job and sends it once the collector is back
// (at most one cycle of a job is lost); meanwhile the daemon aggregates the job itself,
// as it always does for its digest.
type Uplink struct {
	cfg Config
	log zerolog.Logger

	clients *clients // connections to the tree's agents
	keeper  *keeper  // the final reports on their way to the keeper

	mu      sync.Mutex
	routes  map[uint32]string           // job → collector, from the frontend
	aggs    map[uint32]string           // job → its aggregation point
	holders map[uint32][]string         // job → collectors holding parts of it
	routed  bool                        // the frontend has sent routes
	pending map[uint32]*pb.CycleRecords // newest unsent cycle per job
	dest    map[uint32]string           // where each pending cycle goes
	wake    chan struct{}
	down    map[string]bool
	// stalls are the jobs measured and stalled on I/O per cycle since the frontend last
	// asked (SetRoutes); episodes the site-wide I/O episodes it last sent.
	stalls   map[int64]*stall
	episodes []*pb.Episode
}

// stall is one cycle's jobs, and whether each stalled on I/O.
type stall map[uint32]bool

// Bounds of the stalls a node keeps for the frontend (cycles, jobs per cycle) and of the
// episodes it takes (per message, jobs per episode).
const (
	maxStallCycles = 16
	maxStallJobs   = 4096
	maxEpisodes    = 64
	maxEpisodeJobs = 4096
)

// New prepares sending; connections are made lazily, on the first push.
func New(cfg Config, log zerolog.Logger) (*Uplink, error) {
	if cfg.Timeout <= 0 {
		cfg.Timeout = 2 * time.Second
	}
	if cfg.Retries <= 0 {
		cfg.Retries = 2
	}
	cl := newClients(cfg.Dial)
	return &Uplink{cfg: cfg, log: log, clients: cl, keeper: newKeeper(cfg.Node, cl, log), routes: map[uint32]string{}, aggs: map[uint32]string{}, holders: map[uint32][]string{},
		pending: map[uint32]*pb.CycleRecords{}, dest: map[uint32]string{}, wake: make(chan struct{}, 1), down: map[string]bool{},
		stalls: map[int64]*stall{}}, nil
}

// Bounds of what a node keeps of its routes: routes in one message (a node runs at most
// a thousand or so jobs), jobs whose aggregation point and holders it remembers (their
// routes gone, their end not yet seen here), holders per job.
const (
	MaxRoutes     = 4096
	maxRemembered = 2 * MaxRoutes
	maxHolders    = 64
)

// SetRoutes takes this node's routes from the frontend: each job's collector. A job
// without a route (a one-node job) stays on the node. Routes beyond the bounds are
// refused whole.
func (s *Uplink) SetRoutes(rs *pb.Routes) error {
	if len(rs.Routes) > MaxRoutes {
		return fmt.Errorf("%d routes, more than %d", len(rs.Routes), MaxRoutes)
	}
	if len(rs.Episodes) > maxEpisodes {
		return fmt.Errorf("%d episodes, more than %d", len(rs.Episodes), maxEpisodes)
	}
	for _, e := range rs.Episodes {
		if len(e.JobIds) > maxEpisodeJobs {
			return fmt.Errorf("an episode of %d jobs, more than %d", len(e.JobIds), maxEpisodeJobs)
		}
	}
	s.mu.Lock()
	s.episodes = rs.Episodes
	s.mu.Unlock()
	for _, r := range rs.Routes {
		if len(r.Holders) > maxHolders || len(r.NodeCollector) > MaxRoutes {
			return fmt.Errorf("job %d: %d holders and %d node routes, more than %d and %d", r.JobId, len(r.Holders), len(r.NodeCollector), maxHolders, MaxRoutes)
		}
	}
	s.keeper.set(rs.Keeper)
	routes, aggs := map[uint32]string{}, map[uint32]string{}
	holders := map[uint32][]string{}
	for _, r := range rs.Routes {
		if a := r.NodeCollector[s.cfg.Node]; a != "" {
			routes[r.JobId] = a
		}
		if r.AggregationPoint != "" {
			aggs[r.JobId] = r.AggregationPoint
		}
		if len(r.Holders) > 0 {
			holders[r.JobId] = r.Holders
		}
	}
	s.mu.Lock()
	for job, h := range s.holders {
		if _, ok := holders[job]; !ok && len(holders) < maxRemembered {
			holders[job] = h
		}
	}
	s.holders = holders
	// A job that left the routes (it ended in Slurm's view) keeps its aggregation point
	// until its end on this node (Forget): the digest fetches from there.
	for job, a := range s.aggs {
		if _, ok := aggs[job]; !ok && len(aggs) < maxRemembered {
			aggs[job] = a
		}
	}
	s.routes, s.aggs, s.routed = routes, aggs, true
	s.mu.Unlock()
	return nil
}

// Route returns where a job's records go ("" : nowhere, the node keeps them).
func (s *Uplink) Route(job uint32) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.routeLocked(job)
}

func (s *Uplink) routeLocked(job uint32) string {
	if a, ok := s.routes[job]; ok {
		return a
	}
	if s.routed {
		return "" // the frontend balances: no route means local
	}
	return s.cfg.Addr
}

// Send queues a job's records of one interval; a newer cycle of the same job replaces an
// unsent older one. maxRecords is what the node would send if every condition of the
// strategy held (properties.Accumulator.MaxRecords; 0: unknown): the collector reports
// the job's measured load against it to the frontend.
func (s *Uplink) Send(job uint32, ts time.Time, seconds float64, recs []properties.Record, maxRecords int, energy sample.Energy) {
	if len(recs) == 0 {
		return
	}
	s.mu.Lock()
	s.noteStallLocked(job, ts.Unix(), recs)
	dest := s.routeLocked(job)
	if dest == "" {
		s.mu.Unlock()
		return
	}
	in := &pb.CycleRecords{JobId: job, Node: s.cfg.Node, Ts: ts.Unix(), Seconds: seconds, AggregationPoint: s.aggs[job], MaxRecords: uint32(max(maxRecords, 0))}
	for _, r := range recs {
		in.Records = append(in.Records, &pb.Record{Key: r.Key, Device: r.Device, Value: r.Value, Severity: r.Severity})
	}
	if len(energy.Totals) > 0 {
		in.Energy = &pb.NodeEnergy{Node: s.cfg.Node, Ts: in.Ts, Totals: energy.Totals, How: energy.How}
	}
	if old := s.pending[job]; old != nil && old.Ts != in.Ts {
		s.log.Debug().Uint32("job", job).Int64("ts", old.Ts).Msg("unsent cycle replaced by a newer one")
	}
	s.pending[job], s.dest[job] = in, dest
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// StallKey is the property whose severity says a job stalled on I/O in a cycle.
const StallKey = "io_wait"

// noteStallLocked keeps whether job stalled on I/O in cycle ts, for the frontend.
func (s *Uplink) noteStallLocked(job uint32, ts int64, recs []properties.Record) {
	st := s.stalls[ts]
	if st == nil {
		if len(s.stalls) >= maxStallCycles {
			oldest := ts
			for t := range s.stalls {
				oldest = min(oldest, t)
			}
			if oldest == ts {
				return // older than every cycle kept
			}
			delete(s.stalls, oldest)
		}
		st = &stall{}
		s.stalls[ts] = st
	}
	if len(*st) >= maxStallJobs {
		return
	}
	stalled := false
	for _, r := range recs {
		if r.Key == StallKey && r.Severity > 0 {
			stalled = true
		}
	}
	(*st)[job] = (*st)[job] || stalled
}

// Stalls returns the jobs measured and stalled on I/O per cycle since the last call,
// for the frontend's site-wide episodes.
func (s *Uplink) Stalls() []*pb.CycleStall {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*pb.CycleStall, 0, len(s.stalls))
	for ts, st := range s.stalls {
		c := &pb.CycleStall{Ts: ts}
		for job, stalled := range *st {
			c.Measured = append(c.Measured, job)
			if stalled {
				c.Stalled = append(c.Stalled, job)
			}
		}
		slices.Sort(c.Measured)
		slices.Sort(c.Stalled)
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b *pb.CycleStall) int { return cmp.Compare(a.Ts, b.Ts) })
	s.stalls = map[int64]*stall{}
	return out
}

// Episodes are the site-wide I/O episodes that stalled job, as the frontend last sent
// them.
func (s *Uplink) Episodes(job uint32) []episodes.Episode {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []episodes.Episode
	for _, e := range s.episodes {
		if slices.Contains(e.JobIds, job) {
			out = append(out, episodes.Episode{From: time.Unix(e.From, 0), To: time.Unix(e.To, 0), Jobs: int(e.Jobs), Stalled: int(e.Stalled), Peak: e.Peak})
		}
	}
	return out
}

// Pending returns how many jobs have a cycle waiting to be sent.
func (s *Uplink) Pending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.pending)
}

// Keep hands a job's final report to the tree's keeper (the frontend), in the
// background; without a keeper (no frontend has sent routes) it is not sent.
func (s *Uplink) Keep(job uint32, r digest.Report) { s.keeper.keep(job, r) }

// KeepNotice hands what a running job's user was told to the tree's keeper, in the
// background, as Keep does.
func (s *Uplink) KeepNotice(n digest.Notice) { s.keeper.keepNotice(n) }

// Run sends queued cycles until ctx is done; while cycles are left unsent (a collector
// down) it retries every retry interval. Final reports go to the keeper meanwhile. With
// nothing left to send it sleeps until a cycle is queued: an idle node's daemon is not
// woken for nothing.
func (s *Uplink) Run(ctx context.Context, retry time.Duration) {
	if retry <= 0 {
		retry = time.Second
	}
	go s.keeper.run(ctx)
	t := time.NewTimer(retry)
	t.Stop()
	defer t.Stop()
	defer s.clients.close()
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.wake:
		case <-t.C:
		}
		s.flush(ctx)
		s.mu.Lock()
		left := len(s.pending) > 0
		s.mu.Unlock()
		if left {
			t.Reset(retry)
		}
	}
}

// flush tries to send every pending cycle once (with bounded retries each); a collector
// that does not answer is skipped for the rest of this round.
func (s *Uplink) flush(ctx context.Context) {
	type item struct {
		in   *pb.CycleRecords
		addr string
	}
	s.mu.Lock()
	batch := make([]item, 0, len(s.pending))
	for job, in := range s.pending {
		batch = append(batch, item{in, s.dest[job]})
	}
	s.mu.Unlock()
	failed := map[string]bool{}
	for _, it := range batch {
		if failed[it.addr] {
			continue
		}
		err := s.push(ctx, it.addr, it.in)
		s.mu.Lock()
		if err == nil {
			if cur := s.pending[it.in.JobId]; cur == it.in {
				delete(s.pending, it.in.JobId)
				delete(s.dest, it.in.JobId)
			}
			if s.down[it.addr] {
				s.log.Info().Str("collector", it.addr).Msg("collector answers again")
				delete(s.down, it.addr)
			}
		} else {
			failed[it.addr] = true
			if !s.down[it.addr] {
				s.log.Warn().Err(err).Str("collector", it.addr).Msg("collector does not answer: keeping each job's last cycle until it does or the job is rerouted")
				s.down[it.addr] = true
			}
			// A reroute from the frontend sends the kept cycle to the new collector, with
			// the route's aggregation point: the one it was made with may be the old
			// collector, which merges no parts.
			if d := s.routeLocked(it.in.JobId); d != "" && d != it.addr && s.pending[it.in.JobId] == it.in {
				in := proto.Clone(it.in).(*pb.CycleRecords)
				in.AggregationPoint = s.aggs[in.JobId]
				s.pending[in.JobId], s.dest[in.JobId] = in, d
			}
		}
		s.mu.Unlock()
	}
}

func (s *Uplink) push(ctx context.Context, addr string, in *pb.CycleRecords) error {
	cl, err := s.clients.client(addr)
	if err != nil {
		return err
	}
	for i := 0; i < s.cfg.Retries; i++ {
		pctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
		var ack *pb.Ack
		ack, err = cl.Push(pctx, in)
		cancel()
		if err == nil && !ack.Ok {
			// The collector refused the data: retrying would not help.
			s.log.Error().Str("error", ack.Error).Uint32("job", in.JobId).Msg("collector refused a cycle")
			return nil
		}
		if err == nil {
			return nil
		}
	}
	return err
}

// Aggregation returns the agent holding the whole job: the frontend's aggregation point,
// else the collector all nodes send to ("" : none known).
func (s *Uplink) Aggregation(job uint32) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if a := s.aggs[job]; a != "" {
		return a
	}
	if !s.routed {
		return s.cfg.Addr
	}
	return ""
}

// FlushJob sends a job's pending cycle now (before its digest is made).
func (s *Uplink) FlushJob(ctx context.Context, job uint32) error {
	s.mu.Lock()
	in, addr := s.pending[job], s.dest[job]
	s.mu.Unlock()
	if in == nil {
		return nil
	}
	if err := s.push(ctx, addr, in); err != nil {
		return err
	}
	s.mu.Lock()
	if s.pending[job] == in {
		delete(s.pending, job)
		delete(s.dest, job)
	}
	s.mu.Unlock()
	return nil
}

// Holders returns the collectors that hold parts of the job, as the frontend last said.
func (s *Uplink) Holders(job uint32) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.holders[job]
}

// Fetch asks the agent at addr for the job's job-wide report, naming the collectors
// that hold its parts.
func (s *Uplink) Fetch(ctx context.Context, addr string, job uint32) (*digest.Report, error) {
	cl, err := s.clients.client(addr)
	if err != nil {
		return nil, err
	}
	sum, err := cl.Summary(ctx, &pb.JobSummaryRequest{JobId: job, Holders: s.Holders(job)})
	if err != nil {
		return nil, fmt.Errorf("job summary from %s: %w", addr, err)
	}
	if len(sum.ReportJson) == 0 {
		return nil, fmt.Errorf("job summary from %s: no report for job %d", addr, job)
	}
	var r digest.Report
	if err := json.Unmarshal(sum.ReportJson, &r); err != nil {
		return nil, fmt.Errorf("job summary from %s: %w", addr, err)
	}
	return &r, nil
}

// Forget drops what the uplink remembers of an ended job.
func (s *Uplink) Forget(job uint32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.aggs, job)
	delete(s.holders, job)
}

// JobWide returns a multi-node job's job-wide report from the agent holding the whole
// job, after sending this node's last cycle there. It gives up after a second and a half
// (within ctx); an error says why there is none (the digest then covers this node).
func (s *Uplink) JobWide(ctx context.Context, job uint32) (*digest.Report, error) {
	addr := s.Aggregation(job)
	if addr == "" {
		return nil, errors.New("no aggregation point known for the job")
	}
	ctx, cancel := context.WithTimeout(ctx, 1500*time.Millisecond)
	defer cancel()
	if err := s.FlushJob(ctx, job); err != nil {
		s.log.Debug().Err(err).Uint32("job", job).Msg("last cycle not sent before the digest")
	}
	fctx, fcancel := context.WithTimeout(ctx, time.Second) // leaves time to ask a holder
	wide, err := s.Fetch(fctx, addr, job)
	fcancel()
	if err != nil {
		// The aggregation point is down: any collector holding part of the job can
		// merge the others' parts.
		for _, h := range s.Holders(job) {
			if h == addr || ctx.Err() != nil {
				continue
			}
			s.log.Info().Err(err).Uint32("job", job).Str("instead", h).Msg("aggregation point does not answer: asking a collector of the job")
			if wide, err = s.Fetch(ctx, h, job); err == nil {
				addr = h
				break
			}
		}
	}
	if err != nil {
		return nil, err
	}
	if len(wide.Nodes) < 2 {
		return nil, fmt.Errorf("the report from %s covers %d node(s)", addr, len(wide.Nodes))
	}
	s.log.Info().Uint32("job", job).Strs("nodes", wide.Nodes).Str("from", addr).Msg("job-wide results fetched")
	return wide, nil
}
