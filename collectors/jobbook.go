package collectors

import (
	"maps"
	"sort"
	"sync"

	"github.com/persyst/persyst/collectors/pb"
)

// jobBook is what the frontend keeps of each running job from cycle to cycle: the
// collectors routed part of it so far (its holders) and its largest measured share of
// its maximum load, with their lock. A job that is no longer running is forgotten.
type jobBook struct {
	mu      sync.Mutex
	holders map[uint32]map[string]bool // job → collectors routed part of it so far
	shares  map[uint32]float64         // job → its largest measured share of the maximum load
}

func newJobBook() *jobBook {
	return &jobBook{holders: map[uint32]map[string]bool{}, shares: map[uint32]float64{}}
}

// noteLoads keeps each job's largest measured share of its maximum load.
func (b *jobBook) noteLoads(jobs []*pb.JobLoad) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, l := range jobs {
		if l.MaxRecords == 0 {
			continue
		}
		share := min(float64(l.Records)/float64(l.MaxRecords), 1)
		if old, ok := b.shares[l.JobId]; !ok || share > old {
			b.shares[l.JobId] = share
		}
	}
}

// share is a job's largest measured share of its maximum load; false before any report.
func (b *jobBook) share(job uint32) (float64, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	s, ok := b.shares[job]
	return s, ok
}

// addHolders adds the collectors of a job's route this cycle to those of its life so
// far and returns them all, sorted.
func (b *jobBook) addHolders(job uint32, sends map[string]string) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	h := b.holders[job]
	if h == nil {
		h = map[string]bool{}
		b.holders[job] = h
	}
	for _, a := range sends {
		h[a] = true
	}
	out := make([]string, 0, len(h))
	for a := range h {
		out = append(out, a)
	}
	sort.Strings(out)
	return out
}

// forgetEnded drops the holders and shares of jobs that are no longer running.
func (b *jobBook) forgetEnded(running map[uint32]bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	maps.DeleteFunc(b.holders, func(j uint32, _ map[string]bool) bool { return !running[j] })
	maps.DeleteFunc(b.shares, func(j uint32, _ float64) bool { return !running[j] })
}
