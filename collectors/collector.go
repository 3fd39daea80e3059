package collectors

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"regexp"
	"sort"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/persyst/persyst/collectors/pb"
	"github.com/persyst/persyst/collectors/store"
	"github.com/persyst/persyst/collectors/treeauth"
	"github.com/persyst/persyst/digest"
	"github.com/persyst/persyst/exporter"
	"github.com/persyst/persyst/internal/ratelog"
	"github.com/persyst/persyst/properties"
)

// Config configures a Collector.
type Config struct {
	// Metrics counts pushes for Prometheus (nil: not counted).
	Metrics *exporter.Collector
	Name    string       // this collector's name in heartbeats and partial summaries
	Store   *store.Store // where results go
	Q       int          // quantile steps (10: deciles)
	// Keep is how many cycles of records per job are buffered (default 3): a node's push
	// for a cycle may arrive after the next cycle began.
	Keep int
	Log  zerolog.Logger
	Now  func() time.Time
	// Engine, if set, makes job-wide property results and the job's digest report
	// from everything the collector received of a job (JobSummary.report_json).
	Engine *properties.Engine
	// Self is the collector's address as the frontend names it in routes: a job whose
	// aggregation point is another agent gets this collector's summary of each cycle
	// forwarded there (PushPartial).
	Self string
	// Auth authenticates the collector's connections (nil: plain, to any address). With
	// it the collector calls only the agents the frontend's pings name.
	Auth *treeauth.Tree
	// Placement, if set, is asked on which nodes Slurm runs a job: a node's records of a
	// job not on it are refused.
	Placement Placement
}

// Collector receives a job's property records from the node daemons its routes point at
// and keeps, per job and cycle, the exact summary of every property over all the
// devices it received: when it holds the whole job (the medium jobs of the PerSyst thesis, §5.3),
// the quantiles are exact. Each push recomputes the cycle's summary from everything
// received for it so far and upserts it, so a late node only refines the cycle.
type Collector struct {
	pb.UnimplementedCollectorServer
	cfg Config

	d     *dialer
	place *placements

	settleMu sync.Mutex // one settle (take, summarize, forward) at a time
	mu       sync.Mutex
	cycles   map[uint32]map[int64]*cycle // job → cycle ts → records
	views    map[uint32]*jobView         // job → the whole job as received
	seen     map[uint32]time.Time        // job → its last push (jobs quiet for JobIdle are forgotten)
	sums     int                         // cycle summaries made (tests: a burst of pushes makes few)
	// settling counts cycles taken to be summarized and not yet stored and forwarded.
	settling int
	nodes    map[string]bool             // nodes heard from in the current cycle
	loads    map[uint32]*pb.JobLoad      // per job, its heaviest node-cycle since the last ping
	fwd      map[fwdKey]*pb.PartialCycle // newest unsent cycle summary per aggregation point and job
	down     map[string]bool             // aggregation points that did not answer
	wake     chan struct{}
	// refusedFwd logs the cycle summaries an aggregation point refused, at most a line in
	// 10 s: a refusal repeats every cycle of a job.
	refusedFwd *ratelog.Log
}

type fwdKey struct {
	to  string
	job uint32
	ts  int64
}

type cycle struct {
	byNode  map[string][]properties.Record
	records int    // in byNode
	dirty   bool   // received records not yet summarized
	agg     string // the job's aggregation point, as the last push named it
}

// Bounds of a collector: what one node may push at once, what one job's cycle may hold,
// how many jobs it follows, and how long it remembers a job that stopped pushing (its
// results stay in the database for persyst.conf's CollectorRetention).
const (
	MaxPushRecords  = 1 << 16
	MaxCycleRecords = 1 << 22
	MaxJobs         = 10000
	JobIdle         = 10 * time.Minute
)

// New returns a collector over cfg.Store.
func New(cfg Config) (*Collector, error) {
	if cfg.Store == nil {
		return nil, errors.New("collector: no store")
	}
	defaults(&cfg.Q, &cfg.Keep, &cfg.Now)
	return &Collector{cfg: cfg, d: newDialer(cfg.Auth), place: &placements{look: cfg.Placement, now: cfg.Now}, cycles: map[uint32]map[int64]*cycle{}, views: map[uint32]*jobView{}, seen: map[uint32]time.Time{},
		nodes: map[string]bool{}, loads: map[uint32]*pb.JobLoad{}, fwd: map[fwdKey]*pb.PartialCycle{}, down: map[string]bool{}, wake: make(chan struct{}, 1),
		refusedFwd: ratelog.New(cfg.Log, 10*time.Second, cfg.Now)}, nil
}

