package sitesim

import (
	"context"
	"errors"
	"net"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/persyst/persyst/jobmap"
)

// TestSlurmReadByTheJobMap: the fake slurmrestd answers persyst's own job map (its
// v0.0.42 parser) with the jobs announced to it from another process, running and ended.
func TestSlurmReadByTheJobMap(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "restd.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: NewSlurm("sim")}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })

	t0 := time.Unix(1_790_000_000, 0).UTC()
	c := newSlurmClient(sock)
	c.start(&liveJob{id: 2001, user: "u0001", acct: "acct01"}, []string{"s00007", "s00008", "s00009"}, t0)
	c.start(&liveJob{id: 2002, user: "u0002", acct: "acct02"}, []string{"s00010"}, t0)
	c.end(2002, t0.Add(time.Minute))

	src, err := jobmap.NewRestSource(jobmap.RestConfig{URL: "unix:" + sock})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	jobs, err := src.Jobs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	type seen struct {
		ID                     uint32
		User, Account, Cluster string
		State, BatchHost       string
		Nodes                  []string
		Start                  time.Time
	}
	got := map[uint32]seen{}
	for _, j := range jobs {
		got[j.JobID] = seen{j.JobID, j.User, j.Account, j.Cluster, j.State, j.BatchHost, j.Nodes, j.Start}
	}
	want := map[uint32]seen{
		2001: {2001, "u0001", "acct01", "sim", "RUNNING", "s00007", []string{"s00007", "s00008", "s00009"}, t0},
		2002: {2002, "u0002", "acct02", "sim", "COMPLETED", "s00010", []string{"s00010"}, t0},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("jobs (-want +got):\n%s", d)
	}
	if j, err := src.Job(ctx, "2002"); err != nil || !j.End.Equal(t0.Add(time.Minute)) {
		t.Errorf("job 2002: %+v, %v", j, err)
	}
	if _, err := src.Job(ctx, "2999"); !errors.Is(err, jobmap.ErrNoJob) {
		t.Errorf("an unknown job: %v, want ErrNoJob", err)
	}
}
