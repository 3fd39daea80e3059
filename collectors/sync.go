package collectors

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/persyst/persyst/collectors/pb"
	"github.com/persyst/persyst/collectors/store"
	"github.com/persyst/persyst/collectors/treeauth"
	"github.com/persyst/persyst/exporter"
	"github.com/persyst/persyst/properties"
	"github.com/persyst/persyst/quantile"
)

// SyncConfig configures a sync agent.
type SyncConfig struct {
	// Metrics counts parts for Prometheus (nil: not counted).
	Metrics *exporter.Sync
	Name    string // in heartbeats
	// Store keeps the merged per-cycle results of the jobs aggregated here; nil: they
	// are merged for the job's end only.
	Store *store.Store
	Q     int // quantile steps (10: deciles)
	// Keep is how many cycles per job are kept for merging late parts (default 3).
	Keep int
	// Collectors are asked for a job's parts when a request names no holders.
	Collectors []string
	// Auth authenticates the agent's connections (nil: plain, to any address). With it
	// the agent calls only Collectors and the agents the frontend's pings name.
	Auth   *treeauth.Tree
	Fixed  []string // further configured agents' addresses (the frontend's own merger)
	Engine *properties.Engine
	Log    zerolog.Logger
	Now    func() time.Time
}

// Sync is a sync agent (the PerSyst thesis, §4, §5.3): the aggregation point of big jobs, whose
// nodes' records go to several collectors. Every cycle each of those collectors pushes
// its summary of the job's cycle with a sketch per property (PushPartial); the sync
// agent merges them into the job's per-cycle results (quantiles estimated from the
// merged sketches within their 1 % bound, counts, sums, extremes and severities exact)
// and stores them. At the job's end it merges the collectors' job-wide parts into the
// job's report for the batch host (Summary).
type Sync struct {
	pb.UnimplementedCollectorServer
	cfg SyncConfig
	d   *dialer

	mergeMu sync.Mutex // one merge stored at a time (PushPartial)
	mu      sync.Mutex
	parts   map[uint32]map[int64]map[string]*pb.PartialCycle // job → ts → from → part
	last    map[uint32]time.Time                             // job → its last part (idle jobs are forgotten)
	swept   time.Time
	seen    map[string]bool // collectors heard from since the last ping
}

// maxParts bounds the collectors whose parts one cycle of a job merges.
const maxParts = 1024

// NewSync returns a sync agent.
func NewSync(cfg SyncConfig) (*Sync, error) {
	if cfg.Engine == nil {
		return nil, errors.New("sync agent: no property engine")
	}
	defaults(&cfg.Q, &cfg.Keep, &cfg.Now)
	return &Sync{cfg: cfg, d: newDialer(cfg.Auth, append(slices.Clone(cfg.Collectors), cfg.Fixed...)...), parts: map[uint32]map[int64]map[string]*pb.PartialCycle{}, last: map[uint32]time.Time{}, seen: map[string]bool{}}, nil
}

// Close closes the agent's connections.
func (s *Sync) Close() { s.d.close() }

// PushPartial takes one collector's summary of one cycle of a job and stores the
// cycle's results merged over every collector heard from so far.
func (s *Sync) PushPartial(ctx context.Context, in *pb.PartialCycle) (*pb.Ack, error) {
	ack, err := s.pushPartial(ctx, in)
	s.cfg.Metrics.Part(err == nil && ack.GetOk())
	return ack, err
}

// pushPartial checks a part and whose it is, keeps it among its cycle's parts and stores
// the cycle merged; a part refused is answered with the Ack's error.
func (s *Sync) pushPartial(ctx context.Context, in *pb.PartialCycle) (*pb.Ack, error) {
	if err := checkPartialCycle(in); err != nil {
		return &pb.Ack{Error: err.Error()}, nil
	}
	if p := treeauth.PeerOf(ctx); p.OK {
		// A collector's part is its own, whatever its message says: one collector cannot
		// replace another's.
		in.From = p.Identity.String()
	}
	cy, err := s.keepPart(in)
	if err != nil {
		return &pb.Ack{Error: err.Error()}, nil
	}
	return s.storeMerged(ctx, in, cy)
}

