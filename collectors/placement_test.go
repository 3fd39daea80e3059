package collectors

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/persyst/persyst/collectors/pb"
	"github.com/persyst/persyst/collectors/store"
	"github.com/persyst/persyst/collectors/store/storetest"
	"github.com/persyst/persyst/jobmap"
	"github.com/rs/zerolog"
)

// slurmAnswers stands in for Slurm's job map (the integration tests ask the real one):
// job → nodes, or an error; it counts the questions.
type slurmAnswers struct {
	mu    sync.Mutex
	jobs  map[uint32][]string
	err   error
	asked atomic.Int32
}

func (s *slurmAnswers) look(ctx context.Context, job uint32) ([]string, error) {
	s.asked.Add(1)
	time.Sleep(time.Millisecond)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return nil, s.err
	}
	nodes, ok := s.jobs[job]
	if !ok {
		return nil, fmt.Errorf("job %d: %w", job, jobmap.ErrNoJob)
	}
	return nodes, nil
}

func TestPlacements(t *testing.T) {
	slurm := &slurmAnswers{jobs: map[uint32][]string{7: {"node1", "node2"}}}
	now := time.Unix(1_700_000_000, 0)
	var clock sync.Mutex
	p := &placements{look: slurm.look, now: func() time.Time { clock.Lock(); defer clock.Unlock(); return now }}
	ctx := context.Background()

	// 100 nodes' first pushes of a job at once: one question to Slurm.
	var wg sync.WaitGroup
	var failed atomic.Int32
	for i := 0; i < 100; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if p.check(ctx, 7, "node1") != nil {
				failed.Add(1)
			}
		}()
	}
	wg.Wait()
	if failed.Load() != 0 || slurm.asked.Load() != 1 {
		t.Errorf("100 concurrent pushes: %d refused, Slurm asked %d times; want 0 and 1", failed.Load(), slurm.asked.Load())
	}
	tests := []struct {
		name      string
		job       uint32
		node      string
		refused   bool // errPlacement
		transient bool // another error
	}{
		{"a node of the job", 7, "node2", false, false},
		{"another node", 7, "node3", true, false},
		{"a job Slurm does not know", 8, "node1", true, false},
	}
	for _, tc := range tests {
		err := p.check(ctx, tc.job, tc.node)
		if got := errors.Is(err, errPlacement); got != tc.refused || (err != nil && !got) != tc.transient {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
	asked := slurm.asked.Load()
	p.check(ctx, 7, "node3")
	if slurm.asked.Load() != asked {
		t.Errorf("a refused node asked Slurm again within %v", placementAge)
	}

	// Later, the job holds node3 too (Slurm's answer changed): asked again once.
	slurm.mu.Lock()
	slurm.jobs[7] = append(slurm.jobs[7], "node3")
	slurm.mu.Unlock()
	clock.Lock()
	now = now.Add(placementAge)
	clock.Unlock()
	if err := p.check(ctx, 7, "node3"); err != nil {
		t.Errorf("after %v, the job's new node is refused: %v", placementAge, err)
	}

	// Slurm does not answer: not a refusal, and not remembered.
	slurm.mu.Lock()
	slurm.err = errors.New("slurmctld: connection refused")
	slurm.mu.Unlock()
	for i := 0; i < 2; i++ {
		before := slurm.asked.Load()
		err := p.check(ctx, 9, "node1")
		if err == nil || errors.Is(err, errPlacement) || slurm.asked.Load() != before+1 {
			t.Errorf("Slurm down, attempt %d: %v (asked %d times)", i, err, slurm.asked.Load()-before)
		}
	}
}

// TestCollectorPlacement: a collector refuses a node's records of a job Slurm does not
// run there, and asks the node to keep them when Slurm cannot be asked.
func TestCollectorPlacement(t *testing.T) {
	slurm := &slurmAnswers{jobs: map[uint32][]string{7: {"node1"}}}
	ctx := context.Background()
	st := storetest.Open(t, store.Options{})
	c, err := New(Config{Name: "c1", Store: st, Log: zerolog.Nop(), Placement: slurm.look})
	if err != nil {
		t.Fatal(err)
	}
	push := func(job uint32, node string) (*pb.Ack, error) {
		return c.Push(ctx, &pb.CycleRecords{JobId: job, Node: node, Ts: 1_700_000_000, Seconds: 60,
			Records: []*pb.Record{{Key: "cpu_usage", Device: "cpu0", Value: 50}}})
	}
	if ack, err := push(7, "node1"); err != nil || !ack.Ok {
		t.Errorf("the job's node: %v, %v", ack, err)
	}
	if ack, err := push(7, "node2"); err != nil || ack.Ok || ack.Error != "job 7 does not run on node node2: not placed there by Slurm" {
		t.Errorf("another node: %v, %v", ack, err)
	}
	slurm.mu.Lock()
	slurm.err = errors.New("slurmctld down")
	slurm.mu.Unlock()
	if _, err := push(8, "node1"); status.Code(err) != codes.Unavailable {
		t.Errorf("Slurm down: %v, want Unavailable", err)
	}
}