// defaults fills in the quantile steps (deciles), the cycles kept per job (3) and the
// clock of an agent's configuration.
func defaults(q, keep *int, now *func() time.Time) {
	if *q <= 0 {
		*q = 10
	}
	if *keep <= 0 {
		*keep = 3
	}
	if *now == nil {
		*now = time.Now
	}
}

// Push takes one node's records of one cycle of a job. The cycle is summarized (and
// forwarded to the job's aggregation point) in the background, at most once a second, and
// before any question about the job: a cycle of many nodes costs time linear in its
// records, not a summary per push.
func (c *Collector) Push(ctx context.Context, in *pb.CycleRecords) (*pb.Ack, error) {
	ack, reason, err := c.push(ctx, in)
	c.cfg.Metrics.Push(len(in.GetRecords()), reason)
	return ack, err
}

// Why a push is refused (persyst_collector_refused_pushes_total's reasons).
const (
	refusedMalformed = "malformed"   // a bad field, or more records than a push may hold
	refusedNotOnNode = "not_on_node" // records of a job Slurm does not run on the node
	refusedFull      = "full"        // the collector's bounds: jobs followed, records per cycle
	refusedLate      = "late"        // a cycle summarized and let go already
	refusedNoSlurm   = "no_slurm"    // Slurm could not be asked where the job runs: sent again
)

// push takes a push, or refuses it and says why (reason; "" : taken).
func (c *Collector) push(ctx context.Context, in *pb.CycleRecords) (*pb.Ack, string, error) {
	if err := checkPush(in); err != nil {
		return &pb.Ack{Error: err.Error()}, refusedMalformed, nil
	}
	if err := c.place.check(ctx, in.JobId, in.Node); err != nil {
		if errors.Is(err, errPlacement) {
			return &pb.Ack{Error: err.Error()}, refusedNotOnNode, nil
		}
		// Slurm could not be asked: the node keeps the cycle and sends it again.
		return nil, refusedNoSlurm, status.Error(codes.Unavailable, err.Error())
	}
	recs := make([]properties.Record, 0, len(in.Records))
	ts := time.Unix(in.Ts, 0).UTC()
	for _, r := range in.Records {
		// Devices are per node: "node2/cpu3".
		recs = append(recs, properties.Record{Time: ts, Key: r.Key, Device: in.Node + "/" + r.Device, Value: r.Value, Severity: r.Severity})
	}
	c.mu.Lock()
	jc := c.cycles[in.JobId]
	if jc == nil {
		if len(c.cycles) >= MaxJobs {
			c.mu.Unlock()
			return &pb.Ack{Error: fmt.Sprintf("collector %s follows %d jobs already, its most", c.cfg.Name, MaxJobs)}, refusedFull, nil
		}
		jc = map[int64]*cycle{}
		c.cycles[in.JobId] = jc
	}
	cy := jc[in.Ts]
	var dropped []cycleWork
	if cy == nil {
		if oldest, full := c.oldest(jc); full && in.Ts < oldest {
			// The cycle was summarized and let go: taken now, it would be let go again at
			// once, unsummarized, and the push lost while acknowledged.
			c.mu.Unlock()
			return &pb.Ack{Error: fmt.Sprintf("job %d: cycle %d came late: the collector holds its cycles from %d on", in.JobId, in.Ts, oldest)}, refusedLate, nil
		}
		cy = &cycle{byNode: map[string][]properties.Record{}}
		jc[in.Ts] = cy
		dropped = c.trim(in.JobId, jc)
	}
	if n := cy.records - len(cy.byNode[in.Node]) + len(recs); n > MaxCycleRecords {
		c.mu.Unlock()
		return &pb.Ack{Error: fmt.Sprintf("job %d: cycle %d would hold %d records, more than %d", in.JobId, in.Ts, n, MaxCycleRecords)}, refusedFull, nil
	}
	cy.records += len(recs) - len(cy.byNode[in.Node])
	cy.byNode[in.Node] = recs // a repeated push from a node replaces its records
	cy.dirty, cy.agg = true, in.AggregationPoint
	c.seen[in.JobId] = c.cfg.Now()
	if c.cfg.Engine != nil {
		v := c.views[in.JobId]
		if v == nil {
			v = newJobView()
			c.views[in.JobId] = v
		}
		v.add(in)
	}
	c.nodes[in.Node] = true
	c.noteLoad(in)
	c.mu.Unlock()
	if len(dropped) > 0 { // older cycles leaving the buffer before their summary
		c.settleMu.Lock()
		for _, w := range dropped {
			c.summarize(ctx, w)
		}
		c.settleMu.Unlock()
	}
	select {
	case c.wake <- struct{}{}:
	default:
	}
	return &pb.Ack{Ok: true}, "", nil
}

