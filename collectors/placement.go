package collectors

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/persyst/persyst/jobmap"
)

// Placement says on which nodes Slurm runs a job: its nodes, or an error wrapping
// jobmap.ErrNoJob when Slurm does not know it.
type Placement func(ctx context.Context, job uint32) ([]string, error)

// JobmapPlacement is the placement a job map gives.
func JobmapPlacement(m *jobmap.Map) Placement {
	return func(ctx context.Context, job uint32) ([]string, error) {
		j, err := m.Job(ctx, fmt.Sprint(job))
		if err != nil {
			return nil, err
		}
		return j.Nodes, nil
	}
}

// placements checks that a node pushes records only of jobs Slurm runs on it. Each job's
// nodes are asked once (concurrent pushes of a new job wait for the one question) and
// asked again, at most every placementAge, when a node is not among them (or Slurm did
// not know the job); a failed question is not remembered.
type placements struct {
	look Placement
	now  func() time.Time

	mu   sync.Mutex
	jobs map[uint32]*placed
}

type placed struct {
	done  chan struct{}
	nodes map[string]bool
	err   error // ErrNoJob: Slurm does not know the job
	at    time.Time
}

const (
	placementAge  = 30 * time.Second
	maxPlacements = 2 * MaxJobs
	lookTimeout   = 10 * time.Second
)

// errPlacement is a refusal: the job does not run on the node in Slurm's view.
var errPlacement = errors.New("not placed there by Slurm")

// check returns nil when Slurm runs job on node, an error wrapping errPlacement when it
// does not, and another error when Slurm could not be asked (the node keeps the records
// and tries again).
func (p *placements) check(ctx context.Context, job uint32, node string) error {
	if p == nil || p.look == nil {
		return nil
	}
	for attempt := 0; ; attempt++ {
		e, err := p.entry(job, attempt > 0)
		if err != nil {
			return err
		}
		select {
		case <-e.done:
		case <-ctx.Done():
			return ctx.Err()
		}
		switch {
		case e.err != nil && !errors.Is(e.err, jobmap.ErrNoJob):
			return fmt.Errorf("job %d: asking Slurm for its nodes: %w", job, e.err)
		case e.err == nil && e.nodes[node]:
			return nil
		case attempt == 0 && p.now().Sub(e.at) >= placementAge:
			continue // asked a while ago: ask again once
		case e.err != nil:
			return fmt.Errorf("job %d: Slurm does not know it: %w", job, errPlacement)
		default:
			return fmt.Errorf("job %d does not run on node %s: %w", job, node, errPlacement)
		}
	}
}

// entry returns the job's placement, asking Slurm when it is not known or when again is
// set and the known one is old.
func (p *placements) entry(job uint32, again bool) (*placed, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.jobs == nil {
		p.jobs = map[uint32]*placed{}
	}
	now := p.now()
	e := p.jobs[job]
	if e != nil && !(again && now.Sub(e.at) >= placementAge) {
		return e, nil
	}
	if e == nil && len(p.jobs) >= maxPlacements {
		for j, old := range p.jobs {
			if now.Sub(old.at) >= placementAge {
				delete(p.jobs, j)
			}
		}
		if len(p.jobs) >= maxPlacements {
			return nil, fmt.Errorf("job %d: %d jobs' placements being checked already", job, maxPlacements)
		}
	}
	e = &placed{done: make(chan struct{}), at: now}
	p.jobs[job] = e
	go p.ask(job, e)
	return e, nil
}

func (p *placements) ask(job uint32, e *placed) {
	ctx, cancel := context.WithTimeout(context.Background(), lookTimeout)
	defer cancel()
	nodes, err := p.look(ctx, job)
	e.err = err
	if err == nil {
		e.nodes = make(map[string]bool, len(nodes))
		for _, n := range nodes {
			e.nodes[n] = true
		}
	}
	if err != nil && !errors.Is(err, jobmap.ErrNoJob) {
		p.mu.Lock()
		if p.jobs[job] == e {
			delete(p.jobs, job) // not remembered: the next push asks again
		}
		p.mu.Unlock()
	}
	close(e.done)
}

// forget drops a job's placement.
func (p *placements) forget(job uint32) {
	if p == nil {
		return
	}
	p.mu.Lock()
	delete(p.jobs, job)
	p.mu.Unlock()
}
