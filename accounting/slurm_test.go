package accounting

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// script is a Runner that answers Slurm's commands from a script of replies, in order,
// and records what was run. (Slurm's real commands are run by the integration tests.)
type script struct {
	replies []reply
	ran     []string
}

type reply struct {
	out string
	err error
}

func (s *script) run(_ context.Context, name string, args ...string) ([]byte, error) {
	s.ran = append(s.ran, name+" "+strings.Join(args, " "))
	if len(s.ran) > len(s.replies) {
		return nil, errors.New("unexpected command")
	}
	r := s.replies[len(s.ran)-1]
	return []byte(r.out), r.err
}

func TestWrite(t *testing.T) {
	rep := report(1)
	tok, err := Encode(rep)
	if err != nil {
		t.Fatal(err)
	}
	finished := errors.New("scontrol update: exit status 1: Job has already finished for job 12")
	const sacct12 = "sacct -j 12 -a -X -n -P -D -o JobIDRaw,Cluster,State,AdminComment"
	tests := []struct {
		name     string
		existing string
		replies  []reply
		want     string
		wantRan  []string
	}{
		{"running job: scontrol", "", []reply{{}}, "written", []string{"scontrol update JobId=12_3 AdminComment=" + tok}},
		{"a site's text is kept", "site", []reply{{}}, "written", []string{"scontrol update JobId=12_3 AdminComment=site " + tok}},
		{"written once", "x " + tok, nil, "present", nil},
		{"finished: into the database, once it has the job's end, merged with what it holds", "", []reply{{err: finished}, {out: ""},
			{out: "12|persyst|RUNNING|note\n"}, {out: "12|persyst|COMPLETED|note\n"}, {out: " Modified jobs...\n  12 submitted at ...\n"}},
			"written", []string{"scontrol update JobId=12_3 AdminComment=" + tok, sacct12, sacct12, sacct12,
				"sacctmgr -i modify job where jobid=12 cluster=persyst set AdminComment=note " + tok}},
		{"finished: nothing modified at first (slurmdbd not ready), asked again", "", []reply{{err: finished}, {out: "12|persyst|COMPLETED|\n"},
			{err: errors.New("exit status 1: sacctmgr: No error")}, {out: "12|persyst|COMPLETED|\n"}, {out: " Modified jobs...\n"}},
			"written", []string{"scontrol update JobId=12_3 AdminComment=" + tok, sacct12,
				"sacctmgr -i modify job where jobid=12 cluster=persyst set AdminComment=" + tok, sacct12,
				"sacctmgr -i modify job where jobid=12 cluster=persyst set AdminComment=" + tok}},
		{"finished: sacctmgr fails", "", []reply{{err: finished}, {out: "12|persyst|COMPLETED|\n"}, {err: errors.New("exit status 1: sacctmgr: Access denied")}},
			"error", []string{"scontrol update JobId=12_3 AdminComment=" + tok, sacct12,
				"sacctmgr -i modify job where jobid=12 cluster=persyst set AdminComment=" + tok}},
		{"finished, cancelled", "", []reply{{err: finished}, {out: "12|persyst|CANCELLED by 0|\n"}, {out: " Modified jobs...\n"}},
			"written", []string{"scontrol update JobId=12_3 AdminComment=" + tok, sacct12,
				"sacctmgr -i modify job where jobid=12 cluster=persyst set AdminComment=" + tok}},
		{"finished, and the database has two jobs 12: none changed", "", []reply{{err: finished}, {out: "12|persyst|COMPLETED|\n12|persyst|FAILED|old\n"}},
			"error", []string{"scontrol update JobId=12_3 AdminComment=" + tok, sacct12}},
		{"finished, and the database has the summary already", "", []reply{{err: finished}, {out: "12|persyst|COMPLETED|" + tok + "\n"}},
			"present", []string{"scontrol update JobId=12_3 AdminComment=" + tok, sacct12}},
		{"finished, a site's text with capitals: sacctmgr 22.05 would lowercase it", "", []reply{{err: finished}, {out: "12|persyst|COMPLETED|Ticket 42 | checked\n"},
			{out: "slurm 22.05.8\n"}},
			"error", []string{"scontrol update JobId=12_3 AdminComment=" + tok, sacct12, "sacctmgr --version"}},
		{"finished, a site's text with capitals: sacctmgr of another release might", "", []reply{{err: finished}, {out: "12|persyst|COMPLETED|Ticket 42\n"},
			{err: errors.New("sacctmgr: not found")}},
			"error", []string{"scontrol update JobId=12_3 AdminComment=" + tok, sacct12, "sacctmgr --version"}},
		{"finished, a site's text with capitals: sacctmgr 24.11 keeps it", "", []reply{{err: finished}, {out: "12|persyst|COMPLETED|Ticket 42\n"},
			{out: "slurm-wlm 24.11.5\n"}, {out: " Modified jobs...\n"}},
			"written", []string{"scontrol update JobId=12_3 AdminComment=" + tok, sacct12, "sacctmgr --version",
				"sacctmgr -i modify job where jobid=12 cluster=persyst set AdminComment=Ticket 42 " + tok}},
		{"finished, a site's lowercase text with a bar", "", []reply{{err: finished}, {out: "12|persyst|TIMEOUT|a|b\n"}, {out: " Modified jobs...\n"}},
			"written", []string{"scontrol update JobId=12_3 AdminComment=" + tok, sacct12,
				"sacctmgr -i modify job where jobid=12 cluster=persyst set AdminComment=a|b " + tok}},
		{"slurmctld down", "", []reply{{err: errors.New("Unable to contact slurm controller")}}, "error", []string{"scontrol update JobId=12_3 AdminComment=" + tok}},
		{"no room", strings.Repeat("y", MaxField), nil, "no_room", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := &script{replies: tc.replies}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			got, _ := Write(ctx, s.run, "12_3", 12, tc.existing, rep)
			if got != tc.want {
				t.Errorf("Write = %q, want %q", got, tc.want)
			}
			if diff := cmp.Diff(tc.wantRan, s.ran); diff != "" {
				t.Errorf("commands (-want +got):\n%s", diff)
			}
		})
	}
}

func TestRead(t *testing.T) {
	tok, _ := Encode(report(1))
	tests := []struct {
		name, out, want, wantErr string
	}{
		{"the summary", "12|site note " + tok + "\n", tok, ""},
		{"a | in a site's text", "12|a|b " + tok + "\n", tok, ""},
		{"none", "12|site note\n", "", "no persyst summary"},
		{"not accounted", "", "", "not in Slurm's accounting"},
		{"another job's line only", "120|" + tok + "\n", "", "not in Slurm's accounting"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := &script{replies: []reply{{out: tc.out}}}
			got, _, err := Read(context.Background(), s.run, "12")
			if got != tc.want || (tc.wantErr == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("Read = %q, %v; want %q, error %q", got, err, tc.want, tc.wantErr)
			}
			if s.ran[0] != "sacct -j 12 -X -n -P -o JobID,AdminComment" {
				t.Errorf("ran %q", s.ran[0])
			}
		})
	}
}

// TestEnded: sacct's states of a job that has not ended, Slurm 25.11's EXPEDITING among
// them, and those that have.
func TestEnded(t *testing.T) {
	for st, want := range map[string]bool{"RUNNING": false, "EXPEDITING": false, "REQUEUE_HOLD": false, "SIGNALING": false,
		"COMPLETED": true, "CANCELLED by 0": true, "TIMEOUT": true, "OUT_OF_MEMORY": true} {
		if got := ended(st); got != want {
			t.Errorf("ended(%q) = %v, want %v", st, got, want)
		}
	}
}