// keepPart keeps a collector's part among its cycle's parts, keeping the job's newest
// cycles only, and returns the cycle's parts by collector; an error says why the part
// is refused: too many jobs, a cycle older than those kept, too many collectors.
func (s *Sync) keepPart(in *pb.PartialCycle) (map[string]*pb.PartialCycle, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.cfg.Now()
	s.sweepLocked(now)
	jc := s.parts[in.JobId]
	if jc == nil {
		if len(s.parts) >= MaxJobs {
			return nil, fmt.Errorf("sync agent %s merges %d jobs already, its most", s.cfg.Name, MaxJobs)
		}
		jc = map[int64]map[string]*pb.PartialCycle{}
		s.parts[in.JobId] = jc
	}
	s.last[in.JobId] = now
	cy := jc[in.Ts]
	if cy == nil && len(jc) >= s.cfg.Keep && in.Ts < slices.Min(slices.Collect(maps.Keys(jc))) {
		// Its cycle's other parts are gone: merging this one alone would replace the
		// stored merge of them with less.
		return nil, fmt.Errorf("job %d: cycle %d is older than the %d cycles kept for merging; its merged result stands", in.JobId, in.Ts, s.cfg.Keep)
	}
	if cy == nil {
		cy = map[string]*pb.PartialCycle{}
		jc[in.Ts] = cy
		if len(jc) > s.cfg.Keep {
			ts := make([]int64, 0, len(jc))
			for t := range jc {
				ts = append(ts, t)
			}
			slices.Sort(ts)
			for _, t := range ts[:len(ts)-s.cfg.Keep] {
				delete(jc, t)
			}
		}
	}
	if _, ok := cy[in.From]; !ok && len(cy) >= maxParts {
		return nil, fmt.Errorf("job %d: cycle %d has parts from %d collectors already", in.JobId, in.Ts, maxParts)
	}
	cy[in.From] = in // a collector's newer summary of the cycle replaces its older one
	s.seen[in.From] = true
	return cy, nil
}

// sweepLocked forgets, at most once a minute, the parts of the jobs idle for longer
// than JobIdle.
func (s *Sync) sweepLocked(now time.Time) {
	if now.Sub(s.swept) <= time.Minute {
		return
	}
	s.swept = now
	for job, t := range s.last {
		if now.Sub(t) > JobIdle {
			delete(s.last, job)
			delete(s.parts, job)
		}
	}
}

// storeMerged merges the parts of in's cycle (cy, kept under s.mu) over every collector
// heard from so far and stores the cycle's results.
func (s *Sync) storeMerged(ctx context.Context, in *pb.PartialCycle, cy map[string]*pb.PartialCycle) (*pb.Ack, error) {
	// Merges are stored one at a time, each from the parts as they are when its turn
	// comes: two pushes of one cycle merged at once could otherwise store the older
	// merge last.
	s.mergeMu.Lock()
	defer s.mergeMu.Unlock()
	s.mu.Lock()
	parts := make([]*pb.PartialCycle, 0, len(cy))
	for _, p := range cy {
		parts = append(parts, p)
	}
	s.mu.Unlock()
	sort.Slice(parts, func(i, j int) bool { return parts[i].From < parts[j].From })
	results, err := MergeCycle(parts, s.cfg.Q)
	if err != nil {
		return &pb.Ack{Error: err.Error()}, nil
	}
	if s.cfg.Store != nil {
		if err := s.cfg.Store.PutCycle(ctx, in.JobId, time.Unix(in.Ts, 0), results); err != nil {
			s.cfg.Log.Error().Err(err).Uint32("job", in.JobId).Msg("merged cycle not stored")
			return &pb.Ack{Error: "store: " + err.Error()}, nil
		}
	}
	return &pb.Ack{Ok: true}, nil
}

// Summary merges the job's parts from its holders (or every known collector) into its
// job-wide report, and keeps the report in the store.
func (s *Sync) Summary(ctx context.Context, in *pb.JobSummaryRequest) (*pb.JobSummary, error) {
	addrs := others(in.Holders, "")
	if len(addrs) == 0 {
		addrs = s.cfg.Collectors
	}
	sum, err := mergedSummary(s.cfg.Engine, in.JobId, gather(ctx, s.d, addrs, in.JobId, partWait, s.cfg.Log))
	if err != nil {
		return nil, fmt.Errorf("sync agent %s: %w", s.cfg.Name, err)
	}
	s.keepReport(ctx, in.JobId, sum)
	s.mu.Lock()
	delete(s.parts, in.JobId)
	s.mu.Unlock()
	return sum, nil
}

// keepReport stores a job's merged report for `persyst report --db`.
func (s *Sync) keepReport(ctx context.Context, job uint32, sum *pb.JobSummary) {
	if s.cfg.Store == nil {
		return
	}
	rep, err := decodeReport(sum.ReportJson)
	if err == nil {
		err = s.cfg.Store.PutReport(ctx, *rep)
	}
	if err != nil {
		s.cfg.Log.Warn().Err(err).Uint32("job", job).Msg("job report not stored")
	}
}

// Ping answers a heartbeat; the load is the number of collectors that pushed since the
// last ping.
func (s *Sync) Ping(ctx context.Context, in *pb.Heartbeat) (*pb.Heartbeat, error) {
	s.mu.Lock()
	load := len(s.seen)
	s.seen = map[string]bool{}
	s.mu.Unlock()
	if err := s.d.setTree(in.Tree); err != nil {
		return nil, err
	}
	return &pb.Heartbeat{Name: s.cfg.Name, Role: "sync", Ts: s.cfg.Now().Unix(), Load: float64(load)}, nil
}

