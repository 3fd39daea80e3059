package daemon

import (
	"bufio"
	"context"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/persyst/persyst/daemon/wire"
	"github.com/persyst/persyst/sample"
)

func TestWriteJobsTable(t *testing.T) {
	jobs := []JobStatus{
		{Job: &Job{
			JobID: 42, User: "alice", UID: 1000, State: Ended, Cores: "0-3",
			Started: time.Date(2024, 6, 1, 12, 0, 0, 0, time.UTC),
			Ended:   tp(time.Date(2024, 6, 1, 13, 30, 5, 0, time.UTC)),
			Steps: []*Step{
				{ID: "batch", State: Ended},
				{ID: "0", State: Running},
			},
		}, Measurement: &sample.Summary{Samples: 90}},
		{Job: &Job{
			JobID: 1234567, UID: 0, State: OptedOut,
			Started: time.Date(2024, 6, 2, 8, 0, 0, 0, time.UTC),
			Steps:   []*Step{},
		}},
	}
	tests := []struct {
		name  string
		local *time.Location
		node  string
		jobs  []JobStatus
		want  string
	}{
		{
			name:  "two jobs UTC",
			local: time.UTC,
			node:  "node1",
			jobs:  jobs,
			want: "" +
				"JOBID    NODE   STATE      USER   UID   CORES  STEPS     SAMPLES  STARTED              ENDED\n" +
				"42       node1  ended      alice  1000  0-3    batch,0*  90       2024-06-01 12:00:00  2024-06-01 13:30:05\n" +
				"1234567  node1  opted_out  -      0     -      -         -        2024-06-02 08:00:00  -\n",
		},
		{
			name:  "two jobs in local time",
			local: time.FixedZone("UTC+2", 2*60*60),
			node:  "n",
			jobs:  jobs,
			want: "" +
				"JOBID    NODE  STATE      USER   UID   CORES  STEPS     SAMPLES  STARTED              ENDED\n" +
				"42       n     ended      alice  1000  0-3    batch,0*  90       2024-06-01 14:00:00  2024-06-01 15:30:05\n" +
				"1234567  n     opted_out  -      0     -      -         -        2024-06-02 10:00:00  -\n",
		},
		{
			name:  "no jobs",
			local: time.UTC,
			node:  "node1",
			want:  "JOBID  NODE  STATE  USER  UID  CORES  STEPS  SAMPLES  STARTED  ENDED\n",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			old := time.Local
			time.Local = tc.local
			t.Cleanup(func() { time.Local = old })
			var b strings.Builder
			if err := WriteJobsTable(&b, tc.node, tc.jobs); err != nil {
				t.Fatalf("WriteJobsTable: %v", err)
			}
			if diff := cmp.Diff(tc.want, b.String()); diff != "" {
				t.Errorf("WriteJobsTable mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestListJobsErrors(t *testing.T) {
	tests := []struct {
		name  string
		reply string // "" means no server at all
		want  []string
	}{
		{"no daemon", "", []string{"connect"}},
		{"daemon error", `{"v":1,"ok":false,"error":"busy"}`, []string{"daemon at", "busy"}},
		{"jobs not a list", `{"v":1,"ok":true,"node":"n","jobs":{"a":1}}`, []string{"reply from", "jobs"}},
		{"job of the wrong shape", `{"v":1,"ok":true,"node":"n","jobs":[{"job_id":"x"}]}`, []string{"reply from", "jobs"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sock := filepath.Join(socketDir(t), "s")
			if tc.reply != "" {
				ln, err := net.Listen("unix", sock)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { ln.Close() })
				go func() {
					c, err := ln.Accept()
					if err != nil {
						return
					}
					defer c.Close()
					_, _ = wire.ReadLine(bufio.NewReader(c))
					_, _ = c.Write([]byte(tc.reply + "\n"))
				}()
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			node, jobs, err := ListJobs(ctx, sock)
			if err == nil {
				t.Fatalf("ListJobs = %q, %d jobs, nil; want an error", node, len(jobs))
			}
			for _, w := range append(tc.want, sock) {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("ListJobs error %q lacks %q", err, w)
				}
			}
		})
	}
}