// oldest returns the oldest cycle a job's buffer holds, and whether the buffer is full
// (older cycles were let go). Caller holds mu.
func (c *Collector) oldest(jc map[int64]*cycle) (int64, bool) {
	if len(jc) < c.cfg.Keep {
		return 0, false
	}
	first := true
	var oldest int64
	for ts := range jc {
		if first || ts < oldest {
			oldest, first = ts, false
		}
	}
	return oldest, true
}

// settle summarizes and stores the cycles that received records since their last summary
// (of job only, unless job is 0), and forwards big jobs' cycles to their aggregation
// points.
func (c *Collector) settle(ctx context.Context, job uint32) {
	// Summaries are made and forwarded in the order their cycles were taken: an older
	// summary of a cycle never replaces a newer one.
	c.settleMu.Lock()
	defer c.settleMu.Unlock()
	var todo []cycleWork
	c.mu.Lock()
	for id, jc := range c.cycles {
		if job != 0 && id != job {
			continue
		}
		for ts, cy := range jc {
			if !cy.dirty {
				continue
			}
			todo = append(todo, cy.take(id, ts))
		}
	}
	c.settling += len(todo)
	c.mu.Unlock()
	for _, w := range todo {
		c.summarize(ctx, w)
		c.mu.Lock()
		c.settling--
		c.mu.Unlock()
	}
}

// cycleWork is a cycle to summarize and store (and forward).
type cycleWork struct {
	job   uint32
	ts    int64
	all   []properties.Record
	nodes []string
	agg   string
}

// take returns the cycle's records to summarize and marks it summarized. Caller holds mu.
func (cy *cycle) take(job uint32, ts int64) cycleWork {
	cy.dirty = false
	w := cycleWork{job: job, ts: ts, all: make([]properties.Record, 0, cy.records), agg: cy.agg}
	for n, rs := range cy.byNode {
		w.all = append(w.all, rs...)
		w.nodes = append(w.nodes, n)
	}
	return w
}

// summarize summarizes, stores and forwards one cycle.
func (c *Collector) summarize(ctx context.Context, w cycleWork) {
	c.mu.Lock()
	c.sums++
	c.mu.Unlock()
	{
		results, err := store.Summarize(w.all, c.cfg.Q)
		if err == nil {
			err = c.cfg.Store.PutCycle(ctx, w.job, time.Unix(w.ts, 0).UTC(), results)
		}
		if err == nil {
			c.cfg.Metrics.Stored(c.cfg.Now().Sub(time.Unix(w.ts, 0)))
		}
		if err != nil {
			c.cfg.Log.Error().Err(err).Uint32("job", w.job).Int64("ts", w.ts).Msg("cycle not stored")
		}
		if w.agg != "" && w.agg != c.cfg.Self {
			// A big job: the aggregation point merges this collector's part of the cycle
			// with the other collectors'.
			pc, err := CyclePartial(w.job, w.ts, c.name(), w.nodes, w.all, c.cfg.Q)
			if err != nil {
				c.cfg.Log.Error().Err(err).Uint32("job", w.job).Msg("cycle summary not forwarded")
			} else {
				c.forward(w.agg, pc)
			}
		}
	}
}

// forgetIdle drops what the collector holds of jobs that stopped pushing JobIdle ago
// (their results stay in the database).
func (c *Collector) forgetIdle() {
	cutoff := c.cfg.Now().Add(-JobIdle)
	c.mu.Lock()
	defer c.mu.Unlock()
	for job, t := range c.seen {
		if t.After(cutoff) {
			continue
		}
		delete(c.seen, job)
		delete(c.cycles, job)
		delete(c.views, job)
		delete(c.loads, job)
		c.place.forget(job)
		for k := range c.fwd {
			if k.job == job {
				delete(c.fwd, k)
			}
		}
	}
}

// Jobs returns how many jobs the collector holds in memory.
func (c *Collector) Jobs() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.seen)
}

// name is how the collector signs its partial summaries.
func (c *Collector) name() string {
	if c.cfg.Self != "" {
		return c.cfg.Self
	}
	return c.cfg.Name
}

