package integration

import (
	"slices"
	"sync"
	"testing"
	"time"
)

// TestTurnsLongestFirst: the side-by-side tests' turns go to the longest waiting test
// first (those who asked together, once the gathering moment has passed; then, as a turn
// comes back, the longest still waiting), and never more run at once than the turns.
func TestTurnsLongestFirst(t *testing.T) {
	names := []string{"TestEndStates", "TestAdminView", "TestJobmap", "TestCoverage", "TestCoverage/one", "TestUnlisted"}
	run := func(free int, hold time.Duration) (order []string, most int) {
		s := &turns{free: free}
		var mu sync.Mutex
		running := 0
		var wg sync.WaitGroup
		for _, n := range names {
			wg.Add(1)
			go func() {
				defer wg.Done()
				done := s.take(n)
				mu.Lock()
				order = append(order, n)
				running++
				most = max(most, running)
				mu.Unlock()
				time.Sleep(hold)
				mu.Lock()
				running--
				mu.Unlock()
				done()
			}()
		}
		wg.Wait()
		return order, most
	}
	// EndStates 200, AdminView 180, Coverage 150, Jobmap 70, an unlisted test 60, a
	// subtest of Coverage's 37.5.
	want := []string{"TestEndStates", "TestAdminView", "TestCoverage", "TestJobmap", "TestUnlisted", "TestCoverage/one"}
	if order, _ := run(1, 20*time.Millisecond); !slices.Equal(order, want) {
		t.Errorf("one turn went to %v, want %v", order, want)
	}
	// Held 200 ms each: the two turns given together are both taken before either ends.
	if _, most := run(2, 200*time.Millisecond); most != 2 {
		t.Errorf("%d tests ran at once with 2 turns, want 2", most)
	}
}
