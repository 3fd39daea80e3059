package check

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/persyst/persyst/slurmver"
)

// TestSlurmTested: a release outside those persyst is tested with (slurmver.Tested) is
// warned of, by its series: every micro release of the newest series is tested.
func TestSlurmTested(t *testing.T) {
	newest := slurmver.NewestTested()
	for _, tc := range []struct {
		rel  slurmver.Release
		want Status
	}{
		{slurmver.Release{Major: 21, Minor: 8, Micro: 8}, Warn},
		{slurmver.OldestTested(), OK},
		{slurmver.Release{Major: 23, Minor: 11, Micro: 4}, OK},
		{slurmver.Release{Major: newest.Major, Minor: newest.Minor, Micro: 9}, OK},
		{slurmver.Release{Major: newest.Major, Minor: newest.Minor + 1}, Warn},
		{slurmver.Release{Major: newest.Major + 1}, Warn},
	} {
		got := checkSlurm(context.Background(), &Node{release: tc.rel, releaseFrom: "slurmd -V"})
		if diff := cmp.Diff(tc.want, got[0].Status); diff != "" {
			t.Errorf("Slurm %v: %q (-want +got):\n%s", tc.rel, got[0].Detail, diff)
		}
	}
}
