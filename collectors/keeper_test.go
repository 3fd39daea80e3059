package collectors

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/persyst/persyst/collectors/pb"
	"github.com/persyst/persyst/collectors/store"
	"github.com/persyst/persyst/collectors/store/storetest"
	"github.com/persyst/persyst/digest"
	"github.com/persyst/persyst/jobmap"
)

// TestKeepNotice: the frontend keeps what a running job's batch host told its user, and
// lists the job as running and holding what it does not use while the batch host says
// the reason holds; a notice from another node, of an unknown reason or with times out
// of order or ahead of the clock, is refused.
func TestKeepNotice(t *testing.T) {
	ctx := context.Background()
	st := storetest.Open(t, store.Options{})
	start := time.Now().Add(-3 * time.Hour).Truncate(time.Second).UTC()
	facts := map[string]*jobmap.Job{
		"7": {JobID: 7, Name: "train", User: "alice", Account: "chem", Partition: "gpu", Nodes: []string{"n1", "n2"}, NodeList: "n[1-2]",
			BatchHost: "n2", State: "RUNNING", Start: start},
		"9": {JobID: 9, User: "bob", Account: "phys", Nodes: []string{"n3"}, NodeList: "n3", BatchHost: "n3", State: "RUNNING", Start: start},
	}
	f := keepingFrontend(t, st, facts)
	since, told := start.Add(time.Hour), start.Add(2*time.Hour)
	now := time.Now().Truncate(time.Second)
	notice := func(job uint32, node, reason string, seen, until time.Time) *pb.JobNotice {
		n := &pb.JobNotice{JobId: job, Node: node, Reason: reason, Since: since.Unix(), Told: told.Unix(), Seen: seen.Unix()}
		if !until.IsZero() {
			n.Until = until.Unix()
		}
		return n
	}
	cases := []struct {
		name string
		in   *pb.JobNotice
		want string // "" : kept
	}{
		{"from its batch host", notice(7, "n2", digest.NoticeGPUIdle, now, time.Time{}), ""},
		{"the other reason", notice(7, "n2", digest.NoticeCPUIdle, now, time.Time{}), ""},
		{"another job's", notice(9, "n3", digest.NoticeGPUIdle, now, time.Time{}), ""},
		{"from another node of the job", notice(7, "n1", digest.NoticeGPUIdle, now, time.Time{}), "notices come from its batch host n2"},
		{"a job the job map does not know", notice(8, "n3", digest.NoticeGPUIdle, now, time.Time{}), "Unavailable"},
		{"an unknown reason", notice(7, "n2", "<script>", now, time.Time{}), `reason "<script>"`},
		{"seen before since", notice(7, "n2", digest.NoticeGPUIdle, since.Add(-time.Minute), time.Time{}), "out of order"},
		{"seen an hour ahead", notice(7, "n2", digest.NoticeGPUIdle, now.Add(time.Hour), time.Time{}), "times after"},
		{"job 0", notice(0, "n2", digest.NoticeGPUIdle, now, time.Time{}), "job id 0"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ack, err := f.KeepNotice(ctx, c.in)
			got := ack.GetError()
			if err != nil {
				got = err.Error()
			}
			if (c.want == "") != ack.GetOk() || !strings.Contains(got, c.want) {
				t.Errorf("ack %v, %v; want error %q", ack, err, c.want)
			}
		})
	}
	running := func(scope store.Scope) []string {
		t.Helper()
		rs, err := st.Rollups().Running(ctx, store.SiteFilter{Scope: scope}, now.Add(-3*digest.NoticeRefresh))
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, r := range rs {
			out = append(out, fmt.Sprintf("job %d %s %s %s %s %v", r.Job.ID, r.Job.User, r.Job.Account, r.Reason, r.Node, r.SeenUntil.Sub(r.Since)))
		}
		return out
	}
	all := []string{"job 7 alice chem cpu_idle n2 " + now.Sub(since).String(), "job 7 alice chem gpu_idle n2 " + now.Sub(since).String(),
		"job 9 bob phys gpu_idle n3 " + now.Sub(since).String()}
	for _, c := range []struct {
		name  string
		scope store.Scope
		want  []string
	}{
		{"an admin", store.Scope{All: true}, all},
		{"alice", store.Scope{User: "alice"}, all[:2]},
		{"phys's coordinator", store.Scope{User: "carol", Accounts: []string{"phys"}}, all[2:]},
		{"nobody", store.Scope{}, nil},
	} {
		if d := cmp.Diff(c.want, running(c.scope)); d != "" {
			t.Errorf("running jobs %s sees (-want +got):\n%s", c.name, d)
		}
	}
	// The reason stops holding: the job is no longer listed for it; job 9 ends.
	if ack, err := f.KeepNotice(ctx, notice(7, "n2", digest.NoticeCPUIdle, now, now)); err != nil || !ack.GetOk() {
		t.Fatalf("cpu_idle over: %v, %v", ack, err)
	}
	facts["9"].State, facts["9"].End = "COMPLETED", now
	if err := st.PutJob(ctx, factsOf(facts["9"])); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(all[1:2], running(store.Scope{All: true})); d != "" {
		t.Errorf("running jobs after job 7's CPUs got busy and job 9 ended (-want +got):\n%s", d)
	}
	// A batch host that stopped saying it holds (a lost report): left out after three
	// refreshes.
	rs, err := st.Rollups().Running(ctx, store.SiteFilter{Scope: store.Scope{All: true}}, now.Add(time.Second))
	if err != nil || len(rs) != 0 {
		t.Errorf("running jobs seen after now: %v, %v; want none", rs, err)
	}
}
