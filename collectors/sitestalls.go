package collectors

import (
	"context"
	"strconv"
	"time"

	"github.com/rs/zerolog"

	"github.com/persyst/persyst/balance"
	"github.com/persyst/persyst/collectors/pb"
	"github.com/persyst/persyst/collectors/store"
	"github.com/persyst/persyst/episodes"
)

// siteStalls gathers the nodes' I/O stalls (their answers to the routes) into site-wide
// episodes (its detector), keeps the episodes found in the store (the site view), and
// tells each node those that stalled its jobs.
type siteStalls struct {
	det   *episodes.Detector
	store *store.Store // nil: episodes are not kept
	log   zerolog.Logger
}

func newSiteStalls(period time.Duration, st *store.Store, log zerolog.Logger) *siteStalls {
	return &siteStalls{det: episodes.NewDetector(period), store: st, log: log}
}

// Bounds of a node's answer: the cycles, and the jobs in each.
const (
	maxStallCycles = 64
	maxStallJobs   = 4096
)

// note takes a node's jobs' I/O stalls for the site-wide episodes; an answer beyond the
// bounds is left out whole (and logged).
func (s *siteStalls) note(node string, stalls []*pb.CycleStall) {
	if len(stalls) > maxStallCycles {
		s.log.Warn().Str("node", node).Int("cycles", len(stalls)).Msg("I/O stalls of too many cycles: left out")
		return
	}
	cs := make([]episodes.Cycle, 0, len(stalls))
	for _, st := range stalls {
		if len(st.Measured) > maxStallJobs || len(st.Stalled) > maxStallJobs {
			s.log.Warn().Str("node", node).Int("jobs", len(st.Measured)).Msg("I/O stalls of too many jobs: left out")
			return
		}
		cs = append(cs, episodes.Cycle{TS: st.Ts, Measured: st.Measured, Stalled: st.Stalled})
	}
	s.det.Add(cs)
}

// episodes finds the site-wide I/O episodes in the cycles kept, keeps them in the store
// (the site view), and returns, per node, those that stalled jobs running there, each
// with those jobs.
func (s *siteStalls) episodes(ctx context.Context, jobs []balance.Job) map[string][]*pb.Episode {
	eps := s.det.Episodes()
	if len(eps) == 0 {
		return nil
	}
	if s.store != nil {
		for _, e := range eps {
			if err := s.store.PutEpisode(ctx, e); err != nil {
				s.log.Warn().Err(err).Msg("site-wide I/O episode not stored")
			}
		}
	}
	out := map[string][]*pb.Episode{}
	for _, e := range eps {
		per := map[string]*pb.Episode{}
		for _, j := range jobs {
			id, err := strconv.ParseUint(j.ID, 10, 32)
			if err != nil || !e.Touched(uint32(id)) {
				continue
			}
			for _, n := range j.Nodes {
				p := per[n]
				if p == nil {
					p = &pb.Episode{From: e.From.Unix(), To: e.To.Unix(), Jobs: uint32(e.Jobs), Stalled: uint32(e.Stalled), Peak: e.Peak}
					per[n] = p
				}
				p.JobIds = append(p.JobIds, uint32(id))
			}
		}
		for n, p := range per {
			out[n] = append(out[n], p)
		}
	}
	return out
}