func checkPartialCycle(in *pb.PartialCycle) error {
	switch {
	case in.JobId == 0:
		return errors.New("partial cycle: job_id missing")
	case in.Ts <= 0:
		return errors.New("partial cycle: ts missing")
	case in.From == "":
		return errors.New("partial cycle: from missing")
	}
	for i, sm := range in.Summaries {
		if !properties.ValidKey(sm.Key) {
			return fmt.Errorf("partial cycle from %s: summary %d: bad key %q", in.From, i, sm.Key)
		}
		if sm.Count < 0 || sm.Nonfinite < 0 || sm.Devices < 0 || sm.SeverityInvalid < 0 {
			return fmt.Errorf("partial cycle from %s: %s: negative count", in.From, sm.Key)
		}
		if len(sm.SeverityBins) != 0 && len(sm.SeverityBins) != len(quantile.Severity{}.Counts) {
			return fmt.Errorf("partial cycle from %s: %s: %d severity bins, want %d", in.From, sm.Key, len(sm.SeverityBins), len(quantile.Severity{}.Counts))
		}
		for _, n := range sm.SeverityBins {
			if n < 0 {
				return fmt.Errorf("partial cycle from %s: %s: negative severity count", in.From, sm.Key)
			}
		}
	}
	return nil
}

// CyclePartial is a collector's summary of one cycle of a job it holds part of: per
// property the exact summary over its devices plus a sketch of the values, so that the
// job's aggregation point can merge the collectors' parts (MergeCycle).
func CyclePartial(job uint32, ts int64, from string, nodes []string, recs []properties.Record, q int) (*pb.PartialCycle, error) {
	results, err := store.Summarize(recs, q)
	if err != nil {
		return nil, err
	}
	values := map[string][]float64{}
	for _, r := range recs {
		values[r.Key] = append(values[r.Key], r.Value)
	}
	out := &pb.PartialCycle{JobId: job, Ts: ts, From: from, Nodes: slices.Sorted(slices.Values(nodes))}
	for _, r := range results {
		ps := toPB(r)
		sk, err := quantile.SketchOf(sketchAlpha, values[r.Key])
		if err != nil {
			return nil, err
		}
		if ps.Sketch, err = sk.MarshalBinary(); err != nil {
			return nil, err
		}
		out.Summaries = append(out.Summaries, ps)
	}
	return out, nil
}

// MergeCycle merges the collectors' summaries of one cycle of a job into its results:
// counts, sums, extremes, severity counts and devices add up exactly (the collectors
// hold disjoint nodes); quantiles come from the merged sketches (the default, within
// α = 1 %), or from PerSyst's estimation (quantile.MergeEstimate, §5.2) when a part
// carries no sketch. A single part is returned as it is (exact).
func MergeCycle(parts []*pb.PartialCycle, q int) ([]store.CycleResult, error) {
	type acc struct {
		res      store.CycleResult
		sketches []*quantile.Sketch
		sums     []quantile.Summary
		noSketch bool
	}
	byKey := map[string]*acc{}
	for _, p := range parts {
		for _, sm := range p.Summaries {
			a := byKey[sm.Key]
			if a == nil {
				a = &acc{res: store.CycleResult{Key: sm.Key}}
				byKey[sm.Key] = a
			}
			sum := quantile.Summary{Count: sm.Count, NonFinite: sm.Nonfinite, Sum: sm.Sum, Min: sm.Min, Max: sm.Max, Quantiles: sm.Quantiles}
			if sm.Count > 0 {
				sum.Mean = sm.Sum / float64(sm.Count)
			}
			a.sums = append(a.sums, sum)
			if len(sm.Sketch) == 0 {
				a.noSketch = true
			} else {
				sk, err := quantile.DecodeSketch(sm.Sketch)
				if err != nil {
					return nil, fmt.Errorf("part from %s: %s: %w", p.From, sm.Key, err)
				}
				a.sketches = append(a.sketches, sk)
			}
			for i, n := range sm.SeverityBins {
				a.res.Severity.Counts[i] += n
			}
			a.res.Severity.Invalid += sm.SeverityInvalid
			a.res.Devices += sm.Devices
		}
	}
	keys := slices.Sorted(func(yield func(string) bool) {
		for k := range byKey {
			if !yield(k) {
				return
			}
		}
	})
	out := make([]store.CycleResult, 0, len(keys))
	for _, k := range keys {
		a := byKey[k]
		switch {
		case len(a.sums) == 1 && a.sums[0].Q() == q:
			a.res.Summary = a.sums[0]
		case !a.noSketch:
			m, err := quantile.MergeSketches(a.sketches)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", k, err)
			}
			if a.res.Summary, err = m.Summary(q); err != nil {
				return nil, fmt.Errorf("%s: %w", k, err)
			}
		default:
			a.res.Summary = quantile.MergeEstimate(a.sums)
		}
		if a.res.Summary.Q() != q {
			return nil, fmt.Errorf("%s: parts with %d quantile steps, want %d", k, a.res.Summary.Q(), q)
		}
		severe := a.res.Severity.Total() - a.res.Severity.Counts[0]
		if base := max(a.res.Devices, a.res.Severity.Total()+a.res.Severity.Invalid); base > 0 {
			a.res.TimeShare = math.Min(1, float64(severe)/float64(base))
		}
		out = append(out, a.res)
	}
	return out, nil
}