// forward queues a cycle summary for an aggregation point. A newer summary of the same
// cycle replaces an unsent one (a later node's push refines the cycle); while the
// aggregation point is down, each job keeps its newest Keep cycles (while it answers,
// maxForward: a burst of cycles is not cut short before it could be sent).
func (c *Collector) forward(to string, pc *pb.PartialCycle) {
	c.mu.Lock()
	c.fwd[fwdKey{to, pc.JobId, pc.Ts}] = pc
	var ts []int64
	for k := range c.fwd {
		if k.to == to && k.job == pc.JobId {
			ts = append(ts, k.ts)
		}
	}
	keep := maxForward
	if c.down[to] {
		keep = c.cfg.Keep
	}
	if len(ts) > keep {
		sort.Slice(ts, func(i, j int) bool { return ts[i] < ts[j] })
		for _, t := range ts[:len(ts)-keep] {
			delete(c.fwd, fwdKey{to, pc.JobId, t})
		}
	}
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// maxForward bounds the cycle summaries of one job queued for an aggregation point that
// answers.
const maxForward = 64

// Run summarizes received cycles, forwards big jobs' cycle summaries to their
// aggregation points (retrying those that failed every second) and forgets idle jobs,
// until ctx is done. Push never waits for it; a burst of pushes is summarized at most
// once a second.
func (c *Collector) Run(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	defer c.d.close()
	var settled time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.wake:
		case <-t.C:
		}
		if time.Since(settled) >= time.Second {
			settled = time.Now()
			c.settle(ctx, 0)
			c.forgetIdle()
		}
		c.flush(ctx)
	}
}

// Forwarding returns how many cycles wait to be summarized or forwarded.
func (c *Collector) Forwarding() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := len(c.fwd) + c.settling
	for _, jc := range c.cycles {
		for _, cy := range jc {
			if cy.dirty {
				n++
			}
		}
	}
	return n
}

func (c *Collector) flush(ctx context.Context) {
	c.mu.Lock()
	batch := make(map[fwdKey]*pb.PartialCycle, len(c.fwd))
	for k, pc := range c.fwd {
		batch[k] = pc
	}
	c.mu.Unlock()
	failed := map[string]bool{}
	for k, pc := range batch {
		if failed[k.to] {
			continue
		}
		err := c.pushPartial(ctx, k.to, pc)
		c.mu.Lock()
		switch {
		case err == nil:
			if c.fwd[k] == pc {
				delete(c.fwd, k)
			}
			if c.down[k.to] {
				delete(c.down, k.to)
				c.cfg.Log.Info().Str("aggregation_point", k.to).Msg("aggregation point answers again")
			}
		case errors.Is(err, errRefused):
			if c.fwd[k] == pc {
				delete(c.fwd, k) // resending would not help
			}
			c.refusedFwd.Warn().Err(err).Str("aggregation_point", k.to).Uint32("job", k.job).Msg("cycle summary refused (at most one line in 10 s)")
		default:
			failed[k.to] = true
			if !c.down[k.to] {
				c.down[k.to] = true
				c.cfg.Log.Warn().Err(err).Str("aggregation_point", k.to).Msg("aggregation point does not answer: keeping each job's newest cycle summary")
			}
		}
		c.mu.Unlock()
	}
}

var errRefused = errors.New("refused")

func (c *Collector) pushPartial(ctx context.Context, to string, pc *pb.PartialCycle) error {
	cl, err := c.d.collector(to)
	if errors.Is(err, errNotInTree) {
		// A node named an address the tree does not have: never call it.
		return fmt.Errorf("%w: %v", errRefused, err)
	}
	if err != nil {
		return err
	}
	pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	ack, err := cl.PushPartial(pctx, pc)
	if status.Code(err) == codes.Unimplemented {
		// A collector, not an aggregation point (often this collector itself, when its
		// --self is not the address the frontend uses for it).
		return fmt.Errorf("%w: %s does not merge parts: %v", errRefused, to, err)
	}
	if err != nil {
		return err
	}
	if !ack.Ok {
		return fmt.Errorf("%w: %s", errRefused, ack.Error)
	}
	return nil
}

// trim keeps the newest Keep cycles of a job and returns those it drops that were not
// summarized yet. Caller holds mu.
func (c *Collector) trim(job uint32, jc map[int64]*cycle) []cycleWork {
	if len(jc) <= c.cfg.Keep {
		return nil
	}
	ts := make([]int64, 0, len(jc))
	for t := range jc {
		ts = append(ts, t)
	}
	sort.Slice(ts, func(i, j int) bool { return ts[i] < ts[j] })
	var out []cycleWork
	for _, t := range ts[:len(ts)-c.cfg.Keep] {
		if cy := jc[t]; cy.dirty {
			out = append(out, cy.take(job, t))
		}
		delete(jc, t)
	}
	return out
}

var nodeNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

func checkPush(in *pb.CycleRecords) error {
	switch {
	case in.JobId == 0:
		return errors.New("push: job_id missing")
	case in.Node == "":
		return errors.New("push: node missing")
	case in.Ts <= 0:
		return errors.New("push: ts missing")
	case !nodeNameRE.MatchString(in.Node):
		return fmt.Errorf("push: bad node name %q", properties.CleanText(in.Node, 64))
	case len(in.Records) > MaxPushRecords:
		return fmt.Errorf("push: %d records, more than %d", len(in.Records), MaxPushRecords)
	case !(in.Seconds >= 0 && in.Seconds <= 86400):
		return fmt.Errorf("push: interval of %v seconds", in.Seconds)
	}
	for i, r := range in.Records {
		if !properties.ValidKey(r.Key) {
			return fmt.Errorf("push: record %d: bad key %q", i, r.Key)
		}
		if r.Device == "" || len(r.Device) > 64 {
			return fmt.Errorf("push: record %d: device missing or longer than 64 bytes", i)
		}

		if !(r.Severity >= 0 && r.Severity <= 1) {
			return fmt.Errorf("push: record %d: severity %v outside [0, 1]", i, r.Severity)
		}
	}
	return nil
}

// Summary returns what the collector stored of a job: its per-cycle summaries and, when
// the job ended, its report.
func (c *Collector) Summary(ctx context.Context, in *pb.JobSummaryRequest) (*pb.JobSummary, error) {
	c.settle(ctx, in.JobId)
	out := &pb.JobSummary{JobId: in.JobId}
	byTS := map[int64]*pb.PartialCycle{}
	var order []int64
	keys, err := c.cfg.Store.Keys(ctx, in.JobId)
	if err != nil {
		return nil, err
	}
	for _, k := range keys {
		cs, err := c.cfg.Store.Cycles(ctx, in.JobId, k)
		if err != nil {
			return nil, err
		}
		for _, sc := range cs {
			t := sc.Time.Unix()
			pc := byTS[t]
			if pc == nil {
				pc = &pb.PartialCycle{JobId: in.JobId, Ts: t, From: c.cfg.Name}
				byTS[t] = pc
				order = append(order, t)
			}
			pc.Summaries = append(pc.Summaries, toPB(sc.CycleResult))
		}
	}
	sort.Slice(order, func(i, j int) bool { return order[i] < order[j] })
	for _, t := range order {
		out.Cycles = append(out.Cycles, byTS[t])
	}
	if c.cfg.Engine != nil {
		if rest := others(in.Holders, c.cfg.Self); len(rest) > 0 {
			// The job moved between collectors during its life: merge its parts.
			return c.mergedSummary(ctx, in, rest, out)
		}
		c.mu.Lock()
		v := c.views[in.JobId]
		var rep *digest.Report
		if v != nil {
			r := v.report(in.JobId, c.cfg.Engine)
			rep = &r
		}
		c.mu.Unlock()
		if rep != nil {
			b, err := json.Marshal(rep)
			if err != nil {
				return nil, err
			}
			out.ReportJson, out.Nodes = b, rep.Nodes
			// Kept for `persyst report --db`: the batch host asks at the job's end.
			if err := c.cfg.Store.PutReport(ctx, *rep); err != nil {
				c.cfg.Log.Warn().Err(err).Uint32("job", in.JobId).Msg("job report not stored")
			}
		}
	}
	return out, nil
}

// mergedSummary answers Summary for a job whose other parts are on the collectors rest.
func (c *Collector) mergedSummary(ctx context.Context, in *pb.JobSummaryRequest, rest []string, out *pb.JobSummary) (*pb.JobSummary, error) {
	parts := gather(ctx, c.d, rest, in.JobId, partWait, c.cfg.Log)
	c.mu.Lock()
	if v := c.views[in.JobId]; v != nil {
		parts = append(parts, v.partial(in.JobId, c.name()))
	}
	c.mu.Unlock()
	sum, err := mergedSummary(c.cfg.Engine, in.JobId, parts)
	if err != nil {
		return nil, fmt.Errorf("collector %s: %w", c.cfg.Name, err)
	}
	if rep, err := decodeReport(sum.ReportJson); err == nil {
		if err := c.cfg.Store.PutReport(ctx, *rep); err != nil {
			c.cfg.Log.Warn().Err(err).Uint32("job", in.JobId).Msg("job report not stored")
		}
	}
	out.ReportJson, out.Nodes = sum.ReportJson, sum.Nodes
	return out, nil
}

