package accounting

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// sacctmgr's answers as Slurm 24.11 prints them (-n -P): accounts root > chem > {organic,
// inorganic}, root > phys; alice coordinates chem, bob phys and organic.
const (
	coordsOut = "root|\nchem|alice\nphys|bob\norganic|bob\ninorganic|\n"
	treeOut   = "root||\nroot||root\nchem|root|\nchem||carol\norganic|chem|\norganic||dave\ninorganic|chem|\nphys|root|\nphys||erin\n"
)

func TestCoordinators(t *testing.T) {
	got, err := parseCoordinators([]byte(coordsOut), []byte(treeOut))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{"alice": {"chem", "inorganic", "organic"}, "bob": {"organic", "phys"}}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("coordinators (-want +got):\n%s", d)
	}
	for _, bad := range []struct{ coords, tree string }{
		{"chem\n", treeOut},
		{coordsOut, "chem|root\n"},
	} {
		if _, err := parseCoordinators([]byte(bad.coords), []byte(bad.tree)); err == nil {
			t.Errorf("%q, %q: no error", bad.coords, bad.tree)
		}
	}
}

// TestCoordinatorCache: sacctmgr is asked once per TTL; a failure answers no accounts.
func TestCoordinatorCache(t *testing.T) {
	calls, fail := 0, false
	run := func(_ context.Context, name string, args ...string) ([]byte, error) {
		calls++
		if fail {
			return nil, errors.New("sacctmgr: cannot reach slurmdbd")
		}
		if args[3] == "account" {
			return []byte(coordsOut), nil
		}
		return []byte(treeOut), nil
	}
	clock := time.Date(2026, 12, 4, 0, 0, 0, 0, time.UTC)
	c := NewCoordinatorCache(run, time.Minute, func() time.Time { return clock })
	ctx := context.Background()
	for range 3 {
		if a, err := c.Accounts(ctx, "bob"); err != nil || !cmp.Equal(a, []string{"organic", "phys"}) {
			t.Errorf("bob: %v, %v", a, err)
		}
	}
	if calls != 2 {
		t.Errorf("%d sacctmgr calls, want 2 (one read)", calls)
	}
	clock, fail = clock.Add(time.Minute), true
	if a, err := c.Accounts(ctx, "bob"); err == nil || a != nil {
		t.Errorf("after a failed read: %v, %v", a, err)
	}
}