func toPB(r store.CycleResult) *pb.PropertySummary {
	s := &pb.PropertySummary{
		Key: r.Key, Count: r.Summary.Count, Nonfinite: r.Summary.NonFinite, Sum: r.Summary.Sum,
		Min: r.Summary.Min, Max: r.Summary.Max, Quantiles: r.Summary.Quantiles,
		SeverityInvalid: r.Severity.Invalid, Devices: r.Devices, TimeShare: r.TimeShare,
	}
	for _, n := range r.Severity.Counts {
		s.SeverityBins = append(s.SeverityBins, n)
	}
	return s
}

// Partial returns the collector's part of a job split over several collectors.
func (c *Collector) Partial(ctx context.Context, in *pb.JobSummaryRequest) (*pb.JobPartial, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v := c.views[in.JobId]
	if v == nil {
		return &pb.JobPartial{JobId: in.JobId, From: c.cfg.Name}, nil
	}
	// What this collector holds of the job is kept for `persyst report --db` (the whole
	// job when it held all of it).
	if err := c.cfg.Store.PutReport(ctx, v.report(in.JobId, c.cfg.Engine)); err != nil {
		c.cfg.Log.Warn().Err(err).Uint32("job", in.JobId).Msg("job report not stored")
	}
	return v.partial(in.JobId, c.cfg.Name), nil
}

// noteLoad keeps, per job, the node-cycle that sent the largest share of its maximum
// (c.mu held). A push without a maximum says nothing about the load; one with more
// records than its maximum is stored all the same, but its load claim is ignored.
func (c *Collector) noteLoad(in *pb.CycleRecords) {
	if in.MaxRecords == 0 {
		return
	}
	n := uint32(len(in.Records))
	if n > in.MaxRecords {
		c.cfg.Log.Warn().Uint32("job", in.JobId).Str("node", in.Node).Uint32("max_records", in.MaxRecords).Uint32("records", n).
			Msg("push: max_records below the records sent: load not measured")
		return
	}
	old := c.loads[in.JobId]
	// n/max > old.records/old.max, without division.
	if old == nil || uint64(n)*uint64(old.MaxRecords) > uint64(old.Records)*uint64(in.MaxRecords) {
		c.loads[in.JobId] = &pb.JobLoad{JobId: in.JobId, Records: n, MaxRecords: in.MaxRecords}
	}
}

// Ping answers a heartbeat with the collector's own: its load is the number of nodes it
// heard from since the last ping, and its jobs' measured loads since then (the frontend
// balances on them).
func (c *Collector) Ping(ctx context.Context, in *pb.Heartbeat) (*pb.Heartbeat, error) {
	if err := c.d.setTree(in.Tree); err != nil {
		return nil, err
	}
	c.mu.Lock()
	load := len(c.nodes)
	c.nodes = map[string]bool{}
	jobs := make([]*pb.JobLoad, 0, len(c.loads))
	for _, l := range c.loads {
		jobs = append(jobs, l)
	}
	c.loads = map[uint32]*pb.JobLoad{}
	c.mu.Unlock()
	sort.Slice(jobs, func(i, j int) bool { return jobs[i].JobId < jobs[j].JobId })
	return &pb.Heartbeat{Name: c.cfg.Name, Role: "collector", Ts: c.cfg.Now().Unix(), Load: float64(load), Jobs: jobs}, nil
}

// Serve runs a collector service (a Collector, or the Frontend merging multi-node jobs)
// on ln until ctx is done.
func Serve(ctx context.Context, ln net.Listener, c pb.CollectorServer, opts ...grpc.ServerOption) error {
	srv := grpc.NewServer(opts...)
	pb.RegisterCollectorServer(srv, c)
	stop := context.AfterFunc(ctx, srv.GracefulStop)
	defer stop()
	// A listener closed as the service stops (its owner's deferred close may come before
	// GracefulStop) is a stop, not an error.
	if err := srv.Serve(ln); err != nil && !errors.Is(err, grpc.ErrServerStopped) && ctx.Err() == nil {
		return fmt.Errorf("collector service: %w", err)
	}
	return nil
}
